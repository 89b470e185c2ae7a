"""The functional mechanism with Gaussian noise (issue 25): every released coefficient of the
noisy objective carries N(0, σ²), σ calibrated to the replace-one L2 sensitivity of the whole
coefficient vector. The paper's Laplace version (Lemma 1, L1 bounds) stays as
``--mechanism laplace``.

Why: Lemma 1 charges Lap(Δ_f/ε) to every one of the ~d²/2 coefficients with Δ_f = B + B²/4 for
rows of L1 norm <= B; on breast (d = 31) that is Lap(84.5) at ε = 1 on coefficients of size ~20,
so the fit is a coin toss. The quadratic part's L2 norm grows as R² for rows of L2 norm <= R,
not as the number of coefficients, so at δ = 1e-5 the Gaussian's σ is about 8x smaller on breast
(pooled simulation, seeds 0-2, 20 draws each: accuracy 0.79 against 0.64 at ε = 1).

Derivation (the sensitivity). A row (x, v) adds φ(x, v) to the coefficient vector: the first
order α v x_a, the diagonal c x_a², the off-diagonal 2c x_a x_b (a < b) and, for linear
regression, the constant v². With ||x||₂ <= R (each party k scales its block to L2 norm <= R_k;
the constant column adds 1, so R² = 1 + Σ_k R_k²):

    Σ_a (c x_a²)² + Σ_{a<b} (2c x_a x_b)² = c² (2 (Σ_a x_a²)² - Σ_a x_a⁴) <= 2 c² R⁴,
    Σ_a (α v x_a)² <= α² v_max² R²,   (v²)² <= v_max⁴ (linear only).

Replacing one row moves the sum by φ(x, v) - φ(x', v'), so Δ₂ <= 2 sup ||φ||₂ =
2 sqrt(α² v_max² R² + 2 c² R⁴ [+ v_max⁴]). Logistic (Eq. 4): α = 1, v = 1/2 - y (v_max = 1/2),
c = 1/8; linear (Eq. 2): α = -2, v = y with |y| <= 1, c = 1. The Gaussian mechanism on the whole
vector (one event of sensitivity Δ₂, σ from the analytic Gaussian mechanism of Balle & Wang for
(ε, δ)); whoever adds a block's noise, every coefficient gets an independent N(0, σ²), so the
release is exactly that mechanism. A party's blocks are a sub-vector: its ε^(k) is at most the
global one, recorded as equal (conservative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from securevfl.errors import ConfigError
from securevfl.privacy import calibration_cache
from securevfl.privacy.accountant import PrivacyLedger, calibrate
from securevfl.privacy.analytic_gaussian import analytic_gaussian_sigma
from securevfl.privacy.events import PureDpEvent, gaussian_event
from securevfl.privacy.shared_ledgers import Op, shared_ledger

MECHANISMS = ("gaussian", "laplace")
TOL = 0.005  # the calibrated ε is within 0.5 % below the target
_CACHE_KIND = "fm-gaussian-sigma"
_CODE = (
    "securevfl.privacy.fm_gaussian",
    "securevfl.privacy.accountant",
    "securevfl.privacy.events",
)


def row_l2_bound(party_bounds: Sequence[float], intercept: bool) -> float:
    """R: the L2 bound of a whole row, every party's block at its bound and the constant 1."""
    if not party_bounds or any(not (b > 0 and math.isfinite(b)) for b in party_bounds):
        raise ConfigError(f"l2 bounds must be finite numbers > 0, got {list(party_bounds)}")
    return math.sqrt((1.0 if intercept else 0.0) + sum(b * b for b in party_bounds))


def gaussian_sensitivity(task: str, R: float, label_bound: float | None = None) -> float:
    """Δ₂ of the coefficient vector for rows of L2 norm <= R (module docstring); ``label_bound``
    replaces the label column's bound v_max (fm-vfl's residual mode: |σ(m) - y| < 1)."""
    if task == "logistic":
        alpha, c, vmax, const = 1.0, 0.125, 0.5, 0.0
    elif task == "linear":
        alpha, c, vmax, const = -2.0, 1.0, 1.0, 1.0
    else:
        raise ConfigError(f"task must be logistic or linear, got {task!r}")
    if label_bound is not None:
        vmax = float(label_bound)
    return 2.0 * math.sqrt(alpha**2 * vmax**2 * R**2 + 2.0 * c**2 * R**4 + const)


def gaussian_ops(
    sensitivity: float, sigma: float, parties: int, centring_epsilon: float = 0.0
) -> tuple[Op, ...]:
    """One Gaussian release of the whole objective, under every party (all are touched), and,
    with centring, each party's pure ε_c release of its column means (the sample unit composes
    all K of them), as a ledger's compose operations."""
    ev = gaussian_event(sigma=sigma, sensitivity=sensitivity)
    ops: list[Op] = []
    for k in range(parties):
        ops.append((k, ev, 1, False))
        if centring_epsilon > 0:
            ops.append((k, PureDpEvent(centring_epsilon), 1, False))
    ops.append((None, ev, 1, True))
    if centring_epsilon > 0:
        ops.append((None, PureDpEvent(centring_epsilon), parties, True))
    return tuple(ops)


def gaussian_ledger(
    sensitivity: float, sigma: float, parties: int, centring_epsilon: float = 0.0
) -> PrivacyLedger:
    """A new ledger of :func:`gaussian_ops` in the sample unit (one PLD accountant, so the
    record's ε is their exact composition), for a caller that composes more onto it."""
    ledger = PrivacyLedger("sample")
    for party, event, count, sample in gaussian_ops(sensitivity, sigma, parties, centring_epsilon):
        ledger.compose(party, event, count, sample=sample)
    return ledger


def shared_gaussian_ledger(
    sensitivity: float, sigma: float, parties: int, centring_epsilon: float = 0.0
) -> PrivacyLedger:
    """The same ledger, one object per process for these public inputs (``shared_ledger``):
    read it, never compose onto it."""
    return shared_ledger("sample", gaussian_ops(sensitivity, sigma, parties, centring_epsilon))


def gaussian_sigma(
    task: str,
    R: float,
    *,
    epsilon: float,
    delta: float,
    parties: int = 1,
    centring_epsilon: float = 0.0,
    label_bound: float | None = None,
) -> tuple[float, float]:
    """(σ, Δ₂): the smallest σ (within 0.5 %) whose Gaussian release, composed with the K pure
    ε_c releases of the column means (if any), is (ε, δ)-DP in the sample unit. Without
    centring: the analytic Gaussian mechanism's σ. With it, bisection between the σ for ε alone
    (too little noise) and for ε - K ε_c (basic composition: enough)."""
    if not (delta is not None and 0 < float(delta) < 1):
        raise ConfigError(f"--mechanism gaussian needs a delta in (0, 1), got {delta}")
    sens = gaussian_sensitivity(task, R, label_bound)
    delta = float(delta)
    rest = epsilon - parties * centring_epsilon
    if centring_epsilon <= 0:
        return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sens), sens
    if not rest > 0:
        raise ConfigError(
            f"the centring share must leave part of epsilon {epsilon:g} to the objective, "
            f"left {rest:g}"
        )
    lo = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sens)
    hi = analytic_gaussian_sigma(epsilon=rest, delta=delta, sensitivity=sens)

    def eps_of(sigma: float) -> float:
        return shared_gaussian_ledger(sens, sigma, parties, centring_epsilon).epsilon(delta)

    # a pure function of public inputs: cached on disk, an entry re-checked by one evaluation
    inputs = {"sens": sens, "epsilon": float(epsilon), "delta": delta, "parties": int(parties)}
    key = calibration_cache.entry_key(_CACHE_KIND, inputs | {"eps_c": centring_epsilon}, _CODE)
    hit = calibration_cache.load(_CACHE_KIND, key)
    cached = hit.get("sigma") if hit else None
    if type(cached) is float and lo <= cached <= hi:
        e = eps_of(cached)
        if (1.0 - 2 * TOL) * epsilon <= e <= epsilon:
            return cached, sens
    sigma, e = calibrate(eps_of, epsilon, lo=lo, hi=hi, rel_tol=TOL, what="sigma")
    calibration_cache.store(_CACHE_KIND, key, {"sigma": float(sigma), "epsilon": float(e)})
    return sigma, sens


def clip_l2(X: np.ndarray, bound: float) -> np.ndarray:
    """Each row scaled down (if needed) so its L2 norm is at most ``bound``."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))[:, None]
    return X * np.minimum(1.0, bound / np.maximum(norms, 1e-300))


def draw(rng: np.random.Generator, gaussian: bool, scale: float, size) -> np.ndarray:
    """Noise of one block: N(0, scale²) or Laplace(scale) per entry."""
    if gaussian:
        return rng.normal(0.0, scale, size=size)
    return rng.laplace(0.0, scale, size=size)


def ridge_scale(gaussian: bool, scale: float) -> float:
    """The ``scale`` that :func:`solve_noisy_quadratic`'s ridge rule expects: Laplace's b gives
    off-diagonal noise sd b/sqrt(2) in the symmetrised matrix; a Gaussian's σ gives σ/2, the
    same as b = σ/sqrt(2)."""
    return scale / math.sqrt(2.0) if gaussian else scale
