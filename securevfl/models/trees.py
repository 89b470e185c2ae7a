"""Gradient-boosted trees on one party's (or the pooled) columns: scikit-learn's
HistGradientBoosting, the model a label holder with tabular data would realistically use alone.

Used by the ``local``/``centralized`` references (``--model gbdt``), by the label holder's own
model beside the partners' DP releases (``training.release_once``) and by the floor's choice of
the label holder's best model alone (``local --model best``). Everything here runs on one
party's own rows: nothing leaves it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# scikit-learn's defaults, fixed here so a change of library default does not move our floors:
# 100 rounds of depth-unbounded trees of at most 31 leaves, learning rate 0.1; early stopping on
# a tenth of the training rows when there are more than 10,000 (the library's 'auto')
MAX_ITER, LEARNING_RATE, MAX_LEAF_NODES = 100, 0.1, 31


def boosted_trees(task: str, seed: int) -> Any:
    """An unfitted HistGradientBoosting estimator for ``task`` (binary/multiclass/regression)."""
    from sklearn.ensemble import (  # here: ~1 s to import
        HistGradientBoostingClassifier,
        HistGradientBoostingRegressor,
    )

    cls = HistGradientBoostingRegressor if task == "regression" else HistGradientBoostingClassifier
    return cls(
        max_iter=MAX_ITER,
        learning_rate=LEARNING_RATE,
        max_leaf_nodes=MAX_LEAF_NODES,
        early_stopping="auto",
        random_state=seed % 2**32,
    )


def one_thread() -> Any:
    """A context in which OpenMP and BLAS run one thread. HistGradientBoosting's OpenMP loops
    on a party's few thousand rows spend more in synchronisation than they gain: 6 fits on
    455 x 15 took 88.8 CPU-s with the default threads on a loaded 2-core machine against 1.3
    with one (the reason ``run.train.one_torch_thread`` gives torch one thread)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def fit_trees(X: np.ndarray, y: np.ndarray, task: str, seed: int) -> Any:
    """A fitted estimator on (X, y)."""
    with one_thread():
        return boosted_trees(task, seed).fit(np.asarray(X, dtype=np.float64), np.asarray(y))


def tree_scores(model: Any, X: np.ndarray, task: str) -> np.ndarray:
    """Test scores in the record's shape: predictions (regression), P(y = 1) (binary) or
    class probabilities (multiclass)."""
    X = np.asarray(X, dtype=np.float64)
    with one_thread():
        if task == "regression":
            return model.predict(X).astype(float)
        proba = model.predict_proba(X).astype(float)
    return proba[:, 1] if task == "binary" else proba


def out_of_fold_logits(
    X: np.ndarray, y: np.ndarray, Xt: np.ndarray, *, n_classes: int, seed: int, folds: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """The label holder's own-model logits: on each training row from trees fitted on the
    other folds (so a head stacked on them sees logits as noisy as a test row's), on each test
    row from trees fitted on every training row. Log-probabilities, one column per class
    (binary: one column, the log-odds)."""
    task = "binary" if n_classes == 2 else "multiclass"
    train = oof_logits(X, y, n_classes=n_classes, seed=seed, folds=folds)
    return train, _logits(fit_trees(X, y, task, seed), Xt, n_classes)


def oof_logits(
    X: np.ndarray, y: np.ndarray, *, n_classes: int, seed: int, folds: int = 5
) -> np.ndarray:
    """Each training row's logits from trees fitted on the other folds
    (:func:`out_of_fold_logits`' training half)."""
    y = np.asarray(y)
    n = len(y)
    task = "binary" if n_classes == 2 else "multiclass"
    width = 1 if n_classes == 2 else n_classes
    train = np.zeros((n, width), dtype=np.float32)
    order = np.random.default_rng(seed).permutation(n)
    for f in range(folds):
        hold = order[f::folds]
        fit = np.setdiff1d(order, hold)
        train[hold] = _logits(fit_trees(X[fit], y[fit], task, seed + f), X[hold], n_classes)
    return train


def _logits(model: Any, X: np.ndarray, n_classes: int) -> np.ndarray:
    """Clipped log-odds (binary) or log-probabilities of the classes the model saw."""
    with one_thread():
        p = np.clip(model.predict_proba(np.asarray(X, dtype=np.float64)), 1e-6, 1 - 1e-6)
    full = np.full((len(X), n_classes), 1e-6)
    full[:, np.asarray(model.classes_, dtype=int)] = p
    if n_classes == 2:
        return np.log(full[:, 1:] / full[:, :1]).astype(np.float32)
    return np.log(full).astype(np.float32)
