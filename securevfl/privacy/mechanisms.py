"""Noise calibration for the Gaussian mechanism: σ from (ε, δ, Δ).

``classic`` is Dwork & Roth's Thm A.1, σ = sqrt(2 ln(1.25/δ))·Δ/ε, proved only for ε < 1 (for
larger ε its σ can give a true ε above the request: 10.39 for ε = 10 at δ = 1e-5). ``analytic``
is the smallest σ whose exact ε is at most the request (Balle & Wang 2018). Either way the record
reports the exact ε of the σ used, from the accountant, never the requested figure.
"""

from __future__ import annotations

import math

from securevfl.errors import ConfigError, check_open_unit, check_positive
from securevfl.privacy.analytic_gaussian import analytic_gaussian_sigma

CALIBRATIONS = ("classic", "analytic")


def classic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = sqrt(2 ln(1.25/δ))·Δ/ε (Dwork & Roth Thm A.1; a valid bound only for ε < 1)."""
    check_positive("epsilon", epsilon)
    check_open_unit("delta", delta)
    check_positive("sensitivity", sensitivity, strict=False)
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_sigma(calibration: str, *, epsilon: float, delta: float, sensitivity: float) -> float:
    """σ for a Gaussian release of sensitivity Δ at (ε, δ), by ``calibration``."""
    if calibration == "classic":
        return classic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    if calibration == "analytic":
        return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    raise ConfigError(f"calibration must be one of {list(CALIBRATIONS)}, got {calibration!r}")
