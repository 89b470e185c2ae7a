"""The public train/test row split: drawn from the labels, applied by copy or in place.

The split is public (every party draws it from the same seed and labels), so each party applies
it to its own columns. :func:`split_in_place` reorders a process's block where it lies, so a
party's memory stays at one copy of its share of the table while it splits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

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
        y=np.take(ds.y, idx, axis=0),
        feature_names=list(ds.feature_names),
        groups=[list(g) for g in ds.groups],
    )


def split_rows(
    ds: Dataset, *, test_size: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The (train, test) row indices, each in its shuffled order: stratified by class for
    binary/multiclass tasks, each class giving ``round(test_size * n_class)`` test rows; drawn
    with ``make_rng(seed, purpose="split")``."""
    ts = check_open_unit("test_size", test_size)
    rng = make_rng(seed, purpose="split")
    if ds.task in ("binary", "multiclass"):
        test_parts, train_parts = [], []
        for c in np.unique(ds.y):
            idx = np.flatnonzero(ds.y == c)
            rng.shuffle(idx)
            k = int(round(ts * idx.size))
            test_parts.append(idx[:k])
            train_parts.append(idx[k:])
        test_idx, train_idx = np.concatenate(test_parts), np.concatenate(train_parts)
    else:
        perm = rng.permutation(ds.n)
        k = int(round(ts * ds.n))
        test_idx, train_idx = perm[:k], perm[k:]
    if test_idx.size == 0 or train_idx.size == 0:
        raise ConfigError(
            f"test_size must leave rows on both sides, got test_size={test_size} for n={ds.n}"
        )
    return rng.permutation(train_idx), rng.permutation(test_idx)


def train_test_split(
    ds: Dataset, *, test_size: float = 0.2, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """Deterministic split (:func:`split_rows`); both parts are copies."""
    train_idx, test_idx = split_rows(ds, test_size=test_size, seed=seed)
    return take_rows(ds, train_idx), take_rows(ds, test_idx)


def split_in_place(
    ds: Dataset, *, test_size: float = 0.2, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """:func:`train_test_split`'s parts (same values) as views of ``ds.X``, reordered in place.

    ``ds.X`` is overwritten: its rows are permuted one column at a time (a temporary of one
    column), so splitting a block costs no second copy of it. ``ds`` must not be used after.
    """
    train_idx, test_idx = split_rows(ds, test_size=test_size, seed=seed)
    order = np.concatenate([train_idx, test_idx])
    X = ds.X
    if not X.flags.c_contiguous or not X.flags.writeable:
        X = np.ascontiguousarray(X).copy()
    for j in range(X.shape[1]):
        X[:, j] = X[order, j]
    n_train = train_idx.size
    train = replace(ds, X=X[:n_train], y=np.take(ds.y, train_idx))
    test = replace(ds, X=X[n_train:], y=np.take(ds.y, test_idx))
    return train, test
