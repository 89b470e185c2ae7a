"""A party's own CSV file: read, aligned with the peers' by PSI, encoded and scaled where it lives.

In a run where each party names only its own file (``securevfl party --data own.csv``, or
``securevfl run --processes --dataset csv:a.csv,b.csv``, which starts each process with one
file), every party opens its file here. With an ID column the rows are aligned by PSI on the
run's runtime (:func:`securevfl.data.alignment.align_tables`, metered); without one every file
must list the same rows in the same order. The label holder (party 0) takes the label column out
of its own table; no other party reads or receives a label. Text, blank cells and scaling follow
the same rules as the in-process ``csv:`` loader (:mod:`securevfl.data.custom`,
:mod:`securevfl.data.csv_columns`), so a party's block is the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.data.bounds import (
    DpRanges,
    check_covered,
    is_indicator,
    read_bounds,
    released_domains,
)
from securevfl.data.cells import Columns
from securevfl.data.csv_columns import check_not_id, encode_rows, fit_rules, read_categories
from securevfl.data.preprocess import scale_by_ranges, scale_target
from securevfl.data.saved_encoder import rules_to_json
from securevfl.errors import ConfigError, DataError
from securevfl.runtime.base import Runtime


@dataclass
class OwnFile:
    """What one party says about its file: the path and how to read it (its own options)."""

    path: str
    label_column: str | None = None  # the label holder's only
    categories: str | None = None
    bounds: str | None = None
    dp: DpRanges | None = None  # without --bounds in a run with an ε
    feature_column: str | None = None  # a first column kept as a feature though it looks like an ID


@dataclass
class OwnBlock:
    """One party's encoded block and the public facts about it."""

    party: int
    X: np.ndarray  # rows x columns, each column scaled to [-1, 1]
    header: list[str]  # raw column names (ID and label columns removed)
    names: list[str]  # encoded names: one-hot 'col=cat', missing indicators 'col_missing'
    scaling: list[list[float]]  # each encoded column's (lo, hi)
    encoder: list[dict] = field(default_factory=list)  # the saved rules: raw columns -> inputs
    with_missing: list[str] = field(default_factory=list)
    fitted: bool = False  # scaled by its own exact min/max (no --bounds, no ε)
    dp_bounds: bool = False  # its ranges released under the budget (no --bounds, an ε)
    y: np.ndarray | None = None  # the label holder's only
    task: str | None = None
    classes: list | None = None
    target_fitted: bool = False
    alignment: dict | None = None  # PSI's record, at party 0

    def public(self) -> dict[str, Any]:
        """What the party tells its peers: counts and its column names (no values)."""
        out = {
            "rows": int(self.X.shape[0]),
            "columns": int(self.X.shape[1]),
            "names": list(self.names),
            "with_missing": list(self.with_missing),
            "fitted": self.fitted,
            "dp_bounds": self.dp_bounds,
        }
        if self.task is not None:
            # the number of classes is schema; the class values stay with the label holder
            n_classes = None if self.classes is None else len(self.classes)
            out.update(task=self.task, n_classes=n_classes, target_fitted=self.target_fitted)
        return out


def _text_tables(
    rt: Runtime, files: dict[int, OwnFile], id_column: str | None, data_parties: int
) -> tuple[dict[int, tuple[list[str], Columns]], dict | None]:
    """Each local party's header and columns (ID column removed; aligned when given); a CSV or
    a Parquet source (:mod:`securevfl.data.arrow_input`)."""
    from securevfl.data.arrow_input import read_own_table

    if id_column is None:
        return {k: read_own_table(f.path, k) for k, f in files.items()}, None
    from securevfl.data.alignment import align_tables, read_party_csv

    tables = {k: read_party_csv(f.path, id_column, k) for k, f in files.items()}
    kept, record = align_tables(rt, tables, workers=1, parties=data_parties)
    return {k: t.features() for k, t in kept.items()}, record


def _take_labels(
    block: OwnBlock, label: str, given: bool, where: str, header: list, rows: Columns
) -> tuple:
    from securevfl.data.arrow_input import without
    from securevfl.data.custom import _labels, label_task

    if label not in header:
        flag = "" if given else " (name another with --label-column)"
        raise DataError(f"party 0's CSV must have a {label!r} column{flag}, got columns {header}")
    j = header.index(label)
    block.y = _labels(label, where, rows.column(j))
    block.task = label_task(block.y)
    return without(header, rows, j)


def _scale(block: OwnBlock, raw: np.ndarray, bounds: str | None, dp: DpRanges | None) -> None:
    declared = None if bounds is None else read_bounds(bounds)
    if declared is not None:  # one-hot and missing-indicator columns live in [0, 1] (public)
        for n in block.names:
            if n not in declared and is_indicator(n):
                declared[n] = (0.0, 1.0)
        check_covered(declared, block.names + (["label"] if block.task == "regression" else []))
    regression = block.y is not None and block.task == "regression"
    target_dom = None if declared is None or not regression else tuple(declared["label"])
    if declared is None and dp is not None:  # released under the budget: no exact min/max
        y = block.y if regression else None
        ranges, target_dom = released_domains(block.names, raw, dp.plan, dp.rng, target=y)
        block.dp_bounds = True
    elif declared is not None:
        ranges = [tuple(declared[n]) for n in block.names]
    else:  # a run with no ε: each column's exact min/max (a blank takes no part)
        ranges = [(float(np.nanmin(c)), float(np.nanmax(c))) for c in raw.T]
        block.fitted = True
    block.scaling = [list(r) for r in ranges]
    # the one scaling rule of training and predict: clipped in, a blank at the midpoint
    block.X = scale_by_ranges(raw, block.scaling)
    if block.y is None:
        return
    if regression:
        block.y, _ = scale_target(block.y.astype(float), domain=target_dom)
        block.target_fitted = target_dom is None
    else:
        classes, block.y = np.unique(block.y, return_inverse=True)
        block.classes = classes.tolist()
        if block.task == "binary" and len(classes) != 2:
            raise DataError(f"a binary task needs exactly 2 label values, got {len(classes)}")


def open_own_files(
    rt: Runtime,
    files: dict[int, OwnFile],
    *,
    id_column: str | None,
    data_parties: int,
    label_party: int = 0,
) -> dict[int, OwnBlock]:
    """SPMD: every local party's block from its own file (aligned with the peers' by PSI when
    ``id_column`` is given). ``files[k]`` is given where data party k lives; the runtime's
    parties from ``data_parties`` on (a server) take part with no file."""
    texts, record = _text_tables(rt, files, id_column, data_parties)
    out = {}
    for k, f in files.items():
        header, rows = texts[k]
        name = Path(f.path).name
        block = OwnBlock(party=k, X=np.zeros((0, 0)), header=[], names=[], scaling=[])
        if k == label_party:
            header, rows = _take_labels(
                block, f.label_column or "label", f.label_column is not None, name, header, rows
            )
        elif f.label_column is not None:
            raise ConfigError(
                f"--label-column is the label holder's (party {label_party}), got it at party {k}"
            )
        if not header:
            raise DataError(f"party {k}'s CSV must hold >= 1 feature column, got none")
        cats = read_categories(f.categories)
        if id_column is None:
            check_not_id(k, name, header[0], rows.column(0), cats, f.feature_column)
        rules = fit_rules(k, name, header, rows, cats)
        enc = encode_rows(k, name, rules, header, rows, training=True)
        block.header, block.names, block.with_missing = (
            list(header),
            list(enc.names),
            enc.with_missing,
        )
        block.encoder = rules_to_json(rules)
        _scale(block, enc.block, f.bounds, f.dp)
        block.alignment = record if k == 0 else None
        out[k] = block
    return out
