"""The decision threshold of a logistic model refitted from noisy scores (HDP-VFL's
``threshold=deconvolved``): a 1-D logistic solver, regression calibration for known Gaussian
noise, and the active party's θ and labels recovered from the logistic derivative."""

from __future__ import annotations

import math

import numpy as np


def logistic_fit_1d(x: np.ndarray, y01: np.ndarray, iters: int = 50) -> tuple[float, float, float]:
    """Maximum-likelihood (slope, intercept, z-score of the slope) of y ~ sigmoid(a·x + c)."""
    m, sd = float(np.mean(x)), float(np.std(x)) or 1.0
    Z = np.column_stack([(x - m) / sd, np.ones_like(x)])
    beta = np.zeros(2)
    H = np.eye(2)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ beta, -50.0, 50.0)))
        H = (Z * (p * (1.0 - p))[:, None]).T @ Z + 1e-9 * np.eye(2)
        step = np.linalg.solve(H, Z.T @ (y01 - p))
        beta += step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    se = math.sqrt(max(float(np.linalg.inv(H)[0, 0]), 1e-300))
    return float(beta[0] / sd), float(beta[1] - beta[0] * m / sd), float(beta[0] / se)


def deconvolved_threshold(
    scores: np.ndarray, y01: np.ndarray, noise_var: float, min_z: float = 3.0
) -> tuple[float | None, dict[str, float]]:
    """Decision threshold on the noise-free score s = x·w from the noisy s~ = s + Z of training.

    Why a threshold at all: with ||w_k|| <= k the fitted bias and the (too small) slope of the
    scores are miscalibrated, so sign(x·w + b) puts every row on the majority side even with
    little noise; refitting the 1-d model y ~ sigmoid(α·s + β) on the fixed direction w frees
    the slope. The active party only has s~ = s + Z, Z ~ N(0, s²), s² = Σ_k σ_B² (public).
    Fitting y ~ sigmoid(a·s~ + c) gives the 0.5-crossing t~ = -c/a. With s Gaussian,
    E[s | s~] = μ + λ(s~ - μ), λ = 1 - s²/Var(s~) (reliability), and the probit approximation
    P(y=1 | s~) = sigmoid((α·E[s|s~] + β)/D) for a constant D; matching the two forms gives
    -β/α = μ + λ(t~ - μ) (D cancels; regression calibration). Kept only when the slope is
    significantly positive (z > ``min_z``) and λ > 0; otherwise None (the bias as trained).
    Inputs: the active party's own labels and the s~ it already received (Sec[IR_B]):
    post-processing, no extra release, no extra privacy cost (Theorems 1 and 2 unchanged).
    """
    mu, var = float(np.mean(scores)), float(np.var(scores))
    reliability = max(0.0, 1.0 - noise_var / var) if var > 0 else 0.0
    a, c, z = logistic_fit_1d(scores, y01)
    info = {"mu": mu, "reliability": reliability, "slope": a, "slope_z": z, "rows": float(len(y01))}
    if reliability <= 0.0 or a <= 0.0 or z < min_z:
        return None, info
    t_naive = -c / a
    t = mu + reliability * (t_naive - mu)
    info.update(naive_threshold=t_naive, threshold=t)
    return t, info


def theta_from_logistic_derivative(deriv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(θ, y in {0,1}) from h = -y·sigmoid(-yθ), y = ±1: the active party's own θ~ and labels."""
    y = np.where(deriv < 0, 1.0, -1.0)
    mag = np.clip(np.abs(deriv), 1e-15, 1.0 - 1e-15)
    return y * np.log(1.0 / mag - 1.0), (y > 0).astype(float)


def refit_threshold(
    recorded: list[tuple[int, np.ndarray]],
    mean_derivs: list[float],
    *,
    lr: float,
    free_bias: bool,
    noise_var: float,
) -> tuple[float | None, dict[str, float]]:
    """The deconvolved threshold from the active party's recorded exact derivatives.

    ``recorded`` holds (step, derivative) of the steps kept; ``mean_derivs`` the mean derivative
    of every step, which replays a free bias's trajectory b_t = -η·Σ_{s<t} mean(h_s) (no penalty
    on it), so the recovered θ~ - b_t are scores of the weights alone (``free_bias`` False: no
    bias, b_t = 0).
    """
    bias_at = np.concatenate([[0.0], -lr * np.cumsum(mean_derivs)])
    if not free_bias:
        bias_at[:] = 0.0
    scores, labels = [], []
    for step, deriv in recorded:
        th, y01 = theta_from_logistic_derivative(deriv)
        scores.append(th - bias_at[step])
        labels.append(y01)
    return deconvolved_threshold(np.concatenate(scores), np.concatenate(labels), noise_var)


RECORD_SHARE = 8  # the threshold uses the last 1/RECORD_SHARE of the final epoch's steps


def recording_start(total_steps: int, epochs: int) -> int:
    """The first step whose derivative the refit uses: the last eighth of the final epoch
    (>= 1 step). The weights are still moving after a short run, and earlier scores understate
    the final ones (measured on adult: 1/2 of the epoch or all of it put the threshold too low)."""
    r = total_steps // epochs
    return total_steps - max(1, -(-r // RECORD_SHARE))
