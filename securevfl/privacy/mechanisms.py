"""Noise mechanisms: small pure functions with an explicit ``rng``; each returns its event."""

from __future__ import annotations

import math

import numpy as np

from securevfl.errors import check_open_unit, check_positive
from securevfl.privacy.events import GaussianEvent, LaplaceEvent


def classic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """sigma = sqrt(2 ln(1.25/delta)) * sensitivity / epsilon (Dwork & Roth Thm A.1; eps < 1)."""
    check_positive("epsilon", epsilon)
    check_open_unit("delta", delta)
    check_positive("sensitivity", sensitivity, strict=False)
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def classic_gaussian_epsilon(*, sigma: float, delta: float, sensitivity: float) -> float:
    """Inverse of :func:`classic_gaussian_sigma`: epsilon = sqrt(2 ln(1.25/delta)) * Δ / sigma."""
    check_positive("sigma", sigma)
    check_open_unit("delta", delta)
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / sigma


def gaussian_noise(
    values: np.ndarray,
    *,
    sigma: float,
    sensitivity: float,
    rng: np.random.Generator,
    party: int | None = None,
    label: str = "",
) -> tuple[np.ndarray, GaussianEvent]:
    """values + N(0, sigma^2) elementwise, and the event describing the release."""
    check_positive("sigma", sigma, strict=False)
    noisy = values + rng.normal(0.0, sigma, size=np.shape(values)) if sigma > 0 else values.copy()
    return noisy, GaussianEvent(sigma=sigma, sensitivity=sensitivity, party=party, label=label)


def laplace_noise(
    values: np.ndarray,
    *,
    scale: float,
    sensitivity: float,
    rng: np.random.Generator,
    party: int | None = None,
    label: str = "",
) -> tuple[np.ndarray, LaplaceEvent]:
    """values + Laplace(0, scale) elementwise, and the event describing the release."""
    check_positive("scale", scale, strict=False)
    noisy = values + rng.laplace(0.0, scale, size=np.shape(values)) if scale > 0 else values.copy()
    return noisy, LaplaceEvent(scale=scale, sensitivity=sensitivity, party=party, label=label)


def clip_rows(values: np.ndarray, *, max_norm: float) -> np.ndarray:
    """Scale each row of ``values`` down so that its L2 norm is at most ``max_norm``."""
    check_positive("max_norm", max_norm)
    norms = np.linalg.norm(values, axis=-1, keepdims=True)
    return values * np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))
