"""The train/test row split: drawn by the label holder without looking at the labels.

Only the label holder draws the split (:func:`draw_split`) and the other parties receive the
row positions; each party then applies them to its own columns (:func:`apply_split`, in place,
so a party's memory stays at one copy of its block).

Why not stratified by class: a split stratified with a generator every party can rerun (the old
``make_rng(seed, "split")``) told a passive party every label: knowing the seed, ``n`` and its
own row order, it reruns the per-class shuffles and reads which rows each class sent to test
(an outside audit recovered 569/569 labels on breast). Even a secret stratified split leaks:
the test set's class counts are fixed to ``round(test_size * n_c)``, so the positions alone are
a draw that depends on the labels. The split here is a uniformly random permutation of ``0..n-1``
that never reads ``y``: the positions a data party receives have the same distribution for any
two label vectors (a data party's view of the split is label-independent). The cost is a test
split whose class shares vary by sampling error (~sqrt(p(1-p)/n_test)).

The generator is the caller's: the run seeds it from the public ``--seed``. Seeding is safe for
the labels (the draw is label-independent, so a party that reruns it learns only positions it
receives anyway); it makes the split reproducible, so two runs at one seed score the same rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.errors import ConfigError, check_open_unit
from securevfl.rng import make_rng

if TYPE_CHECKING:
    from securevfl.data.datasets import Dataset


def take_rows(ds: Dataset, idx: np.ndarray) -> Dataset:
    """A new Dataset holding rows ``idx`` of ``ds`` (copies; metadata shared)."""
    return replace(
        ds,
        X=np.take(ds.X, idx, axis=0),
        y=None if ds.y is None else np.take(ds.y, idx, axis=0),
        feature_names=list(ds.feature_names),
        groups=[list(g) for g in ds.groups],
    )


def draw_split(n: int, *, rng: Any, test_size: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row positions, each in a random order: a uniform permutation of ``0..n-1``
    whose first ``round(test_size * n)`` entries are the test rows. Reads no labels."""
    ts = check_open_unit("test_size", test_size)
    k = int(round(ts * n))
    if k == 0 or k == n:
        raise ConfigError(
            f"test_size must leave rows on both sides, got test_size={test_size} for n={n}"
        )
    perm = rng.permutation(int(n))
    dt = positions_dtype(n)  # the same positions, 4 bytes each below 2**31 rows
    return perm[k:].astype(dt), perm[:k].astype(dt)


def positions_dtype(n: int) -> np.dtype:
    """The integer type of ``n`` rows' positions: int32 below 2**31 rows (4 bytes a row, half of
    int64's: at 30M rows the split's positions are 120 MB, not 240), else int64."""
    return np.dtype(np.int32 if n < 2**31 else np.int64)


def check_split(n: int, train_idx: Any, test_idx: Any) -> tuple[np.ndarray, np.ndarray]:
    """Positions received from the label holder, checked: together a permutation of 0..n-1
    (as :func:`positions_dtype`; the check marks each position in one byte a row)."""
    dt = positions_dtype(n)
    tr = np.asarray(train_idx).reshape(-1)
    te = np.asarray(test_idx).reshape(-1)
    ok = tr.size + te.size == n and tr.dtype.kind in "iu" and te.dtype.kind in "iu"
    if ok and tr.size and te.size:
        ok = min(tr.min(), te.min()) >= 0 and max(tr.max(), te.max()) < n
    if ok:
        seen = np.zeros(n, dtype=bool)
        seen[tr] = True
        seen[te] = True
        ok = bool(seen.all())  # n positions in range covering all n rows: a permutation
        del seen
    if tr.size == 0 or te.size == 0 or not ok:
        raise ConfigError(
            f"split positions must be a permutation of the {n} rows with both sides non-empty, "
            f"got {tr.size} train and {te.size} test positions"
        )
    return tr.astype(dt, copy=False), te.astype(dt, copy=False)


def train_test_split(
    ds: Dataset, *, test_size: float = 0.2, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """A reproducible split of a whole table (library use): :func:`draw_split` with
    ``make_rng(seed, purpose="split")``; both parts are copies."""
    train_idx, test_idx = draw_split(ds.n, rng=make_rng(seed, purpose="split"), test_size=test_size)
    return take_rows(ds, train_idx), take_rows(ds, test_idx)


def apply_split(
    ds: Dataset, train_idx: np.ndarray, test_idx: np.ndarray
) -> tuple[Dataset, Dataset]:
    """``ds`` split at the given positions, as views of ``ds.X`` reordered in place.

    ``ds.X`` is overwritten: its rows are permuted one column at a time (a temporary of one
    column), so splitting a block costs no second copy of it. ``ds`` must not be used after.
    ``ds.y`` may be None (a data party holds no labels).
    """
    train_idx, test_idx = check_split(ds.n, train_idx, test_idx)
    order = np.concatenate([train_idx, test_idx])
    X = ds.X
    if not X.flags.c_contiguous or not X.flags.writeable:
        X = np.ascontiguousarray(X).copy()
    for j in range(X.shape[1]):
        X[:, j] = X[order, j]
    n_train = train_idx.size
    y = ds.y
    train = replace(ds, X=X[:n_train], y=None if y is None else np.take(y, train_idx))
    test = replace(ds, X=X[n_train:], y=None if y is None else np.take(y, test_idx))
    return train, test


def split_in_place(
    ds: Dataset, *, test_size: float = 0.2, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """:func:`train_test_split`'s parts (same values) as views of ``ds.X``, reordered in place."""
    train_idx, test_idx = draw_split(ds.n, rng=make_rng(seed, purpose="split"), test_size=test_size)
    return apply_split(ds, train_idx, test_idx)
