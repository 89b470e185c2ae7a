"""The Poisson Binomial Mechanism (Chen, Ozgur, Kairouz 2022) as PBM-VFL uses it.

Algorithm 1 (scalar PBM), applied to every coordinate of a party's embedding x in [-C, C]:

    p = 1/2 + (beta / C) * x,      q ~ Binomial(b, p),      beta in (0, 1/4], b in N.

The server only learns q_hat = sum_m q_m (secure aggregation) and estimates the sum of embeddings
s = sum_m x_m. Scaling, re-derived from the mechanism (Theorem 2.3 of the seed paper): since
E[q_m] = b/2 + b*beta*x_m/C, E[q_hat] = bM/2 + (b*beta/C)*s, so the unbiased estimator is

    s_tilde = C / (beta * b) * (q_hat - b*M/2),

with Var[s_tilde] = C^2/(beta^2 b^2) * sum_m b p_m (1 - p_m) <= C^2 M / (4 beta^2 b), exactly the
variance Theorem 2.3 states. (Algorithm 2, line 10 of the paper writes 1/(beta b): the same form
with C = 1, which is what tanh-bounded embeddings give.) We use the C/(beta b) form.

The sampler actually run: ``pbm_quantize`` rounds p toward 1/2 onto the grid j / 2^12 and draws
q ~ Binomial(b, j / 2^12) EXACTLY (``_binomial_grid``: bit-plane comparisons of uniform 12-bit
numbers with j, popcounts of fresh random words; no alias table, no truncated support, the same
code for every b). An earlier version used alias tables whose pmf was rounded to 2^-62, which
made tail outcomes possible under one p and impossible under the other (infinite privacy loss),
and torch's BTRS sampler above b = 127, whose pmf nobody analysed. The accountant
(``pbm_accountant``) now analyses exactly Binomial(b, j / 2^12) at the reachable levels j.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError, check_int


@dataclass(frozen=True)
class PBMEvent:
    """``count`` releases of a secure sum of ``n_parties`` PBM outputs of dimension ``dim``."""

    b: int
    beta: float
    n_parties: int
    dim: int = 1
    count: int = 1
    bound: float = 1.0
    party: int | None = None
    label: str = ""


def check_pbm_params(b: int, beta: float) -> tuple[int, float]:
    """Validate (b, beta): b >= 1 integer, 0 < beta <= 1/4 (so p stays in [1/4, 3/4])."""
    b = check_int("b", b, minimum=1)
    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ConfigError(f"beta must be a number in (0, 0.25], got {beta!r}") from None
    if not 0.0 < beta <= 0.25:
        raise ConfigError(f"beta must be in (0, 0.25], got {beta!r}")
    return b, beta


def pbm_quantize(
    x: np.ndarray,
    *,
    b: int,
    beta: float,
    rng: np.random.Generator,
    bound: float = 1.0,
    party: int | None = None,
    n_parties: int = 1,
) -> tuple[np.ndarray, PBMEvent]:
    """Algorithm 1 elementwise: integers q in [0, b] and the event of this release.

    p is rounded toward 1/2 onto the grid 2^-12 (shrinkage < C 2^-12 / beta; see below), then
    q ~ Binomial(b, p) exactly (:func:`_binomial_grid`), for every b.
    Raises ConfigError if some |x| > bound or is NaN (the analysis assumes x in [-C, C]).
    """
    b, beta = check_pbm_params(b, beta)
    x = np.asarray(x)
    top = max(float(x.max()), -float(x.min())) if x.size else 0.0
    if not top <= bound * (1 + 1e-6):  # NaN fails too
        raise ConfigError(f"PBM inputs must lie in [-{bound}, {bound}], got max |x| = {top}")
    if top > bound:  # within the tolerance: clip onto [-C, C]
        x = np.clip(np.asarray(x, dtype=np.float64), -bound, bound)
    # p rounded toward 1/2 onto the grid of 2^-k (k = 12): p_q = 1/2 + trunc((p - 1/2) 2^k) / 2^k,
    # clipped to |p_q - 1/2| <= floor(beta 2^k) / 2^k = beta_q <= beta, then q ~ Binomial(b, p_q)
    # exactly. The released q depends on x only through the level j = p_q 2^k, an integer in
    # [2^(k-1) - floor(beta 2^k), 2^(k-1) + floor(beta 2^k)] (grid_levels); the accountant takes
    # the worst case over exactly these levels (both ends are reached, by x = -C and x = +C).
    # Cost: each coordinate's estimate is shrunk toward 0 by less than C 2^-k / beta (1e-3 C at
    # beta = 1/4), far below its noise, C / (2 beta sqrt b).
    level = np.multiply(x, beta / bound * (1 << _GRID_BITS), dtype=np.float64).astype(np.int64)
    top_level = int(beta * (1 << _GRID_BITS))  # floor(beta 2^k)
    np.clip(level, -top_level, top_level, out=level)
    level += 1 << (_GRID_BITS - 1)  # j = p_q 2^k
    q = _binomial_grid(b, level, rng)
    dim = int(x.shape[-1]) if x.ndim else 1
    return q, PBMEvent(b=b, beta=beta, n_parties=n_parties, dim=dim, bound=bound, party=party)


# ---------------------------------------------------------------- the sampler
# PBM draws Binomial(b, p) for every embedding coordinate at every step. p is first rounded onto
# the grid j / 2^k (pbm_quantize), then the draw is exact: see _binomial_grid.
_GRID_BITS = 12  # k: p = j / 2^k
_CHUNK = 64  # trials handled per 64-bit word
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def grid_levels(beta: float) -> tuple[int, int]:
    """The extreme grid levels (j_min, j_max) pbm_quantize can draw with at this beta:
    2^(k-1) -+ floor(beta 2^k), i.e. p in [1/2 - beta_q, 1/2 + beta_q], beta_q = floor(beta 2^k)
    / 2^k <= beta (every input in [-C, C] reaches only levels in between, both ends included)."""
    top = int(beta * (1 << _GRID_BITS))
    half = 1 << (_GRID_BITS - 1)
    return half - top, half + top


def _binomial_grid(b: int, j: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exact Binomial(b, j / 2^k) draws (int64), any b >= 1, integer j in [0, 2^k].

    Trial i succeeds iff U_i < j, U_i uniform on k bits, which has probability j / 2^k exactly.
    The b comparisons are made bit plane by bit plane, most significant first, on the trials
    still tied with j's leading bits ("rem" of them): a fresh 64-bit word masked to rem bits
    gives their next bits, and its popcount D ~ Binomial(rem, 1/2) exactly (the trials are
    exchangeable, so only the count matters). Where j's bit is 1 the rem - D trials with bit 0
    are below j (successes) and the D others stay tied; where it is 0 the D trials with bit 1
    are above j (failures) and rem - D stay tied; after k planes the ties (U_i = j) fail. Trials
    go in chunks of at most 64 per word. So the output pmf is exactly Binomial(b, j / 2^k), no
    table and no rounding: full support {0..b} for every 0 < j < 2^k, which is what the
    accountant analyses (pbm_accountant). Uses k * ceil(b / 64) words per element at most (a
    chunk stops early once no element has ties left).
    """
    jf = np.asarray(j, dtype=np.int64).ravel()
    n = jf.size
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out.reshape(np.shape(j))
    for first in range(0, b, _CHUNK):
        m = min(_CHUNK, b - first)
        rem = np.full(n, m, dtype=np.int64)
        for level in range(_GRID_BITS - 1, -1, -1):
            if not rem.any():
                break
            word = rng.bit_generator.random_raw(n)
            mask = np.where(
                rem >= 64, _ONES, (np.uint64(1) << np.minimum(rem, 63).astype(np.uint64)) - 1
            )
            ones = np.bitwise_count(word & mask).astype(np.int64)
            bit = (jf >> level) & 1
            out += bit * (rem - ones)
            rem = np.where(bit == 1, ones, rem - ones)
    return out.reshape(np.shape(j))


def pbm_estimate_sum(
    q_sum: np.ndarray, *, b: int, beta: float, n_parties: int, bound: float = 1.0
) -> np.ndarray:
    """Unbiased estimate of sum_m x_m from q_hat = sum_m q_m: C/(beta b) * (q_hat - bM/2)."""
    b, beta = check_pbm_params(b, beta)
    check_int("n_parties", n_parties, minimum=1)
    q = np.asarray(q_sum, dtype=np.float64)
    return bound / (beta * b) * (q - b * n_parties / 2.0)


def pbm_sum_variance_bound(*, b: int, beta: float, n_parties: int, bound: float = 1.0) -> float:
    """Theorem 2.3 (2): the estimator's variance is at most C^2 M / (4 beta^2 b)."""
    b, beta = check_pbm_params(b, beta)
    return bound**2 * n_parties / (4.0 * beta**2 * b)


def ldp_sigma(*, b: int, beta: float, n_parties: int) -> float:
    """The LDP baseline's Gaussian std per coordinate: sigma_G^2 = 2M / (b beta^2) (Fig. 2)."""
    b, beta = check_pbm_params(b, beta)
    return float(np.sqrt(2.0 * n_parties / (b * beta**2)))
