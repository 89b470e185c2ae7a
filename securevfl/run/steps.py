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

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.context import PartyView, PublicInfo, RunSpec, noise_seed
from securevfl.data import load_dataset, partition_columns, scale_block_to_unit_rows
from securevfl.data import schema_norm_bound as norm_bound_sq
from securevfl.data.custom import CSV_KEYS, register_own_schema
from securevfl.data.datasets import Dataset, DatasetInfo
from securevfl.data.own_csv import OwnFile, open_own_files
from securevfl.data.split import apply_split, draw_split
from securevfl.errors import ConfigError, DataError
from securevfl.methods.base import Method
from securevfl.rng import make_noise_rng
from securevfl.runtime.base import Runtime

OWN_CSV = "csv"  # spec.dataset when each party names only its own file (spec.data)


@dataclasses.dataclass
class Party:
    """One party as it lives in this process: the data it owns and what it holds of the run."""

    index: int
    source: str  # where its data comes from: a catalogue block, its own file, nothing (server)
    columns: np.ndarray  # global indices of its columns
    holds_labels: bool
    view: PartyView | None = None


@dataclasses.dataclass
class LocalData:
    """This process's share of the table: its parties' columns in one array (``ds.columns``),
    labels only where the label holder lives; the public column blocks of every data party."""

    ds: Dataset
    blocks: list[np.ndarray]
    parties: dict[int, Party]
    alignment: dict | None = None


def label_holder(spec: RunSpec, method: Method) -> int:
    """The party that holds the labels: the server for a method whose labels live there."""
    if method.labels_at_server and method.has_server(spec):
        return spec.parties
    return 0


def own_files(spec: RunSpec) -> bool:
    """Whether each party names only its own data file (``--data``)."""
    return spec.dataset == OWN_CSV


def party_blocks(groups: list[list[int]], spec: RunSpec, seed: int) -> list[np.ndarray]:
    """Each data party's columns (global indices): one block for a pooled one-party run."""
    if spec.parties == 1:  # a pooled baseline run with one party: it holds every column
        return [np.arange(sum(len(g) for g in groups))]
    scheme: Any = spec.partition
    if scheme == "roles":  # the dataset's declared holders (a public declaration)
        from securevfl.data.datasets import role_blocks

        scheme = role_blocks(
            spec.dataset, spec.dataset_options.get("encoding"), groups, spec.parties
        )
    return partition_columns(groups, spec.parties, scheme=scheme, seed=seed)


def _parties(wanted: list[int], blocks: list[np.ndarray], holder: int, source: str) -> dict:
    """The local parties' records: a data party's source and columns, a server's none."""
    K = len(blocks)
    return {
        k: Party(
            index=k,
            source=source if k < K else "none (server)",
            columns=blocks[k] if k < K else np.arange(0, dtype=int),
            holds_labels=k == holder,
        )
        for k in wanted
    }


def open_parties(spec: RunSpec, method: Method, rt: Runtime, wanted: list[int]) -> LocalData:
    """Step 1-3: every local party opens its own data; metadata and (with an ID column) PSI
    are exchanged with the peers inside (SPMD: every process calls this)."""
    if own_files(spec):
        return _open_own_files(spec, method, rt, wanted)
    return _open_catalogue(spec, method, wanted)


def _open_catalogue(spec: RunSpec, method: Method, wanted: list[int]) -> LocalData:
    seed = 0 if spec.seed is None else spec.seed  # synthetic data and the partition are public
    K = spec.parties

    def keep(groups: list[list[int]]) -> np.ndarray:
        blocks = party_blocks(groups, spec, seed)
        if method.pooled_data:
            return np.arange(sum(len(g) for g in groups))
        mine = [blocks[k] for k in wanted if k < K]
        return np.unique(np.concatenate(mine)) if mine else np.arange(0)

    opts = {k: v for k, v in spec.dataset_options.items() if k not in CSV_KEYS}
    ds = load_dataset(spec.dataset, seed=seed, keep=keep, **opts)
    holder = label_holder(spec, method)
    if holder not in wanted and not method.pooled_data:
        from securevfl.data.real import clear_caches

        ds.y = None  # a process without the label holder keeps no label (the loader read them)
        clear_caches()  # nor the whole table the loader cached
    blocks = party_blocks(ds.groups, spec, seed)
    parties = _parties(wanted, blocks, holder, f"dataset {spec.dataset}")
    return LocalData(ds=ds, blocks=blocks, parties=parties)


def _open_own_files(spec: RunSpec, method: Method, rt: Runtime, wanted: list[int]) -> LocalData:
    K, holder = spec.parties, label_holder(spec, method)
    if holder != 0:
        raise ConfigError(
            f"method {spec.method!r} keeps the labels at its server; with --data files the "
            "labels stay in party 0's file: run it with --dataset csv:... in one process"
        )
    mine = [k for k in wanted if k < K]
    if len(mine) > 1:
        raise ConfigError(
            f"--data is one party's own file, got a process holding parties {mine}: start each "
            "party with `securevfl party`, or name every file with --dataset csv:A.csv,B.csv"
        )
    if mine and spec.data is None:
        raise ConfigError(f"party {mine[0]} must name its own data file with --data, got none")
    opts = spec.dataset_options or {}
    files = {
        k: OwnFile(
            str(spec.data),
            opts.get("label_column"),
            opts.get("categories"),
            spec.bounds,
            opts.get("feature_column"),
        )
        for k in mine
    }
    own = open_own_files(rt, files, id_column=spec.id_column, data_parties=K, label_party=holder)
    meta = exchange_metadata(rt, {k: b.public() for k, b in own.items()}, K)
    counts = [meta[k]["columns"] for k in range(K)]
    starts = np.cumsum([0, *counts])
    blocks = [np.arange(starts[k], starts[k + 1]) for k in range(K)]
    total = int(starts[-1])
    alignment = own[0].alignment if 0 in own else None
    schema = {k: (b.header, b.scaling, b.classes, b.encoder) for k, b in own.items()}
    names = [meta[k]["names"] for k in range(K)]
    register_own_schema(spec.dataset, schema, blocks, alignment, names)
    X = own[mine[0]].X if mine else np.zeros((meta[0]["rows"], 0))
    held = blocks[mine[0]] if mine else np.arange(0, dtype=int)
    y = own[holder].y if holder in own else None
    task = meta[holder]["task"]
    fitted = [
        f"scaling ranges (min/max) of party {k}'s {counts[k]} CSV columns (no --bounds)"
        for k in range(K)
        if meta[k]["fitted"]
    ]
    if meta[holder].get("target_fitted"):
        fitted.append("scaling range (min/max) of the regression target")
    info = DatasetInfo(
        OWN_CSV,
        int(X.shape[0]),
        total,
        task,
        "each party's own file",
        "user's own",
        "user data",
        False,
    )
    ds = Dataset(
        name=OWN_CSV,
        task=task,
        X=np.ascontiguousarray(X),
        y=y,
        feature_names=[f"x{j}" for j in range(total)],
        groups=[[j] for j in range(total)],
        n_classes=meta[holder]["n_classes"],
        info=info,
        columns=held,
        fitted=tuple(fitted),
    )
    source = f"file {Path(spec.data).name}" if spec.data else "none (server)"
    parties = _parties(wanted, blocks, holder, source)
    return LocalData(ds=ds, blocks=blocks, parties=parties, alignment=alignment)


def exchange_metadata(rt: Runtime, mine: dict[int, dict], data_parties: int) -> dict[int, dict]:
    """Step 2: each data party's public facts, gathered at party 0 and sent to every party
    (unmetered control plane: counts and names, no values). Row counts must agree."""
    got = rt.collect(mine, dst=0)
    merged = None
    if got is not None:
        merged = {}
        for d in got.values():
            merged.update({int(k): v for k, v in d.items()})
    meta = rt.control(merged, src=0)
    meta = {int(k): v for k, v in meta.items()}
    if sorted(meta) != list(range(data_parties)):
        raise ConfigError(
            f"every data party must open its own file, got files from parties {sorted(meta)}"
        )
    rows = [meta[k]["rows"] for k in range(data_parties)]
    for k, n in enumerate(rows):
        if n != rows[0]:
            raise DataError(
                f"every party must hold the same samples: party {k} has {n} rows, party 0 "
                f"has {rows[0]} (align them by an ID column: --id-column)"
            )
    return meta


SplitSource = Callable[[int], tuple[np.ndarray, np.ndarray]]


def split_from_label_holder(
    spec: RunSpec, method: Method, rt: Runtime, *, fixed: bool = False
) -> SplitSource:
    """Step 4: the label holder draws positions for ``n`` rows from the CSPRNG (seeded only
    where the noise is) and sends them; every other party receives them. The draw reads no
    labels (:mod:`securevfl.data.split`), so what a data party receives is label-independent.
    ``fixed``: drawn from ``--seed`` (default 0) whatever the noise: an audit's trials differ
    in one row only, so they must share one split."""
    holder = label_holder(spec, method)
    seed = (spec.seed or 0) if fixed else noise_seed(spec)

    def split_of(n: int) -> tuple[np.ndarray, np.ndarray]:
        if hasattr(rt, "limit_frames"):  # n positions of 8 bytes (n is public: every row count)
            from securevfl.runtime.frame_limits import MAX_FRAME, SLACK_BYTES

            rt.limit_frames(max(rt.frame_limit, min(16 * n + SLACK_BYTES, MAX_FRAME)))
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


PROBE_ENV = "SECUREVFL_PROBE_DIR"  # tests: where each process writes what it holds


def write_probe(data: LocalData, train: Dataset, test: Dataset) -> None:
    """Tests only (``$SECUREVFL_PROBE_DIR`` set): write what this process holds once its views
    are built: each local party's columns and whether it holds labels, and the sha256 of every
    numeric array reachable from a live object, so a test can check that a data party's
    process holds no label vector and no other party's block."""
    import gc
    import hashlib
    import json
    import os

    where = os.environ.get(PROBE_ENV)
    if not where:
        return
    arrays: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        for a in gc.get_referents(obj):
            if isinstance(a, np.ndarray) and a.dtype.kind in "iuf" and a.size:
                h = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
                arrays[h] = list(a.shape)
    doc = {
        "parties": {
            str(k): {
                "source": p.source,
                "columns": [int(c) for c in p.columns],
                "holds_labels": p.holds_labels,
                "view_labels": p.view is not None and p.view.y_train is not None,
            }
            for k, p in data.parties.items()
        },
        "train_labels": train.y is not None,
        "arrays": arrays,
    }
    name = "_".join(str(k) for k in data.parties) or "none"
    with open(os.path.join(where, f"probe_{name}.json"), "w") as f:
        json.dump(doc, f)
