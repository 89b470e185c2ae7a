"""Seeded synthetic generators (no files): sparse linear, dense linear and logistic data.

All return raw ``(X, y, w)`` with X in [-1, 1]; :mod:`securevfl.data.datasets` wraps them into
``Dataset`` objects (scaling a regression target to [-1, 1]).
"""

from __future__ import annotations

import numpy as np

from securevfl.data.preprocess import Table, scale_target
from securevfl.errors import ConfigError
from securevfl.rng import make_rng


def _nonzero_uniform(rng: np.random.Generator, size: int) -> np.ndarray:
    # magnitudes in (0, 1] (never exactly 0) so the requested sparsity is exact
    return (1.0 - rng.random(size)) * rng.choice(np.array([-1.0, 1.0]), size=size)


def make_sparse_regression(
    n: int, d: int, sparsity: float, *, seed: int, noise: float = 0.01
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse linear data as in Table II of the FM-VFL paper (Xu, Yuan, Wu).

    ``sparsity`` s is both the share of nonzero entries of X and the share of nonzero true
    parameters: exactly ``round(s*n*d)`` entries of X (at uniformly random positions) and
    ``max(1, round(s*d))`` entries of w are nonzero, each uniform in [-1, 1] \\ {0}.
    ``y = X w + noise * N(0, 1)``.
    """
    if not 0.0 < sparsity <= 1.0:
        raise ConfigError(f"sparsity must be in (0, 1], got {sparsity!r}")
    rng = make_rng(seed, purpose="synthetic-sparse")
    total = n * d
    k = int(round(sparsity * total))
    if k == 0:
        raise ConfigError(
            f"sparsity * n * d must give at least one nonzero entry, got {sparsity} * {n} * {d}"
        )
    X = np.zeros(total, dtype=np.float64)
    X[rng.choice(total, size=k, replace=False)] = _nonzero_uniform(rng, k)
    X = X.reshape(n, d)
    w = np.zeros(d, dtype=np.float64)
    kw = max(1, int(round(sparsity * d)))
    w[rng.choice(d, size=kw, replace=False)] = _nonzero_uniform(rng, kw)
    y = X @ w + noise * rng.standard_normal(n)
    return X, y, w


def make_linear_regression(
    n: int, d: int, *, seed: int, noise: float = 0.1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense linear data: X ~ U[-1, 1], w ~ N(0, 1), ``y = X w + noise * N(0, 1)``."""
    rng = make_rng(seed, purpose="synthetic-linear")
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    w = rng.standard_normal(d)
    y = X @ w + noise * rng.standard_normal(n)
    return X, y, w


def make_logistic(n: int, d: int, *, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binary data: X ~ U[-1, 1], y ~ Bernoulli(sigmoid(X w)).

    w ~ N(0, 9/d) so that X w has standard deviation about sqrt(3) whatever d is: the classes
    are learnable (Bayes accuracy ~0.8) but not separable.
    """
    rng = make_rng(seed, purpose="synthetic-logistic")
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    w = rng.standard_normal(d) * 3.0 / np.sqrt(d)
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    y = (rng.random(n) < p).astype(np.int64)
    return X, y, w


# --------------------------------------------------------------------------- as tables


def _synthetic_table(X: np.ndarray, y: np.ndarray, *, regression: bool) -> Table:
    fnames = [f"x{j}" for j in range(X.shape[1])]
    groups = [[j] for j in range(X.shape[1])]
    if regression:
        y, y_range = scale_target(y)
        return Table(X, y, fnames, groups, y_range=y_range)
    return Table(X, y, fnames, groups, n_classes=2)


def sparse_table(*, n: int, d: int, sparsity: float, seed: int) -> Table:
    """``synthetic-sparse`` as an encoded table (target scaled to [-1, 1])."""
    X, y, _ = make_sparse_regression(n, d, sparsity, seed=seed)
    return _synthetic_table(X, y, regression=True)


def linear_table(*, n: int, d: int, seed: int, **_: object) -> Table:
    """``synthetic-linear`` as an encoded table (target scaled to [-1, 1])."""
    X, y, _ = make_linear_regression(n, d, seed=seed)
    return _synthetic_table(X, y, regression=True)


def logistic_table(*, n: int, d: int, seed: int, **_: object) -> Table:
    """``synthetic-logistic`` as an encoded table."""
    X, y, _ = make_logistic(n, d, seed=seed)
    return _synthetic_table(X, y, regression=False)
