"""Bring your own vertically partitioned data: one array (or CSV file) per party.

``register_party_arrays`` validates the blocks (same rows at every party, finite values), scales
each column to [-1, 1] and registers a dataset whose columns are partitioned exactly as given.
On the CLI, ``--dataset csv:party0.csv,party1.csv,...`` does the same from CSV files with a header;
party 0's file holds the labels in a column named ``label``. In a real deployment each party would
load only its own file; here one process reads them all, which changes nothing in the protocols.

With ``id_column`` (``--id-column NAME``) each file is keyed by that column and may hold its own
row order and extra rows: the parties' rows are aligned by PSI (:mod:`securevfl.data.alignment`,
metered on an in-process runtime), sorted by ID, and the ID column is dropped. The run's record
then carries ``alignment``: each party's row count, how many were kept, and the PSI bytes. The
intersection size is what PSI reveals, and the record says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from securevfl.data.bounds import check_covered, read_bounds
from securevfl.data.datasets import DatasetInfo, _Entry
from securevfl.data.preprocess import Table, scale_target, scale_to_unit_interval
from securevfl.errors import ConfigError, DataError
from securevfl.registry import _REGISTRIES, register

CSV_PREFIX = "csv:"
_ALIGNMENTS: dict[str, dict] = {}  # dataset name -> alignment record of its last registration


def alignment_of(name: str) -> dict | None:
    """The PSI alignment record of a ``csv:`` dataset registered with an ID column."""
    return _ALIGNMENTS.get(name)


def _check_blocks(blocks: Sequence[np.ndarray], y: np.ndarray) -> list[np.ndarray]:
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
        bad = ~np.isfinite(b)
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
) -> list[list[int]]:
    """Register a dataset from per-party blocks; return the explicit column partition.

    Use the returned lists as ``RunSpec.partition`` so each party gets exactly its block.
    ``bounds`` (``{column name: (lo, hi)}``, names from ``names``, one list per block; the
    target is ``label``) scales every column by its public domain, values clipped in; without
    it each column's own min/max is used and listed in the dataset's ``fitted`` values.
    """
    if task not in ("binary", "multiclass", "regression"):
        raise ConfigError(f"task must be binary, multiclass or regression, got {task!r}")
    y = np.asarray(y)
    blocks = _check_blocks(blocks, y)
    if names is None:
        names = [[f"x{j}" for j in range(b.shape[1])] for b in blocks]
    for k, (ns, b) in enumerate(zip(names, blocks, strict=True)):
        if len(ns) != b.shape[1]:
            raise DataError(f"party {k}'s header must name its {b.shape[1]} columns, got {len(ns)}")
    flat = [str(n) for ns in names for n in ns]
    fitted: tuple[str, ...] = ()
    if bounds is not None:
        check_covered(bounds, flat + (["label"] if task == "regression" else []))
    else:
        fitted = (f"scaling ranges (min/max) of the {len(flat)} CSV columns (no --bounds)",)
    cols = []
    for k, b in enumerate(blocks):
        for j in range(b.shape[1]):
            dom = None if bounds is None else bounds[str(names[k][j])]
            cols.append(scale_to_unit_interval(b[:, j], domain=dom, clip=dom is not None))
    X = np.column_stack(cols)
    if task == "regression":
        y_out, _ = scale_target(y.astype(float), domain=None if bounds is None else bounds["label"])
        if bounds is None:
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
    )
    info = DatasetInfo(name, X.shape[0], X.shape[1], task, source, "user's own", "user data", False)
    _REGISTRIES.setdefault("dataset", {}).pop(name, None)  # re-registering replaces
    register("dataset", name, _Entry(info, lambda encoding="onehot", _t=table: _t))
    return partition


def _aligned_csv_blocks(
    paths: list[Path], id_column: str
) -> tuple[list[list[str]], list[np.ndarray], dict]:
    """Align the files by PSI on ``id_column``; each party's header and numeric rows without it."""
    from securevfl.data.alignment import align_tables, read_party_csv
    from securevfl.runtime.inprocess import InProcessRuntime

    tables = {k: read_party_csv(p, id_column, k) for k, p in enumerate(paths)}
    kept, record = align_tables(InProcessRuntime(len(paths)), tables)
    headers, blocks = [], []
    for k, t in sorted(kept.items()):
        j = t.id_index
        headers.append(t.header[:j] + t.header[j + 1 :])
        try:
            blocks.append(
                np.array([r[:j] + r[j + 1 :] for r in t.rows], dtype=float).reshape(len(t.rows), -1)
            )
        except ValueError as exc:
            raise DataError(f"party {k}'s CSV {t.path.name!r} must be numeric: {exc}") from None
    return headers, blocks, record


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


def _read_numeric_csv(p: Path, k: int) -> tuple[list[str], np.ndarray]:
    """Header and numeric rows of party ``k``'s CSV, or one DataError line naming the file."""
    if not p.is_file():
        what = "a directory" if p.is_dir() else "no such file"
        raise DataError(f"party {k}'s CSV must be a file, got {str(p)!r} ({what})")
    head = p.read_bytes()[:65536]
    try:
        if b"\x00" in head:
            raise UnicodeDecodeError("utf-8", head, 0, 1, "NUL byte")
        text = head.decode("utf-8", errors="strict" if len(head) < 65536 else "ignore")
    except UnicodeDecodeError:
        raise DataError(f"party {k}'s CSV {str(p)!r} must be UTF-8 text, got binary data") from None
    header = text.split("\n", 1)[0].strip().split(",")
    try:
        data = np.genfromtxt(p, delimiter=",", skip_header=1, dtype=float, ndmin=2)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"party {k}'s CSV {str(p)!r} must be numeric: {exc}") from None
    if data.size == 0:
        raise DataError(f"party {k}'s CSV {str(p)!r} must hold >= 1 data row, got none")
    return header, data


def register_csv_parties(
    spec_name: str, *, id_column: str | None = None, bounds: str | None = None
) -> list[list[int]]:
    """Register ``csv:a.csv,b.csv,...`` (party order) as a dataset; return its partition.

    With ``id_column``, rows are first aligned by PSI on that column (see module docstring);
    with ``bounds`` (a file, :mod:`securevfl.data.bounds`) columns are scaled by public domains.
    """
    declared = None if bounds is None else read_bounds(bounds)
    paths = [Path(p) for p in spec_name[len(CSV_PREFIX) :].split(",") if p]
    _ALIGNMENTS.pop(spec_name, None)
    if id_column is not None:
        headers, aligned, _ALIGNMENTS[spec_name] = _aligned_csv_blocks(paths, id_column)
    blocks, y, names = [], None, []
    for k, p in enumerate(paths):
        if id_column is not None:
            header, data = headers[k], aligned[k]
        else:
            header, data = _read_numeric_csv(p, k)
        if k == 0:
            if "label" not in header:
                raise DataError(f"party 0's CSV must have a 'label' column, got columns {header}")
            j = header.index("label")
            y = data[:, j]
            data = np.delete(data, j, axis=1)
            header = header[:j] + header[j + 1 :]
        blocks.append(data)
        names.append([h.strip() for h in header])
    task = label_task(y)
    return register_party_arrays(
        spec_name,
        blocks,
        y,
        task=task,
        source=", ".join(map(str, paths)),
        names=names if declared is not None else None,
        bounds=declared,
    )
