"""Seeded synthetic generators (no files): sparse linear, dense linear and logistic data.

All return raw ``(X, y, w)`` with X in [-1, 1]; :mod:`securevfl.data.datasets` wraps them into
``Dataset`` objects (scaling a regression target to [-1, 1]).
"""

from __future__ import annotations

import numpy as np

from securevfl.data.preprocess import ColumnPicker, Table, scale_target
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
    n: int, d: int, *, seed: int, noise: float = 0.1, columns: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense linear data: X ~ U[-1, 1], w ~ N(0, 1), ``y = X w + noise * N(0, 1)``.

    ``columns``: return only these columns of X (the whole y); the values are the same.
    """
    return _dense(n, d, seed, "synthetic-linear", columns, noise=noise)


def make_logistic(
    n: int, d: int, *, seed: int, columns: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binary data: X ~ U[-1, 1], y ~ Bernoulli(sigmoid(X w)).

    w ~ N(0, 9/d) so that X w has standard deviation about sqrt(3) whatever d is: the classes
    are learnable (Bayes accuracy ~0.8) but not separable. ``columns``: as for
    :func:`make_linear_regression`.
    """
    return _dense(n, d, seed, "synthetic-logistic", columns, noise=None)


_CHUNK_ROWS = 1 << 14  # rows generated at a time: bounds the transient memory to ~chunk * d


def _dense(
    n: int, d: int, seed: int, purpose: str, columns: np.ndarray | None, *, noise: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X ~ U[-1, 1] (n, d) from one seeded stream, then w, then y's randomness from the same stream.

    X is generated a block of rows at a time and only ``columns`` are kept, so a party holding
    a share of the columns never holds the whole table. A second generator, advanced past X's
    ``n * d`` draws (one 64-bit output per uniform double), reads w and y's draws in the order
    the whole-table generator would: the values equal those of generating X at once.
    """
    rng = make_rng(seed, purpose=purpose)
    tail_bits = type(rng.bit_generator)()
    tail_bits.state = rng.bit_generator.state
    tail_bits.advance(n * d)
    tail = np.random.Generator(tail_bits)
    if noise is None:
        w = tail.standard_normal(d) * 3.0 / np.sqrt(d)
    else:
        w = tail.standard_normal(d)
    cols = np.arange(d) if columns is None else np.asarray(columns, dtype=np.int64)
    X = np.empty((n, cols.size), dtype=np.float64)
    y = np.empty(n, dtype=np.float64 if noise is not None else np.int64)
    for start in range(0, n, _CHUNK_ROWS):
        stop = min(n, start + _CHUNK_ROWS)
        block = rng.uniform(-1.0, 1.0, size=(stop - start, d))
        z = block @ w
        X[start:stop] = block if columns is None else block[:, cols]
        if noise is None:
            y[start:stop] = tail.random(stop - start) < 1.0 / (1.0 + np.exp(-z))
        else:
            y[start:stop] = z + noise * tail.standard_normal(stop - start)
    return X, y, w


# --------------------------------------------------------------------------- as tables


def _synthetic_table(
    X: np.ndarray, y: np.ndarray, *, regression: bool, d: int, columns: np.ndarray | None = None
) -> Table:
    fnames = [f"x{j}" for j in range(d)]
    groups = [[j] for j in range(d)]
    if regression:  # the target's own min/max: data-derived, listed as fitted
        y, y_range = scale_target(y)
        fitted = ("scaling range (min/max) of the regression target",)
        return Table(X, y, fnames, groups, y_range=y_range, columns=columns, fitted=fitted)
    return Table(X, y, fnames, groups, n_classes=2, columns=columns)


def _held(d: int, keep: ColumnPicker | None) -> np.ndarray | None:
    """The columns a picker keeps of a d-column table of single-column groups (None: all)."""
    return None if keep is None else np.asarray(keep([[j] for j in range(d)]), dtype=np.int64)


def sparse_table(*, n: int, d: int, sparsity: float, seed: int) -> Table:
    """``synthetic-sparse`` as an encoded table (target scaled to [-1, 1])."""
    X, y, _ = make_sparse_regression(n, d, sparsity, seed=seed)
    return _synthetic_table(X, y, regression=True, d=d)


def linear_table(
    *, n: int, d: int, seed: int, keep: ColumnPicker | None = None, **_: object
) -> Table:
    """``synthetic-linear`` as an encoded table (target scaled to [-1, 1]); ``keep``: the
    columns to hold, picked from the column groups (the others are never stored)."""
    cols = _held(d, keep)
    X, y, _ = make_linear_regression(n, d, seed=seed, columns=cols)
    return _synthetic_table(X, y, regression=True, d=d, columns=cols)


def logistic_table(
    *, n: int, d: int, seed: int, keep: ColumnPicker | None = None, **_: object
) -> Table:
    """``synthetic-logistic`` as an encoded table; ``keep`` as for :func:`linear_table`."""
    cols = _held(d, keep)
    X, y, _ = make_logistic(n, d, seed=seed, columns=cols)
    return _synthetic_table(X, y, regression=False, d=d, columns=cols)
