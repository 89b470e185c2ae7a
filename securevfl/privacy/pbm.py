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

Speed: ``pbm_quantize`` rounds p toward 1/2 onto a grid of 2^-12 before drawing (for b < 128), so
each draw is one lookup in a precomputed integer alias table; the privacy accounting is
unchanged (see the comment there), the estimate's shrinkage toward 0 is below C 2^-12 / beta.
``_binomial`` is the exact sampler at an unrounded p (tables plus a correction stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

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

    For b < 128, p is first rounded toward 1/2 onto the grid 2^-12 (same privacy accounting,
    shrinkage < C 2^-12 / beta; see below); for larger b it is used as is (torch's sampler).
    Raises ConfigError if some |x| > bound or is NaN (the analysis assumes x in [-C, C]).
    """
    b, beta = check_pbm_params(b, beta)
    x = np.asarray(x)
    top = max(float(x.max()), -float(x.min())) if x.size else 0.0
    if not top <= bound * (1 + 1e-6):  # NaN fails too
        raise ConfigError(f"PBM inputs must lie in [-{bound}, {bound}], got max |x| = {top}")
    if top > bound:  # within the tolerance: clip onto [-C, C]
        x = np.clip(np.asarray(x, dtype=np.float64), -bound, bound)
    if b < 1 << _COL_BITS:
        # p rounded toward 1/2 onto the grid of 2^-k (k = 12): p_q = 1/2 + trunc((p - 1/2) 2^k)
        # / 2^k, clipped to |p_q - 1/2| <= floor(beta 2^k) / 2^k <= beta, then q ~ Binomial(b,
        # p_q) exactly (one alias-table draw per coordinate). This is Algorithm 1 applied to
        # x_q = C (p_q - 1/2) / beta, a deterministic function of the party's own x with
        # |x_q| <= |x| <= C, so p_q stays inside [1/2 - beta, 1/2 + beta]. The accountant's
        # epsilon(delta) is a worst case over inputs anywhere in [-C, C] (its neighbour pairs sit
        # at the extremes x = +-C, i.e. p = 1/2 +- beta, which the rounding keeps exactly when
        # beta 2^k is an integer, as for beta = 1/4, and moves inward otherwise); restricting the
        # reachable p to a subset of that interval cannot make any release less private, so the
        # same epsilon(delta) holds. Cost: the estimate of each coordinate is shrunk toward 0 by
        # less than C 2^-k / beta (1e-3 C at beta = 1/4), far below its noise, C / (2 beta sqrt b).
        level = np.multiply(x, beta / bound * (1 << _GRID_BITS), dtype=np.float64).astype(np.int64)
        top_level = int(beta * (1 << _GRID_BITS))  # floor(beta 2^k)
        np.clip(level, -top_level, top_level, out=level)
        level += 1 << (_GRID_BITS - 1)  # j = p_q 2^k
        q = _binomial_grid(b, level, rng)
    else:  # torch's exact sampler at the unrounded p
        p_scaled = np.multiply(x, beta / bound * (1 << _GRID_BITS), dtype=np.float64)
        p_scaled += 1 << (_GRID_BITS - 1)
        q = _binomial_scaled(b, p_scaled, rng, in_range=True)
    dim = int(x.shape[-1]) if x.ndim else 1
    return q, PBMEvent(b=b, beta=beta, n_parties=n_parties, dim=dim, bound=bound, party=party)


# ---------------------------------------------------------------- the sampler
# PBM draws Binomial(b, p) for every embedding coordinate at every step, so the sampler is on the
# hot path. For b < 128 and p in [1/4, 3/4] (every PBM p, as beta <= 1/4): p on the 2^-k grid
# (pbm_quantize) is one alias-table draw (_binomial_grid); any other p is an exact split of each
# Bernoulli(p) trial at the grid point below it (_binomial_scaled).
_GRID_BITS = 12  # k: p_lo = floor(p 2^k) / 2^k
_J0 = (1 << (_GRID_BITS - 2)) - 1  # table rows j = _J0 .. _J1 cover p in [1/4 - 2^-k, 3/4 + 2^-k)
_J1 = 3 << (_GRID_BITS - 2)
_W = 4.0 / (1 << _GRID_BITS)  # candidate probability: > (p - p_lo) / (1 - p_lo) as p_lo <= 3/4
_COL_BITS = 7  # alias columns: outcomes 0..b need b < 128 (torch's sampler beyond)
_UNIT_BITS = 55  # a column holds 2^55 units: pmfs in units of 2^-62
_SHIFT = 64 - _UNIT_BITS  # table entry = threshold << 9 | alias
_LOW = np.uint64((1 << _SHIFT) - 1)
# by j: 2^64 / (4 - j / 2^(k-2)), so that (s - j) * _SCALE[j] = (t / W) 2^64 (see _binomial_scaled)
_SCALE = 2.0**64 / (4.0 - np.arange(_J1 + 1) / float(1 << (_GRID_BITS - 2)))


def _alias_table(pmf: np.ndarray) -> np.ndarray:
    """Walker alias tables of the rows of ``pmf`` (outcomes 0..n-1, n <= 128), in exact integers.

    Each row is rounded once to integer weights summing to exactly 2^62 (the rounding remainder,
    a few units, goes to the row's mode) over 128 columns of 2^55 units. Robin Hood construction
    in integers, all rows in lockstep: the smallest open column keeps its weight as threshold and
    takes the largest open column as alias, which gives up the rest of the column. Drawing a
    column uniformly (7 bits) and v uniform on [0, 2^55) (55 more bits), the outcome is the
    column if v < threshold, else its alias: P(outcome c) = weight(c) / 2^62 exactly, so the
    only approximation is the 2^-62 rounding of the pmf. One uint64 per column,
    threshold << 9 | alias (a full column stores threshold 2^55 - 1 and itself as alias).
    """
    rows, n = pmf.shape
    cols, unit = 1 << _COL_BITS, 1 << _UNIT_BITS
    total = cols * unit
    w = np.zeros((rows, cols), dtype=np.int64)
    w[:, :n] = np.floor(np.clip(pmf, 0.0, 1.0) * float(total)).astype(np.int64)
    w[np.arange(rows), np.argmax(pmf, axis=1)] += total - w.sum(axis=1)
    r = np.arange(rows)
    q = w.copy()
    thr = np.zeros_like(w)
    alias = np.zeros_like(w)
    open_ = np.ones(w.shape, dtype=bool)
    for _ in range(cols):
        s = np.argmin(np.where(open_, q, np.iinfo(np.int64).max), axis=1)
        open_[r, s] = False
        lg = np.argmax(np.where(open_, q, -1), axis=1)
        qs = q[r, s]
        full = qs >= unit  # then qs == unit: the column never uses its alias
        thr[r, s] = np.where(full, unit - 1, qs)
        alias[r, s] = np.where(full, s, lg)
        q[r, lg] -= np.where(full, 0, unit - qs)
    return ((thr.astype(np.uint64) << np.uint64(_SHIFT)) | alias.astype(np.uint64)).ravel()


def _below(probs: np.ndarray) -> np.ndarray:
    """round(P 2^64) - 1 as uint64, for P in (0, 1]: u > entry, u uniform on 64 bits, then has
    probability 1 - P up to 2^-64 (and is impossible where P = 1)."""
    flat = [
        max(min(int(pr * 2.0**64 + 0.5), 1 << 64) - 1, 0) for pr in np.clip(probs, 0.0, 1.0).ravel()
    ]
    return np.array(flat, dtype=np.uint64).reshape(probs.shape)


@lru_cache(maxsize=16)
def _binomial_tables(b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sampler's tables for ``b``:

    * alias tables of Binomial(b, j / 2^k), row j at offset j * 128 (rows below _J0 are unused
      zeros, never touched), so a draw indexes the table with (j << 7) | column;
    * by K = 0..b, P(N = 0) for N ~ Binomial(b - K, W), as :func:`_below` thresholds;
    * alias tables of N given N >= 1, N ~ Binomial(n, W), n = 0..b (row n = 0 is never used:
      P(N = 0) = 1 there).
    """
    from scipy.stats import binom

    c = np.arange(b + 1)
    levels = np.arange(_J0, _J1 + 1, dtype=np.float64) / (1 << _GRID_BITS)
    grid = np.zeros((_J1 + 1) << _COL_BITS, dtype=np.uint64)
    grid[_J0 << _COL_BITS :] = _alias_table(binom.pmf(c[None, :], b, levels[:, None]))
    pmf = binom.pmf(c[None, :], c[:, None], _W)  # row n: Binomial(n, W)
    no_cand = _below(pmf[::-1, 0])  # indexed by K: n = b - K
    cond = pmf.copy()
    cond[:, 0] = 0.0
    cond[0, 0] = 1.0  # row n = 0 is never used
    cond /= cond.sum(axis=1, keepdims=True)
    return grid, no_cand, _alias_table(cond)


def prepare_binomial(b: int) -> None:
    """Build the sampler's tables for ``b`` now (setup) rather than at the first draw."""
    if b < 1 << _COL_BITS:
        _binomial_tables(int(b))


def _alias_draw(table: np.ndarray, row: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One draw per element from the alias table rows at offsets ``row`` (uint64, multiples of
    128), from 64 uniform bits ``u``: the column is u's top 7 bits, v its low 55 bits, and
    v < threshold compares as (v << 9 | 511) < (threshold << 9 | alias)."""
    col = u >> np.uint64(64 - _COL_BITS)
    entry = table[row | col]
    return np.where(((u << np.uint64(_SHIFT)) | _LOW) < entry, col, entry & _LOW)


def _binomial_grid(b: int, j: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Binomial(b, j / 2^k) draws (int64), b < 128, integer j in [_J0, _J1]: one alias draw each
    (exact up to the 2^-62 rounding of the pmf, see _alias_table)."""
    grid = _binomial_tables(b)[0]
    k = _alias_draw(
        grid,
        j.ravel().view(np.uint64) << np.uint64(_COL_BITS),
        rng.bit_generator.random_raw(j.size),
    )
    return k.view(np.int64).reshape(j.shape)


def _binomial(b: int, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Binomial(b, p) draws (int64) with per-element p, exact, from ``rng``."""
    return _binomial_scaled(b, np.asarray(p, dtype=np.float64) * (1 << _GRID_BITS), rng)


def _binomial_scaled(
    b: int, p_scaled: np.ndarray, rng: np.random.Generator, *, in_range: bool = False
) -> np.ndarray:
    """Binomial(b, p) draws (int64) given p_scaled = p 2^k (float64), exact, from ``rng``.

    Table sampler (b < 128, every p in [1/4, 3/4]): write one Bernoulli(p) trial as "U < p" with
    U uniform on [0, 1) and let p_lo = floor(p 2^k) / 2^k <= p. Then

    * U < p_lo: success. Over the b trials this count is K ~ Binomial(b, p_lo), drawn from a
      precomputed alias table (p_lo takes 2^(k-1) + 2 values);
    * otherwise (b - K trials, U uniform on [p_lo, 1)) the trial succeeds with probability
      t = (p - p_lo) / (1 - p_lo) < 2^-k / (1/4) = W. Split again: it is a candidate with
      probability W, N ~ Binomial(b - K, W) candidates (first whether N = 0, against a table of
      (1 - W)^(b - K); where not, N given N >= 1 from an alias table), and a candidate succeeds
      with probability t / W: R ~ Binomial(N, t / W) (only where N > 0: ~3% of elements).

    Each trial succeeds with probability p_lo + (1 - p_lo) W (t / W) = p, independently, so
    K + R ~ Binomial(b, p) exactly: p itself is used, not rounded, so the mechanism (hence the
    accountant's analysis) is Algorithm 1 unchanged. The tables' only error is the rounding of
    the pmfs to 2^-62 (alias tables) and 2^-64 (see _alias_table, _below), and the float64
    rounding of t / W = (s - j) / (4 - j / 2^(k-2)), s = p 2^k, j = floor(s). ``in_range``: the
    caller guarantees p in [1/4 - 2^-k, 3/4 + 2^-k) (pbm_quantize does), so the range check is
    skipped.

    Otherwise torch's sampler (BTRS, seeded from ``rng``), also exact.
    """
    shape, n = p_scaled.shape, p_scaled.size
    s = p_scaled.ravel()
    if n == 0:
        return np.zeros(shape, dtype=np.int64)
    j = s.astype(np.int64)  # floor(p 2^k), as p >= 0
    if b < 1 << _COL_BITS and (in_range or (j.min() >= _J0 and j.max() <= _J1)):
        grid, no_cand, cond = _binomial_tables(b)
        raw = rng.bit_generator.random_raw(2 * n)
        k = _alias_draw(grid, j.view(np.uint64) << np.uint64(_COL_BITS), raw[:n])
        hit = np.nonzero(raw[n:] > no_cand[k])[0]  # some of the b - K other trials a candidate
        k = k.view(np.int64)
        if hit.size:
            rows = (b - k[hit]).view(np.uint64) << np.uint64(_COL_BITS)
            n_cand = _alias_draw(cond, rows, rng.bit_generator.random_raw(hit.size))
            # R ~ Binomial(N, t / W) as N Bernoulli(t / W) trials on 64-bit uniforms: a candidate
            # succeeds iff u < floor((t / W) 2^64); s - j <= 1 - 2^-42 (exact) and
            # 4 - j / 2^(k-2) >= 1 keep that threshold below 2^64
            jh = j[hit]
            thr = ((s[hit] - jh) * _SCALE[jh]).astype(np.uint64)
            m = int(n_cand.max())
            u = rng.bit_generator.random_raw(hit.size * m).reshape(hit.size, m)
            success = u < thr[:, None]
            if m > 1:  # only the first N of each row's m uniforms are trials
                success &= np.arange(m) < n_cand[:, None]
            k[hit] += np.add.reduce(success, axis=1)
        return k.reshape(shape)
    if getattr(rng, "cryptographic", False):  # keep every bit from the CSPRNG: numpy's BTPE
        return rng.binomial(b, s / (1 << _GRID_BITS)).astype(np.int64).reshape(shape)
    import torch

    gen = torch.Generator().manual_seed(int(rng.integers(0, 2**63 - 1)))
    pt = torch.from_numpy(s / (1 << _GRID_BITS))
    draws = torch.binomial(torch.full_like(pt, float(b)), pt, generator=gen)
    return draws.numpy().astype(np.int64).reshape(shape)


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
