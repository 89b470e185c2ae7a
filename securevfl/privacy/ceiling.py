"""The accuracy any classifier can reach from a row's Gaussian-DP releases alone (a ceiling).

Setting: the label holder holds no features; a test row x is scored from what the K passive
parties released about it, each party k a Gaussian mechanism r_k(x_k) + N(0, σ_k² I) with
||r_k(·)|| <= C_k and σ_k = 2C_k / μ_k (a μ_k-GDP release of the party's row, whatever model
produced r_k: the model is fixed by the training releases, which involve other rows only). The
K releases of one person compose to one μ-GDP release with μ² = Σ μ_k² (Dong, Roth & Su 2019,
Cor. 3.3): for any two persons x, x', the trade-off function T(M(x), M(x')) >= G_μ, where
G_μ(α) = Φ(Φ⁻¹(1 - α) - μ) is that of N(0, 1) vs N(μ, 1).

**Binary labels (exact ceiling).** Let P_y be the law of the release given class y: a mixture of
M(x) over the persons of class y. A classifier is a test φ (predict 1). For every pair (x, x'),
1 - E_{M(x')}φ >= G_μ(E_{M(x)}φ); averaging over x ~ P(·|0), x' ~ P(·|1) and using that G_μ is
convex (Jensen) gives β >= G_μ(α) for the class-level errors α = P_0(φ = 1), β = P_1(φ = 0).
Hence

    accuracy = π_0 (1 - α) + π_1 (1 - β) <= max_α π_0 (1 - α) + π_1 (1 - G_μ(α)),

which is the Bayes accuracy of telling N(0, 1) from N(μ, 1) with priors (π_0, π_1): the
threshold t = μ/2 + ln(π_0/π_1)/μ on the normal line gives it in closed form,
π_0 Φ(t) + π_1 Φ(μ - t). Embeddings that put the two classes at antipodal points of the ball
(in one direction) reach it, so it is the ceiling, not just a bound.

**Any number of classes (a bound).** The total variation between any two persons' releases is
at most τ = 2Φ(μ/2) - 1 (the largest gap 1 - α - G_μ(α), at α = Φ(-μ/2)). With y* the most
frequent class, P_y(φ = y) <= P_{y*}(φ = y) + τ for every y, so

    accuracy = Σ_y π_y P_y(φ = y) <= π_{y*} Σ_y P_{y*}(φ = y) + (1 - π_{y*}) τ
             = π_max + (1 - π_max) τ,

which for two classes is π_max + π_min·τ (looser than the exact ceiling above).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import norm

from securevfl.errors import ConfigError


def tv_bound(mu: float) -> float:
    """τ = 2Φ(μ/2) - 1: the largest total variation between two outputs of a μ-GDP release."""
    _check_mu(mu)
    return float(2.0 * norm.cdf(mu / 2.0) - 1.0)


def composed_mu(mus: Sequence[float]) -> float:
    """μ of the K parties' releases of one person composed: √(Σ μ_k²)."""
    return math.sqrt(sum(float(m) ** 2 for m in mus))


def binary_ceiling(mu: float, priors: Sequence[float]) -> float:
    """The exact ceiling for two classes: Bayes accuracy of N(0, 1) vs N(μ, 1) with ``priors``."""
    _check_mu(mu)
    p0, p1 = _priors(priors)
    if len(priors) != 2:
        raise ConfigError(f"priors must have 2 classes for the binary ceiling, got {len(priors)}")
    if mu == 0.0 or p0 == 0.0 or p1 == 0.0:
        return max(p0, p1)
    t = mu / 2.0 + math.log(p0 / p1) / mu
    return float(p0 * norm.cdf(t) + p1 * norm.cdf(mu - t))


def tv_ceiling(mu: float, priors: Sequence[float]) -> float:
    """π_max + (1 - π_max)·τ: a bound for any number of classes."""
    p = _priors(priors)
    return float(max(p) + (1.0 - max(p)) * tv_bound(mu))


def accuracy_ceiling(mu: float, priors: Sequence[float]) -> float:
    """The best bound we have: exact for two classes, the total-variation bound otherwise."""
    return binary_ceiling(mu, priors) if len(priors) == 2 else tv_ceiling(mu, priors)


def _check_mu(mu: float) -> None:
    if not (math.isfinite(mu) and mu >= 0):
        raise ConfigError(f"mu must be a finite number >= 0, got {mu}")


def _priors(priors: Sequence[float]) -> tuple[float, ...]:
    p = tuple(float(x) for x in priors)
    if len(p) < 2 or min(p) < 0 or not math.isclose(sum(p), 1.0, abs_tol=1e-6):
        raise ConfigError(f"priors must be >= 2 class shares summing to 1, got {list(priors)}")
    return p
