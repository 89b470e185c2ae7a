"""The label holder's refit of a vertical GLM (HDP-VFL's ``final_fit=refit``).

After private training the label holder (party 0) holds its own exact columns and labels and,
for every training row, each passive party's last noisy message s~_k = X_k w_k + N(0, σ_B²).
It refits, on its training rows, its own weights, its bias and one factor α_k per passive party:

    θ = X_0 w_0 + b + Σ_k α_k · s_k

by minimising the run's GLM loss (plus a small ridge). Where a passive block's scores are too
noisy to help, α_k goes to 0 and the model is the label holder alone (so the collaboration can
never do much worse than not collaborating); where they help, the refit keeps them. Test rows
are scored with the passive parties' messages as before, multiplied by α_k.

Privacy: the inputs are the label holder's own data and what the passive parties already
released (their noisy training messages); nothing new is sent, so the passive parties'
guarantee is post-processing (Theorems 1, 2 of HDP-VFL unchanged). The label holder's own rows
are protected by its noisy derivative stream, which the refit does not touch: the refitted w_0,
b and α_k never leave the label holder (scores on test rows are its own computation).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize

from securevfl.models.glm import GLMLoss

RIDGE = 1e-4  # a small ridge keeps the refit finite on separable rows; no privacy role


def refit_active(
    loss: GLMLoss,
    X_own: np.ndarray | tuple[Callable, Callable, int],
    passive: np.ndarray,
    y: np.ndarray,
    *,
    ridge: float = RIDGE,
) -> tuple[np.ndarray, float, np.ndarray]:
    """(w_own, bias, α per passive column) minimising mean loss + ridge/2·||(w, α)||².

    ``X_own``: the label holder's training rows, or (X w, Xᵀ g, its column count) where
    they stay on its engine (one pass over its blocks per product);
    ``passive``: one column per passive party, its noisy message for each training row;
    ``y``: labels already in the loss's domain (``loss.encode_labels``).
    """
    n = len(y)
    if isinstance(X_own, np.ndarray):
        p = X_own.shape[1]
        Z = np.column_stack([X_own, passive, np.ones(n)])
        d = Z.shape[1]

        def product(beta: np.ndarray) -> np.ndarray:
            return Z @ beta

        def rproduct(g: np.ndarray) -> np.ndarray:
            return Z.T @ g
    else:  # (X w, Xᵀ g, columns) of own rows held elsewhere: the party's engine
        own_mv, own_rmv, p = X_own
        d = p + passive.shape[1] + 1

        def product(beta: np.ndarray) -> np.ndarray:
            return own_mv(beta[:p]) + passive @ beta[p : d - 1] + beta[-1]

        def rproduct(g: np.ndarray) -> np.ndarray:
            return np.concatenate([own_rmv(g), passive.T @ g, [g.sum()]])

    pen = np.full(d, ridge)
    pen[-1] = 0.0  # the bias is not penalised

    def objective(beta: np.ndarray) -> tuple[float, np.ndarray]:
        theta = product(beta)
        value = float(np.mean(loss.value(theta, y))) + 0.5 * float(pen @ (beta * beta))
        grad = rproduct(loss.derivative(theta, y)) / n + pen * beta
        return value, grad

    start = np.zeros(d)
    start[p : d - 1] = 1.0  # begin at the trained combination's weighting
    out = minimize(objective, start, jac=True, method="L-BFGS-B", options={"maxiter": 500})
    beta = out.x
    return beta[:p].copy(), float(beta[-1]), beta[p : d - 1].copy()
