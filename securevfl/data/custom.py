"""Bring your own vertically partitioned data: one array (or CSV file) per party.

``register_party_arrays`` validates the blocks (same rows at every party, finite values), scales
each column to [-1, 1] and registers a dataset whose columns are partitioned exactly as given.
On the CLI, ``--dataset csv:party0.csv,party1.csv,...`` does the same from CSV files with a header;
party 0's file holds the labels in a column named ``label`` (``--label-column`` names another).
Text columns, missing cells and ID-like first columns follow the rules stated in
:mod:`securevfl.data.csv_columns` (categories from ``--categories FILE``, public metadata). In a
real deployment each party would load only its own file; here one process reads them all, which
changes nothing in the protocols.

With ``id_column`` (``--id-column NAME``) each file is keyed by that column and may hold its own
row order and extra rows: the parties' rows are aligned by PSI (:mod:`securevfl.data.alignment`,
metered on an in-process runtime), sorted by ID, and the ID column is dropped. The run's record
then carries ``alignment``: each party's row count, how many were kept, and the PSI bytes. The
intersection size is what PSI reveals, and the record says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from securevfl.data.bounds import (
    DpRanges,
    check_covered,
    is_indicator,
    read_bounds,
    released_domains,
)
from securevfl.data.cells import ArrowColumn, Column, Columns, TextColumn
from securevfl.data.csv_columns import (
    check_not_id,
    encode_rows,
    fit_rules,
    read_categories,
)
from securevfl.data.datasets import DatasetInfo, _Entry
from securevfl.data.preprocess import Table, scale_by_ranges, scale_target
from securevfl.data.saved_encoder import rules_to_json
from securevfl.errors import ConfigError, DataError
from securevfl.registry import _REGISTRIES, register

CSV_PREFIX = "csv:"
FILE_PREFIXES = (CSV_PREFIX, "parquet:")  # a user's own files, one per party
CSV_KEYS = ("label_column", "categories", "feature_column")  # dataset options of csv: runs only
_ALIGNMENTS: dict[str, dict] = {}  # dataset name -> alignment record of its last registration
_DISCLOSED: dict[str, str] = {}  # dataset name -> what its encoding made visible
# dataset name -> its raw schema: per party column names, each column's scaling (lo, hi), classes
_SCHEMAS: dict[str, dict] = {}


def alignment_of(name: str) -> dict | None:
    """The PSI alignment record of a ``csv:`` dataset registered with an ID column."""
    return _ALIGNMENTS.get(name)


def schema_of(name: str) -> dict | None:
    """A registered user dataset's raw schema: ``{"scaling": [[lo, hi], ...] per column in
    table order, "classes": label values (class order) or None}``, and for a CSV per party its
    ``headers`` (raw column names), ``names`` (the encoded inputs') and ``encoders`` (each
    column's :class:`~securevfl.data.csv_columns.ColumnRule`, as JSON); what a saved model
    needs to prepare new rows the same way."""
    return _SCHEMAS.get(name)


def _check_blocks(
    blocks: Sequence[np.ndarray], y: np.ndarray, *, blanks: bool = False
) -> list[np.ndarray]:
    if len(blocks) < 2:
        raise ConfigError(f"parties must be >= 2 blocks of columns, got {len(blocks)}")
    out = []
    for k, b in enumerate(blocks):
        b = np.asarray(b, dtype=np.float64)
        if b.ndim != 2 or b.shape[1] == 0:
            raise DataError(
                f"party {k}'s block must be a 2-D array with >= 1 column, got shape {b.shape}"
            )
        if b.shape[0] != len(y):
            raise DataError(
                f"every party must hold the same samples: party {k} has {b.shape[0]} rows, "
                f"the labels have {len(y)}"
            )
        bad = ~np.isfinite(b) & ~(blanks & np.isnan(b))  # with blanks: NaN is a blank cell
        if bad.any():
            r, c = map(int, np.argwhere(bad)[0])
            raise DataError(
                f"party {k}'s data must be finite, got {b[r, c]} at row {r}, column {c}"
            )
        out.append(b)
    if not np.all(np.isfinite(np.asarray(y, dtype=np.float64))):
        raise DataError("labels must be finite, got NaN/inf")
    return out


def register_party_arrays(
    name: str,
    blocks: Sequence[np.ndarray],
    y: np.ndarray,
    *,
    task: str,
    source: str = "user data",
    names: Sequence[Sequence[str]] | None = None,
    bounds: dict[str, tuple[float, float]] | None = None,
    blanks: bool = False,
    dp: Callable[[int], DpRanges] | None = None,
) -> list[list[int]]:
    """Register a dataset from per-party blocks; return the explicit column partition.

    Use the returned lists as ``RunSpec.partition`` so each party gets exactly its block.
    ``bounds`` (``{column name: (lo, hi)}``, names from ``names``, one list per block; the
    target is ``label``) scales every column by its public domain, values clipped in; without
    it, ``dp(k)`` (a run with an ε) gives party k's plan and generator and each party releases
    its ranges (:func:`~securevfl.data.bounds.released_domains`); with neither each column's
    own min/max is used and listed in the dataset's ``fitted`` values.
    ``blanks``: a NaN cell is a blank (a ``csv:`` file's), set to its column's range midpoint
    (:func:`~securevfl.data.preprocess.scale_by_ranges`); otherwise every value must be finite.
    """
    if task not in ("binary", "multiclass", "regression"):
        raise ConfigError(f"task must be binary, multiclass or regression, got {task!r}")
    y = np.asarray(y)
    blocks = _check_blocks(blocks, y, blanks=blanks)
    if names is None:
        names = [[f"x{j}" for j in range(b.shape[1])] for b in blocks]
    for k, (ns, b) in enumerate(zip(names, blocks, strict=True)):
        if len(ns) != b.shape[1]:
            raise DataError(f"party {k}'s header must name its {b.shape[1]} columns, got {len(ns)}")
    flat = [str(n) for ns in names for n in ns]
    fitted: tuple[str, ...] = ()
    target_dom = None
    released: tuple[int, ...] = ()
    # each column's scaling range, kept so a saved model prepares new rows the same way
    ranges: list = []
    if bounds is not None:
        check_covered(bounds, flat + (["label"] if task == "regression" else []))
        ranges = [tuple(bounds[n]) for n in flat]
        target_dom = bounds["label"] if task == "regression" else None
    elif dp is not None:  # each party releases its ranges under the budget
        for k, b in enumerate(blocks):
            target = y if k == 0 and task == "regression" else None
            got, t = released_domains(list(names[k]), b, dp(k).plan, dp(k).rng, target=target)
            ranges += got
            target_dom = t if k == 0 else target_dom
        released = tuple(range(len(blocks)))
    else:  # a run with no ε: each column's exact min/max
        fitted = (f"scaling ranges (min/max) of the {len(flat)} CSV columns (no --bounds)",)
        ranges = [(float(np.nanmin(c)), float(np.nanmax(c))) for b in blocks for c in b.T]
    X = scale_by_ranges(np.hstack(blocks), ranges)
    classes = None
    if task == "regression":
        y_out, _ = scale_target(y.astype(float), domain=target_dom)
        if target_dom is None:
            fitted += ("scaling range (min/max) of the regression target",)
        n_classes = None
    else:
        classes, y_out = np.unique(y, return_inverse=True)
        n_classes = len(classes)
        if task == "binary" and n_classes != 2:
            raise DataError(f"a binary task needs exactly 2 label values, got {n_classes}")
    partition, start = [], 0
    for b in blocks:
        partition.append(list(range(start, start + b.shape[1])))
        start += b.shape[1]
    table = Table(
        X=X,
        y=y_out,
        feature_names=[f"x{j}" for j in range(X.shape[1])],
        groups=[[j] for j in range(X.shape[1])],
        n_classes=n_classes,
        fitted=fitted,
        dp_bounds=released,
    )
    info = DatasetInfo(name, X.shape[0], X.shape[1], task, source, "user's own", "user data", False)
    _SCHEMAS[name] = {
        "scaling": [list(r) for r in ranges],
        "classes": None if classes is None else classes.tolist(),
    }
    _REGISTRIES.setdefault("dataset", {}).pop(name, None)  # re-registering replaces
    register("dataset", name, _Entry(info, lambda encoding="onehot", _t=table: _t))
    return partition


def _aligned_csv_tables(
    paths: list[Path], id_column: str
) -> tuple[list[list[str]], list[Columns], dict]:
    """Align the files by PSI on ``id_column``; each party's header and columns without it."""
    from securevfl.data.alignment import align_tables, read_party_csv
    from securevfl.runtime.inprocess import InProcessRuntime

    tables = {k: read_party_csv(p, id_column, k) for k, p in enumerate(paths)}
    kept, record = align_tables(InProcessRuntime(len(paths)), tables)
    headers, cols = [], []
    for _, t in sorted(kept.items()):
        h, c = t.features()
        headers.append(h)
        cols.append(c)
    return headers, cols, record


MAX_CLASSES = 20


def label_task(y: np.ndarray) -> str:
    """The task a CSV label column asks for; the rule, since a CSV does not say.

    Two distinct values: binary. Integer values with 3..MAX_CLASSES distinct values: multiclass
    (class labels). Anything else (fractional values, or more distinct integers): regression.
    One distinct value is no task at all (every model would be the constant) and is refused.
    """
    values = np.unique(y)
    if len(values) < 2:
        raise DataError(
            f"party 0's label column must hold >= 2 distinct values, got {len(values)} "
            f"({values.tolist()[:1]}): nothing to learn"
        )
    if len(values) == 2:
        return "binary"
    if np.all(values == np.round(values)) and len(values) <= MAX_CLASSES:
        return "multiclass"
    return "regression"


def _labels(column: str, where: str, cells: list[str] | Column) -> np.ndarray:
    """The label column as numbers (text labels: their class index, in sorted order)."""
    col = cells if isinstance(cells, TextColumn | ArrowColumn) else TextColumn(list(cells))
    if col.miss.any():
        i = int(np.argmax(col.miss))
        raise DataError(
            f"party 0's label column {column!r} ({where}) must have no missing cells, got "
            f"{col.text()[i]!r} on line {i + 2}"
        )
    try:
        y = col.numbers()
        if y is None:
            y = np.array([float(c) for c in col.text()])
    except ValueError:  # text labels: classes, never a regression target
        classes, y = np.unique([c.strip() for c in col.text()], return_inverse=True)
        if len(classes) > MAX_CLASSES:
            raise DataError(
                f"party 0's text label column {column!r} must hold <= {MAX_CLASSES} classes, "
                f"got {len(classes)}"
            ) from None
        return y.astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise DataError(f"labels must be finite, got NaN/inf in column {column!r}")
    return y


def register_csv_parties(
    spec_name: str,
    *,
    id_column: str | None = None,
    label_column: str | None = None,
    categories: str | None = None,
    bounds: str | None = None,
    dp: Callable[[int], DpRanges] | None = None,
    feature_column: str | None = None,
) -> list[list[int]]:
    """Register ``csv:a.csv,b.csv,...`` (party order) as a dataset; return its partition.

    With ``id_column``, rows are first aligned by PSI on that column (see module docstring).
    ``label_column`` (default ``label``) names party 0's label column; ``categories`` is a JSON
    file of each text column's categories (public metadata; :mod:`securevfl.data.csv_columns`
    states the rules for text, missing cells and ID-like columns).
    """
    from securevfl.data.arrow_input import read_own_table, without

    declared = None if bounds is None else read_bounds(bounds)
    label = label_column or "label"
    paths = [Path(p) for p in file_sources(spec_name)]
    if not paths:
        raise ConfigError(
            f"--dataset {spec_name!r} must name one CSV per party: csv:A.csv,B.csv, got none"
        )
    _ALIGNMENTS.pop(spec_name, None)
    _DISCLOSED.pop(spec_name, None)
    cats = read_categories(categories)
    if id_column is not None:
        headers, tables, _ALIGNMENTS[spec_name] = _aligned_csv_tables(paths, id_column)
    else:
        read = [read_own_table(p, k) for k, p in enumerate(paths)]
        headers, tables = [h for h, _ in read], [c for _, c in read]
    if label not in headers[0]:
        flag = "" if label_column else " (name another with --label-column)"
        raise DataError(
            f"party 0's CSV must have a {label!r} column{flag}, got columns {headers[0]}"
        )
    j = headers[0].index(label)
    y = _labels(label, paths[0].name, tables[0].column(j))
    headers[0], tables[0] = without(headers[0], tables[0], j)
    for k, rows in enumerate(tables):
        if len(rows) != len(y):
            raise DataError(
                f"every party must hold the same samples: party {k} has {len(rows)} rows, "
                f"the labels have {len(y)}"
            )
    task = label_task(y)
    blocks, disclosed, names, rules = [], [], [], []
    for k, (header, rows) in enumerate(zip(headers, tables, strict=True)):
        if not header:
            raise DataError(f"party {k}'s CSV must hold >= 1 feature column, got none")
        if id_column is None:
            check_not_id(k, paths[k].name, header[0], rows.column(0), cats, feature_column)
        rules.append(fit_rules(k, paths[k].name, header, rows, cats))
        enc = encode_rows(k, paths[k].name, rules[-1], header, rows, training=True)
        blocks.append(enc.block)
        names.append(list(enc.names))
        if enc.with_missing:
            disclosed.append(f"party {k}: {', '.join(enc.with_missing)}")
    if disclosed:
        _DISCLOSED[spec_name] = (
            "which columns have missing cells (each given an indicator column) is visible in "
            "the parties' column counts: " + "; ".join(disclosed)
        )
    if declared is not None:  # one-hot and missing-indicator columns live in [0, 1] (public)
        for n in (n for ns in names for n in ns):
            if n not in declared and is_indicator(n):
                declared[n] = (0.0, 1.0)
    out = register_party_arrays(
        spec_name,
        blocks,
        y,
        task=task,
        source=", ".join(map(str, paths)),
        names=names if declared is not None or dp is not None else None,
        bounds=declared,
        blanks=True,
        dp=dp,
    )
    # what predict needs to encode new rows the same way (the label column removed above)
    _SCHEMAS[spec_name]["headers"] = [list(h) for h in headers]
    _SCHEMAS[spec_name]["names"] = names
    _SCHEMAS[spec_name]["encoders"] = [rules_to_json(r) for r in rules]
    return out


def csv_disclosure(name: str) -> str | None:
    """What a ``csv:`` dataset's encoding disclosed outside any guarantee, if anything."""
    return _DISCLOSED.get(name)


def register_own_schema(
    name: str,
    own: dict[int, tuple[list[str], list[list[float]], list | None, list[dict]]],
    blocks: Sequence[np.ndarray],
    alignment: dict | None,
    names: Sequence[Sequence[str]] = (),
) -> None:
    """The schema of a run where each party opened only its own file (``--data``): this
    process's parties' raw headers, column scalings, encoders and (at the label holder) classes;
    what a saved model needs to prepare new rows. Other parties' entries stay empty (not known
    here)."""
    total = sum(len(b) for b in blocks)
    scaling: list = [None] * total
    headers: list[list[str]] = [[] for _ in blocks]
    encoders: list = [None for _ in blocks]
    classes = None
    for k, (header, ranges, cls, encoder) in own.items():
        headers[k] = list(header)
        encoders[k] = encoder
        for c, r in zip(blocks[k], ranges, strict=True):
            scaling[int(c)] = list(r)
        classes = cls if cls is not None else classes
    _SCHEMAS[name] = {
        "scaling": scaling,
        "classes": classes,
        "headers": headers,
        "encoders": encoders,
    }
    if names:  # every party's encoded column names (public metadata)
        _SCHEMAS[name]["names"] = [list(ns) for ns in names]
    _ALIGNMENTS.pop(name, None)
    if alignment is not None:
        _ALIGNMENTS[name] = alignment


def file_sources(name: str) -> list[str]:
    """The per-party sources of ``csv:A,B`` or ``parquet:A,B`` (each read by its path:
    :func:`securevfl.data.arrow_input.is_parquet_source`)."""
    prefix = next(p for p in FILE_PREFIXES if name.startswith(p))
    return [p for p in name[len(prefix) :].split(",") if p]


def is_csv_dataset(name: str) -> bool:
    """``csv:a.csv,b.csv`` or ``parquet:A,B`` (every file in one process), or ``csv`` (each
    party its own file, either format): the datasets the CSV rules read."""
    return name == "csv" or name.startswith(FILE_PREFIXES)
