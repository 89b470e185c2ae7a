"""Loaders of the offline real datasets: vendored files and scikit-learn's bundled sets.

Each loader returns an encoded :class:`~securevfl.data.preprocess.Table` and is cached (the
caller copies before handing arrays out). Vendored files are read from ``files/`` next to this
module (see PROVENANCE.md there); the packages they came from are never imported.
"""

from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np

from securevfl.data import domains as dom
from securevfl.data.preprocess import (
    BinaryColumn,
    CategoricalColumn,
    ColumnSpec,
    NumericColumn,
    Table,
    encode_columns,
    fitted_values,
    scale_target,
)
from securevfl.errors import DataError

FILES = Path(__file__).with_name("files")

# --------------------------------------------------------------------------- file readers


def _read_csv_gz(fname: str) -> list[list[str]]:
    with gzip.open(FILES / fname, "rt", encoding="utf-8", newline="") as fh:
        return [row for row in csv.reader(fh) if row]


def _classes(y: np.ndarray) -> np.ndarray:
    return np.asarray(y, dtype=np.int64)


# --------------------------------------------------------------------------- real datasets

_ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
_ADULT_NUMERIC = (
    "age",
    "fnlwgt",
    "education-num",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
)
# Compact occupation groups (census-style major groups); '?' joins the rare Armed-Forces.
_OCCUPATION_GROUPS = {
    "Exec-managerial": "managerial-professional",
    "Prof-specialty": "managerial-professional",
    "Adm-clerical": "clerical-sales-technical",
    "Sales": "clerical-sales-technical",
    "Tech-support": "clerical-sales-technical",
    "Other-service": "service",
    "Priv-house-serv": "service",
    "Protective-serv": "service",
    "Craft-repair": "skilled-manual",
    "Machine-op-inspct": "skilled-manual",
    "Transport-moving": "skilled-manual",
    "Handlers-cleaners": "labour-farming",
    "Farming-fishing": "labour-farming",
    "Armed-Forces": "other-unknown",
    "?": "other-unknown",
}


@functools.lru_cache(maxsize=1)
def _adult_raw() -> dict[str, np.ndarray]:
    rows: list[list[str]] = []
    for fname, skip in (("adult.data.gz", 0), ("adult.test.gz", 1)):
        with gzip.open(FILES / fname, "rt", encoding="utf-8") as fh:
            lines = fh.read().splitlines()[skip:]  # adult.test opens with '|1x3 Cross validator'
        for i, line in enumerate(lines, start=skip + 1):
            if not line.strip():
                continue
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != len(_ADULT_COLUMNS):
                raise DataError(f"{fname} line {i} must have 15 fields, got {len(parts)}")
            rows.append(parts)
    table = np.array(rows, dtype=str)
    cols = {name: table[:, j] for j, name in enumerate(_ADULT_COLUMNS)}
    # adult.test writes labels as '>50K.'; strip the dot so both files share one vocabulary
    cols["income"] = np.char.rstrip(cols["income"], ".")
    return cols


# ``--partition roles`` (K = 2): a label holder that knows its customers' demographics and
# household (an insurer, a retailer) and a partner that knows their education, work and
# finances (an employer, a tax office); fnlwgt, the census sampling weight, stays with the
# demographics it is derived from
ADULT_ROLES = (
    (
        "label holder: demographics and household",
        ("age", "fnlwgt", "marital-status", "relationship", "race", "sex", "native-country"),
    ),
    (
        "partner: education, work and finances",
        (
            "education",
            "education-num",
            "occupation",
            "occupation-group",
            "workclass",
            "hours-per-week",
            "capital-gain",
            "capital-loss",
        ),
    ),
)


@functools.lru_cache(maxsize=2)
def load_adult(encoding: str) -> Table:
    """UCI Adult, train + test pooled (48,842 rows); ``encoding`` 'onehot' or 'compact'."""
    c = _adult_raw()
    label = c["income"]
    if not np.isin(label, (">50K", "<=50K")).all():
        raise DataError(f"adult income must be '>50K' or '<=50K', got {sorted(set(label))[:5]}")
    y = (label == ">50K").astype(np.int64)
    # '?' (missing workclass/occupation/native-country) is kept as its own category, so all
    # 48,842 rows stay; the FM-VFL paper dropped them instead (45,222 rows).
    specs: list[ColumnSpec] = [
        NumericColumn(a, c[a].astype(np.float64), domain=dom.ADULT[a], clip=True)
        for a in _ADULT_NUMERIC
    ]
    vocab = {a: sorted(v) for a, v in dom.ADULT_VOCAB.items()}  # the documented vocabularies
    if encoding == "onehot":
        specs += [
            CategoricalColumn(a, c[a], vocab[a])
            for a in _ADULT_COLUMNS[:-1]
            if a not in _ADULT_NUMERIC
        ]
    else:
        # compact (~41 columns like the FM-VFL paper): education is dropped because
        # education-num encodes it one-to-one; occupation grouped into 6 major groups; sex and
        # native-country reduced to one 0/1 indicator each.
        occ = np.array([_OCCUPATION_GROUPS[v] for v in c["occupation"]])
        specs += [
            CategoricalColumn("workclass", c["workclass"], vocab["workclass"]),
            CategoricalColumn("marital-status", c["marital-status"], vocab["marital-status"]),
            CategoricalColumn("occupation-group", occ, dom.ADULT_OCCUPATION_GROUPS),
            CategoricalColumn("relationship", c["relationship"], vocab["relationship"]),
            CategoricalColumn("race", c["race"], vocab["race"]),
            BinaryColumn("sex=Male", c["sex"] == "Male"),
            BinaryColumn("native-country=United-States", c["native-country"] == "United-States"),
        ]
    X, fnames, groups = encode_columns(specs)
    return Table(X, y, fnames, groups, n_classes=2, fitted=fitted_values(specs))


@functools.lru_cache(maxsize=1)
def _load_phishing_cached() -> Table:
    rows = _read_csv_gz("phishing.csv.gz")
    header, body = rows[0], np.array(rows[1:], dtype=np.float64)
    # first column is a row index, last is 'Result' (+1 phishing, -1 legitimate)
    feats, res = body[:, 1:-1], body[:, -1]
    if not np.isin(res, (-1.0, 1.0)).all():
        raise DataError("phishing Result must be -1 or +1")
    specs = [NumericColumn(h, feats[:, j], domain=(-1.0, 1.0)) for j, h in enumerate(header[1:-1])]
    X, fnames, groups = encode_columns(specs)
    return Table(X, (res == 1.0).astype(np.int64), fnames, groups, n_classes=2)


@functools.lru_cache(maxsize=1)
def _load_cps1988_cached() -> Table:
    rows = _read_csv_gz("cps1988.csv.gz")
    header, body = rows[0], np.array(rows[1:], dtype=str)
    col = {h: body[:, j] for j, h in enumerate(header)}
    wage = col["wage"].astype(np.float64)
    if np.any(wage <= 0):
        raise DataError("cps1988 wage must be > 0 to take its log")
    specs: list[ColumnSpec] = [
        NumericColumn(a, col[a].astype(np.float64), domain=dom.CPS1988[a], clip=True)
        for a in ("education", "experience")
    ]
    specs += [CategoricalColumn(a, col[a], v) for a, v in dom.CPS1988_VOCAB.items()]
    X, fnames, groups = encode_columns(specs)
    y, y_range = scale_target(np.log(wage), domain=dom.CPS1988_LOG_WAGE)
    return Table(X, y, fnames, groups, y_range=y_range, fitted=fitted_values(specs))


def _numeric_table(
    X: np.ndarray, fnames: list[str], *, domains: list[tuple[float, float]]
) -> tuple[np.ndarray, list[str], list[list[int]]]:
    """Numeric columns scaled by their public domains (values outside clipped in)."""
    if len(domains) != len(fnames):  # a catalogue that does not match its data
        raise DataError(f"a domain per column is needed: {len(fnames)} columns, {len(domains)}")
    specs = [NumericColumn(f, X[:, j], domain=domains[j], clip=True) for j, f in enumerate(fnames)]
    return encode_columns(specs)


# the ten measurements of the Wisconsin breast cancer set; each appears as its mean over the
# image's nuclei, its standard error and its worst (largest) value, in that order
_BREAST_MEASURES = (
    "radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity",
    "concave points", "symmetry", "fractal dimension",
)  # fmt: skip
BREAST_COLUMNS = (
    *(f"mean {m}" for m in _BREAST_MEASURES),
    *(f"{m} error" for m in _BREAST_MEASURES),
    *(f"worst {m}" for m in _BREAST_MEASURES),
)


def _sklearn_data_file(name: str) -> Path:
    """A data file scikit-learn ships, found without importing it: ``sklearn.datasets`` takes
    ~1 s to import, paid by every party process of a breast run (the embedded default)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the breast, digits and diabetes datasets need scikit-learn installed")
    return Path(spec.submodule_search_locations[0], "datasets", "data", name)


def read_breast() -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of scikit-learn's ``breast_cancer.csv``: a header line ``n,d,class names``, then n
    rows of d measurements and the class (0 = malignant, 1 = benign: sklearn's coding)."""
    path = _sklearn_data_file("breast_cancer.csv")
    with open(path, encoding="utf-8") as fh:
        n, d = (int(v) for v in fh.readline().split(",")[:2])
        rows = np.loadtxt(fh, delimiter=",", ndmin=2)
    if rows.shape != (n, d + 1) or d != len(BREAST_COLUMNS):
        raise DataError(f"{path} must hold {n} rows of {len(BREAST_COLUMNS)} + 1 values")
    return rows[:, :d], rows[:, d].astype(np.int64)


@functools.lru_cache(maxsize=1)
def _load_breast_cached() -> Table:
    data, target = read_breast()
    X, fnames, groups = _numeric_table(data, list(BREAST_COLUMNS), domains=list(dom.BREAST))
    # sklearn codes 0 = malignant, 1 = benign; keep its coding
    return Table(X, _classes(target), fnames, groups, n_classes=2)


DIGITS_COLUMNS = tuple(f"pixel_{r}_{c}" for r in range(8) for c in range(8))  # sklearn's names
DIABETES_COLUMNS = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")


def _gzip_rows(name: str, width: int) -> np.ndarray:
    """The rows of one of scikit-learn's gzipped CSV data files, read as ``load_digits`` and
    ``load_diabetes`` read them (without importing ``sklearn.datasets``, ~1 s a process)."""
    path = _sklearn_data_file(name)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = np.loadtxt(fh, delimiter="," if name == "digits.csv.gz" else None, ndmin=2)
    if rows.shape[1] != width:
        raise DataError(f"{path} must hold rows of {width} values")
    return rows


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of scikit-learn's ``digits.csv.gz``: 64 pixel counts (0-16) and the digit."""
    rows = _gzip_rows("digits.csv.gz", 65)
    return rows[:, :64], rows[:, 64].astype(np.int64)


def read_diabetes() -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of scikit-learn's diabetes files, unscaled (``load_diabetes(scaled=False)``)."""
    X = _gzip_rows("diabetes_data_raw.csv.gz", len(DIABETES_COLUMNS))
    y = _gzip_rows("diabetes_target.csv.gz", 1)[:, 0]
    if len(y) != len(X):
        raise DataError("the diabetes data and target files must hold as many rows")
    return X, y


@functools.lru_cache(maxsize=1)
def _load_digits_cached() -> Table:
    data, target = read_digits()
    X, fnames, groups = _numeric_table(data, list(DIGITS_COLUMNS), domains=[(0.0, 16.0)] * 64)
    return Table(X, _classes(target), fnames, groups, n_classes=10)


@functools.lru_cache(maxsize=1)
def _load_diabetes_cached() -> Table:
    data, target = read_diabetes()
    X, fnames, groups = _numeric_table(data, list(DIABETES_COLUMNS), domains=list(dom.DIABETES))
    y, y_range = scale_target(target, domain=dom.DIABETES_TARGET)
    return Table(X, y, fnames, groups, y_range=y_range)


def _uncoded(fn: Callable[[], Table]) -> Callable[[str], Table]:
    # datasets without categoricals have one encoding; the catalogue checks the name
    def load(encoding: str) -> Table:
        return fn()

    return load


# one signature for every real loader: ``loader(encoding) -> Table``
load_breast = _uncoded(_load_breast_cached)
load_cps1988 = _uncoded(_load_cps1988_cached)
load_diabetes = _uncoded(_load_diabetes_cached)
load_digits = _uncoded(_load_digits_cached)
load_phishing = _uncoded(_load_phishing_cached)


def clear_caches() -> None:
    """Drop the whole tables the loaders keep (a data party's process keeps only its block and
    no labels once it has taken its columns)."""
    for fn in (
        _adult_raw,
        load_adult,
        _load_phishing_cached,
        _load_cps1988_cached,
        _load_breast_cached,
        _load_digits_cached,
        _load_diabetes_cached,
    ):
        fn.cache_clear()
