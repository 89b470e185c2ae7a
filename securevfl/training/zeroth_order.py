"""Zeroth-order gradient estimates (Avg-RandGradEst) at a client's output layer or its weights.

For a loss f of a point h in R^d, q random directions u_j and a smoothing radius μ:

    ĝ = φ / (q μ) Σ_j [f(h + μ u_j) − f(h)] u_j

with φ = d for directions uniform on the unit sphere (E[u uᵀ] = I/d) and for a random signed
coordinate ±e_k (E[u uᵀ] = I/d), φ = 1 for standard Gaussian directions (E[u uᵀ] = I).
*Orthogonal* (q <= d): the q directions of one row are orthonormal, a uniformly random q-frame
(each one still uniform on the sphere, φ = d), so (d/q) Σ_j u_j u_jᵀ is d/q times a random rank-q
projection with mean I: still unbiased, with E||ĝ − g||² ≈ (d/q − 1)||g||² against ≈ (d − 1)/q
||g||² for independent sphere directions at the same q (at q = d: exact up to μ).

For the sphere, orthogonal frames (each direction alone is uniform on the sphere) and the
Gaussian, ĝ is unbiased for ∇f_μ, the gradient of f smoothed over the ball / the Gaussian of
radius μ (for a quadratic f, ∇f_μ = ∇f). For signed coordinates, E[ĝ] is the central
difference (f(h + μ e_k) − f(h − μ e_k)) / 2μ along every axis (∇f for a quadratic). The sign
matters: every direction has mean zero, which the per-batch form below relies on (unsigned
coordinates would add the other rows' mean loss change to every row's estimate).

Batched forms: ``h`` is (b, d), one direction per row and per j, ``dirs`` is (q, b, d).
*Per-sample* δ: one scalar per row and direction, δ[j, i] = f_i(h_i + μ u_ji) − f_i(h_i), shape
(q, b). *Per-batch* δ (the authors' code): one scalar per direction for the whole batch,
δ[j] = L(h + μ U_j) − L(h) with L the batch loss; since the other rows' directions are
independent and mean zero, row i's estimate is still unbiased, with their terms as extra
variance. Either way the estimate targets the gradient of the batch loss the server computes.
"""

from __future__ import annotations

import math

import numpy as np

from securevfl.errors import ConfigError

DIRECTIONS = ("sphere", "gaussian", "coordinate", "orthogonal")


def phi_of(direction: str, d: int) -> float:
    """The scale φ that makes the estimate unbiased for ``direction`` in dimension ``d``."""
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    return 1.0 if direction == "gaussian" else float(d)


def sample_directions(
    rng: np.random.Generator, direction: str, shape: tuple[int, ...]
) -> np.ndarray:
    """Random directions of ``shape`` (..., d): each last-axis vector is one direction."""
    phi_of(direction, shape[-1])
    if direction == "orthogonal":
        q, d = shape[0], shape[-1]
        if q > d:
            raise ConfigError(
                f"q must be <= the dimension ({d}) for orthogonal directions, got {q}"
            )
        g = np.moveaxis(rng.standard_normal(shape), 0, -1)  # (..., d, q)
        Q, R = np.linalg.qr(g)
        # sign fix: Q uniformly distributed (Haar), not biased by the factorisation's convention
        Q = Q * np.sign(np.diagonal(R, axis1=-2, axis2=-1))[..., None, :]
        return np.moveaxis(Q, -1, 0)
    if direction == "coordinate":
        out = np.zeros(shape)
        k = rng.integers(shape[-1], size=shape[:-1])
        sign = rng.choice([-1.0, 1.0], size=shape[:-1])
        np.put_along_axis(out, k[..., None], sign[..., None], axis=-1)
        return out
    u = rng.standard_normal(shape)
    if direction == "sphere":
        u /= np.linalg.norm(u, axis=-1, keepdims=True)
    return u


def zo_estimate(deltas: np.ndarray, dirs: np.ndarray, *, mu: float, direction: str) -> np.ndarray:
    """Avg-RandGradEst from the loss differences and the directions they were taken along.

    ``dirs`` (q, ..., d); ``deltas`` (q,) per batch or (q, ...) per sample.
    """
    q, d = dirs.shape[0], dirs.shape[-1]
    if not (mu > 0 and math.isfinite(mu)):
        raise ConfigError(f"mu must be a finite number > 0, got {mu}")
    deltas = np.asarray(deltas, dtype=np.float64)
    if deltas.shape[0] != q:
        raise ConfigError(f"deltas must have one entry per direction ({q}), got {deltas.shape}")
    w = deltas.reshape(deltas.shape + (1,) * (dirs.ndim - deltas.ndim))
    return phi_of(direction, d) / (q * mu) * (w * dirs).sum(axis=0)


def flat_parameters(params: list) -> np.ndarray:
    """Concatenate torch parameters into one float64 vector (ZOO on a whole model)."""
    return np.concatenate([p.detach().numpy().ravel() for p in params]).astype(np.float64)


def add_to_parameters(params: list, step: np.ndarray) -> None:
    """Add the flat vector ``step`` to the torch parameters in place (no autograd)."""
    import torch

    off = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.add_(torch.as_tensor(step[off : off + n].reshape(p.shape), dtype=p.dtype))
            off += n
