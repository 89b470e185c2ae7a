"""The analytic Gaussian mechanism (Balle & Wang, ICML 2018, Theorem 8).

Adding N(0, sigma^2) to a query of L2 sensitivity ``Δ`` is (ε, δ)-DP if and only if

    Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) <= δ.

The left side decreases in σ (for fixed ε) and in ε (for fixed σ), so both the calibration
σ(ε, δ, Δ) and its inverse ε(σ, δ, Δ) are found by bisection on that exact condition. Unlike the
classic calibration sqrt(2 ln(1.25/δ))·Δ/ε it is valid for every ε > 0, and never needs more
noise. Results are rounded to the safe side: σ from above, ε from above.
"""

from __future__ import annotations

import math

from scipy.special import log_ndtr, ndtr

from securevfl.errors import check_open_unit, check_positive

_REL_TOL = 1e-12
_MAX_ITER = 400


def analytic_gaussian_delta(*, sigma: float, epsilon: float, sensitivity: float) -> float:
    """The smallest δ for which N(0, σ²) noise on a Δ-sensitive query is (ε, δ)-DP."""
    check_positive("sigma", sigma)
    check_positive("epsilon", epsilon, strict=False)
    check_positive("sensitivity", sensitivity)
    a = sensitivity / (2.0 * sigma)
    c = epsilon * sigma / sensitivity
    # e^ε Φ(−a−c) in log space: for large ε the product is tiny but e^ε alone overflows
    second = math.exp(epsilon + float(log_ndtr(-a - c)))
    return max(0.0, float(ndtr(a - c)) - second)


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ (up to relative 1e-12, rounded up) making the mechanism (ε, δ)-DP."""
    check_positive("epsilon", epsilon)
    check_open_unit("delta", delta)
    check_positive("sensitivity", sensitivity)

    def ok(s: float) -> bool:
        return analytic_gaussian_delta(sigma=s, epsilon=epsilon, sensitivity=sensitivity) <= delta

    hi = sensitivity
    while not ok(hi):
        hi *= 2.0
    lo = hi / 2.0
    while ok(lo) and lo > 1e-300:
        hi, lo = lo, lo / 2.0
    for _ in range(_MAX_ITER):
        if hi - lo <= _REL_TOL * hi:
            break
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def analytic_gaussian_epsilon(*, sigma: float, delta: float, sensitivity: float) -> float:
    """The smallest ε (up to relative 1e-12, rounded up) for which the mechanism is (ε, δ)-DP."""
    check_positive("sigma", sigma)
    check_open_unit("delta", delta)
    check_positive("sensitivity", sensitivity)

    def ok(e: float) -> bool:
        return analytic_gaussian_delta(sigma=sigma, epsilon=e, sensitivity=sensitivity) <= delta

    if ok(0.0):
        return 0.0
    hi = 1.0
    while not ok(hi):
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    lo = 0.0
    for _ in range(_MAX_ITER):
        if hi - lo <= _REL_TOL * hi:
            break
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
