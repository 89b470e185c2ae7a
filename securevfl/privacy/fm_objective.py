"""The functional mechanism's objective for FM-VFL and its baselines (Xu, Yuan & Wu 2021).

The objective (linear regression, Eq. 2, or the order-2 Taylor logistic loss, Eq. 4) is a
quadratic f(w) = λ0 + λᵀw + Σ_{a<=b} λ_ab w_a w_b whose coefficients are sums over rows. Here:
the per-block coefficients, the Laplace draws on distinct monomials, the server's assembly of
the noisy objective from single-party blocks and opened cross products, and its minimisation
(post-processing: no budget). Sensitivities and budgets are in :mod:`securevfl.privacy.functional`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, check_positive

NOISE_TAIL = 45.0  # |Lap(b)| > 45 b has probability e^-45: the field is sized for 45 b


def fm_task(task: str) -> str:
    """'binary' -> logistic (Eq. 4), 'regression' -> linear (Eq. 2)."""
    if task == "binary":
        return "logistic"
    if task == "regression":
        return "linear"
    raise ConfigError(f"fm-vfl needs a binary or regression dataset, got task {task!r}")


def label_vector(task: str, y: np.ndarray) -> np.ndarray:
    """The label column of M_0: 1/2 - y (logistic: f1'(0) - y), y (linear)."""
    y = np.asarray(y, dtype=np.float64)
    return 0.5 - y if task == "logistic" else y


def factors(task: str) -> tuple[float, float]:
    """(first-order factor α, quadratic factor c): λ_a = α Σ v x_a, λ_aa = c Σ x_a², λ_ab = 2c Σ."""
    return (1.0, 0.125) if task == "logistic" else (-2.0, 1.0)


def single_coefficients(
    task: str, X: Any, v: np.ndarray | None, engine: Any = None, *, sums: Any = None
):
    """(λ0, λ_first or None, U upper-triangular monomial coefficients) of one party's block;
    Xᵀ X and Xᵀ v on the party's ``engine`` (:mod:`securevfl.engine`; None: numpy), or given
    as ``sums`` = (Xᵀ X, Xᵀ v) where the party summed them already."""
    alpha, c = factors(task)
    if sums is not None:
        G = sums[0]
    else:
        G = X.T @ X if engine is None else engine.gram(X)
    U = np.triu(2 * c * G, 1) + np.diag(c * np.diag(G))
    if v is None:
        return 0.0, None, U
    lam0 = float(v @ v) if task == "linear" else 0.0
    if sums is not None:
        return lam0, alpha * sums[1], U
    return lam0, alpha * (X.T @ v if engine is None else engine.rmatvec(X, v)), U


def laplace_upper(rng: np.random.Generator, d: int, scale: float) -> np.ndarray:
    """Independent Laplace(scale) on each distinct monomial w_a w_b, a <= b (upper triangle)."""
    return np.triu(rng.laplace(0.0, scale, size=(d, d)))


def solve_noisy_quadratic(
    lam: np.ndarray, U: np.ndarray, *, scale: float, ridge: float
) -> np.ndarray:
    """argmin λᵀw + wᵀSw for S = (U + Uᵀ)/2 (the noisy monomial coefficients, symmetrised).

    A noisy S can be indefinite and the objective unbounded below. As in Zhang et al. 2012
    (Sec. 5) we (1) regularise, S + ρI with ρ = ridge * sqrt(2d) * scale: sqrt(2d) * scale is
    the spectral norm of the symmetrised noise (Wigner: 2 σ sqrt(d) with off-diagonal σ =
    scale/sqrt(2)), a public number, so no budget is spent; and (2) trim the spectrum: the
    eigen-directions whose eigenvalue is still <= a tiny positive floor are dropped (w has no
    component there), and the objective is minimised on the remaining positive definite part.
    """
    S = (U + U.T) / 2.0
    d = S.shape[0]
    S = S + ridge * math.sqrt(2.0 * d) * scale * np.eye(d)
    vals, vecs = np.linalg.eigh(S)
    floor = 1e-9 * max(1.0, float(np.abs(vals).max()))
    keep = vals > floor
    g = vecs[:, keep].T @ lam
    return vecs[:, keep] @ (-g / (2.0 * vals[keep]))


def assemble_objective(
    task: str,
    dims: list[int],
    singles: dict[int, dict[str, Any]],
    cross: dict[tuple[int, int], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The server's noisy objective (λ, U) from the single-party blocks and the opened cross
    products R_ab = M_aᵀM_b + noise (row 0 of R_0b is v·X_b: the first-order terms of party b)."""
    alpha, c = factors(task)
    offs = np.cumsum([0, *dims])
    d = int(offs[-1])
    lam, U = np.zeros(d), np.zeros((d, d))
    for k in range(len(dims)):
        sl = slice(offs[k], offs[k + 1])
        U[sl, sl] = singles[k]["U"]
        if k == 0:
            lam[sl] = singles[0]["lam"]
    for (a, b), R in cross.items():
        sa, sb = slice(offs[a], offs[a + 1]), slice(offs[b], offs[b + 1])
        if a == 0:
            lam[sb] = alpha * R[0]
            R = R[1:]
        U[sa, sb] = 2 * c * R
    return lam, U


def parse_party_epsilons(text: str, K: int) -> list[float] | None:
    """``"1,0.5"`` -> one ε^(k) per data party; empty: None."""
    if not str(text).strip():
        return None
    try:
        vals = [float(t) for t in str(text).split(",")]
    except ValueError:
        raise ConfigError(f"party_epsilons must be comma-separated numbers, got {text!r}") from None
    if len(vals) != K:
        raise ConfigError(f"party_epsilons must give {K} values (one per data party), got {text!r}")
    return [check_positive("party_epsilons", v) for v in vals]
