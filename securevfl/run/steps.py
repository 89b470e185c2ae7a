"""The steps every party takes before training, in the order of a run.

A run is a conversation between parties. Each process runs these steps for the parties that
live there (SPMD): :func:`open_parties` (each party opens its own data: a catalogue dataset's
block, or its own CSV file), :func:`exchange_metadata` (public facts: row and column counts,
column names, the task), alignment by PSI inside :func:`open_parties` when the files are keyed
by an ID column, :func:`receive_split` (the label holder draws the row split and sends only
positions), :func:`centre_columns`, and :func:`party_views`. In-process, every party lives in
one process; with ``--processes`` or on hosts of their own each process holds one party, and a
data party never opens another party's data or holds a label.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from securevfl.context import PartyView, PublicInfo, RunSpec
from securevfl.data import scale_block_to_unit_rows
from securevfl.data import schema_norm_bound as norm_bound_sq
from securevfl.data.datasets import Dataset
from securevfl.data.split import apply_split, draw_split
from securevfl.methods.base import Method
from securevfl.rng import make_noise_rng
from securevfl.run.open_data import exchange_metadata, open_parties
from securevfl.run.parties import OWN_CSV, LocalData, Party, label_holder, own_files, party_blocks
from securevfl.run.probe import PROBE_ENV, write_probe
from securevfl.runtime.base import Runtime

__all__ = [
    "LocalData",
    "OWN_CSV",
    "PROBE_ENV",
    "Party",
    "SplitSource",
    "exchange_metadata",
    "label_holder",
    "open_parties",
    "own_files",
    "party_blocks",
    "party_views",
    "pooled_arrays",
    "public_info",
    "receive_split",
    "split_from_label_holder",
    "write_probe",
]


SplitSource = Callable[[int], tuple[np.ndarray, np.ndarray]]


def split_from_label_holder(spec: RunSpec, method: Method, rt: Runtime) -> SplitSource:
    """Step 4: the label holder draws positions for ``n`` rows from the public ``--seed``
    (default 0) and sends them; every other party receives them. The draw reads no labels
    (:mod:`securevfl.data.split`), so what a data party receives is label-independent whether
    or not the seed is known. Seeded, not secret: two runs at one seed (a DP method and the
    non-private references, an audit's trials, a resumed run) score the same test rows."""
    holder = label_holder(spec, method)
    seed = spec.seed or 0

    def split_of(n: int) -> tuple[np.ndarray, np.ndarray]:
        if hasattr(rt, "limit_frames"):  # n positions of 8 bytes (n is public: every row count)
            from securevfl.runtime.frame_limits import MAX_FRAME, SLACK_BYTES

            rt.limit_frames(max(rt.frame_limit, min(16 * n + SLACK_BYTES, MAX_FRAME)))
            # a barrier: a peer still below the new limit would refuse the positions' frame
            # (seen at 300k rows: a 2.4 MB frame against the 1 MB default, the receiver late)
            rt.collect(None, dst=holder)
        drawn = None
        if rt.here(holder):
            drawn = draw_split(n, rng=make_noise_rng(seed, purpose="split"))
        got = rt.control(drawn, src=holder)
        if rt.view is not None and rt.view.party != holder:  # what the recorded party received
            rt.view.received(src=holder, dst=rt.view.party, phase="split", payload=got)
        return got

    return split_of


def receive_split(data: LocalData, split_of: SplitSource) -> tuple[Dataset, Dataset, np.ndarray]:
    """The local columns split at the label holder's positions (in place); the test rows."""
    train_idx, test_idx = split_of(data.ds.n)
    train, test = apply_split(data.ds, train_idx, test_idx)
    return train, test, np.asarray(test_idx)


def public_info(
    spec: RunSpec, method: Method, train: Dataset, test: Dataset, blocks: list[np.ndarray]
) -> PublicInfo:
    """Facts every party knows: sizes and schema, never values."""
    K = spec.parties
    server = K if method.has_server(spec) else None
    return PublicInfo(
        dataset=train.name,
        task=train.task,
        n_classes=train.n_classes,
        n_train=train.n,
        n_test=test.n,
        n_features=sum(len(g) for g in train.groups),
        features_per_party=tuple(len(b) for b in blocks),
        data_parties=K,
        n_parties=method.n_parties(spec),
        label_party=label_holder(spec, method),
        server=server,
        row_norm_bound_sq=sum(norm_bound_sq(train.groups, b) for b in blocks),
        fitted=tuple(train.fitted),
        dp_bounds=tuple(train.dp_bounds),
    )


def party_views(
    data: LocalData, train: Dataset, test: Dataset, info: PublicInfo, pooled_data: bool
) -> dict[int, PartyView]:
    """Step 6: each local party's view: its columns scaled to unit rows; labels at the holder."""
    views: dict[int, PartyView] = {}
    held, bound_sq = train.columns, info.row_norm_bound_sq
    for k, party in data.parties.items():
        cols = party.columns
        pos = cols if held is None else np.searchsorted(held, cols)
        # a process's only data party owns the split's arrays: scale them where they are
        alone = (
            not pooled_data
            and train.X.dtype == np.float64
            and np.array_equal(pos, np.arange(train.X.shape[1]))
        )
        views[k] = PartyView(
            index=k,
            columns=cols,
            X_train=_unit_rows(train.X, None if alone else pos, bound_sq),
            X_test=_unit_rows(test.X, None if alone else pos, bound_sq),
        )
        if party.holds_labels:
            views[k].y_train, views[k].y_test = train.y, test.y
        party.view = views[k]
    return views


def _unit_rows(X: np.ndarray, pos: np.ndarray | None, bound_sq: float) -> np.ndarray:
    """Columns ``pos`` of X scaled to unit rows; ``pos=None``: all of X, scaled in place.

    Always C-ordered: BLAS sums in an order that depends on the layout, and a party must compute
    bit for bit the same in-process as in its own process (same fingerprints)."""
    if pos is not None:
        return np.ascontiguousarray(scale_block_to_unit_rows(X[:, pos], total_bound_sq=bound_sq))
    return np.ascontiguousarray(np.divide(X, math.sqrt(bound_sq), out=X))  # no copy if C-ordered


def pooled_arrays(train: Dataset, test: Dataset, bound_sq: float) -> Callable[[], Any]:
    """The whole table for a method that may see pooled data (a centralized baseline)."""

    def pooled():
        s = np.sqrt(bound_sq)
        return train.X / s, train.y, test.X / s, test.y

    return pooled
