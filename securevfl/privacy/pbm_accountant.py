"""Privacy accounting for PBM-VFL and LDP-VFL on the one accountant interface.

What PBM-VFL releases, per use of a row and embedding coordinate, is the secure sum
q_hat = sum_m q_m of the M data parties' draws q_m ~ Binomial(b, j_m / 2^12), where j_m is the
grid level ``pbm_quantize`` computes from party m's coordinate x_m in [-C, C]. The sampler is
exact (``pbm._binomial_grid``), so its pmf IS this binomial; the levels reachable from clipped
inputs are exactly j in [J-, J+] = 2^11 -+ floor(beta 2^12) (``pbm.grid_levels``), i.e.
p in [lo, hi] = 1/2 -+ beta_q with beta_q = floor(beta 2^12) / 2^12 <= beta.

Dominating pair of one release (derivation). Let N = bM and F_t be the pmf of the sum of N
independent trials of which t are Bernoulli(hi) and N - t Bernoulli(lo):
F_t = Binomial(t, hi) * Binomial(N - t, lo).

1. Any trial Bernoulli(r), r in [lo, hi], is the mixture a Bernoulli(lo) + (1 - a)
   Bernoulli(hi), a = (hi - r) / (hi - lo), with weights that do not depend on the neighbour.
2. A party whose input changes draws its b trials with p under one neighbour and p' under the
   other, p <= p' both in [lo, hi] (else swap the neighbours). Per trial, the pair
   (Bernoulli(p), Bernoulli(p')) = mu (Bernoulli(lo), Bernoulli(hi)) + (1 - mu) (Bernoulli(r),
   Bernoulli(r)) with mu = (p' - p) / (hi - lo) and r = (p - mu lo) / (1 - mu) in [lo, hi]
   (r >= lo iff p >= lo, r <= hi iff p' <= hi), and Bernoulli(r) splits again by 1.
3. Trials are independent, so the pair of output distributions of one release is a mixture,
   with the same weights under both neighbours, of pairs (F_s, F_t): s (t) counts the trials at
   hi under the first (second) neighbour. Party-row unit (one party's row changes): only that
   party's b trials can differ, so |s - t| <= b. Sample unit (every party's row changes): any
   s, t in [0, N].
4. The hockey-stick divergence H_a(P || Q) = sum_o (P(o) - a Q(o))_+ is jointly convex, so the
   release's H_a is at most h(a) = max over the configurations (s, t) of H_a(F_s || F_t), for
   every a >= 0. The configurations are closed under swapping (s, t), so
   h(a) = 1 - a + a h(1/a) for a < 1: h is fixed by its values on a >= 1.
5. On a >= 1 we evaluate h exactly at a_g = e^(g eta), g = 0..G, where G eta = d log(hi / lo)
   (d = b or N) is the largest privacy loss any configuration has (each trial's likelihood ratio
   is at most hi / lo), so h(a_G) = 0. h is convex (a max of convex functions), so it lies below
   its chords: the chord interpolation h' >= h. h' is the hockey-stick curve of an explicit
   symmetric pair (P*, Q*): outcomes at privacy loss +-g eta with
   Q*(loss > g eta) = (h'(a_g) - h'(a_(g+1))) / (a_(g+1) - a_g) (the chord's slope),
   P*(loss > g eta) = h'(a_g) + a_g Q*(loss > g eta), the mirrored outcomes (Q*, P*) swapped,
   and the rest at loss 0 (convexity of h' at a = 1 makes that mass >= 0).
6. So (P*, Q*) dominates every release (H_a(release) <= H_a(P* || Q*) for all a >= 0), and
   dominating pairs compose under adaptive composition (Zhu, Dong & Wang 2022, Thm 10): k
   releases are (epsilon, delta)-DP with the delta(epsilon) of (P*, Q*) composed k times. This
   pair is what we feed the accountant, as a symmetric :class:`PMFPairDpEvent`. The chords cost
   at most eta in privacy loss per release (eta <= 0.018 at b = 64, beta = 1/4; 4.2 in epsilon
   over 240 releases, against epsilon in the thousands). No single configuration dominates the
   others (checked: the one with the others' trials all at lo is worse for some a, the balanced
   one for others), which is why the envelope is needed for the party-row unit.
7. Sample unit: (F_0, F_N) = (Binomial(N, lo), Binomial(N, hi)) dominates every (F_s, F_t)
   exactly, no envelope needed: for s < t, draw the N trials Y_i i.i.d. Bernoulli(lo) or
   Bernoulli(hi) (the pair), replace trials 1..s by fresh Bernoulli(hi) and trials t+1..N by
   fresh Bernoulli(lo), keep the rest, and sum: that gives F_s from lo and F_t from hi, a
   post-processing of the trial vector Y, whose privacy profile is that of its sum (the
   likelihood ratio depends on Y only through sum Y). s > t is the same read backwards
   (o -> N - o). k releases of this pair compose to (Binomial(kN, lo), Binomial(kN, hi)).

Releases per row: an L-infinity bound lets each of the P coordinates move, and coordinates are
independent draws, so one use of a row is P releases. The shared trainer uses every training row
once per epoch (a fresh permutation per epoch), so E epochs are P E releases; private test-time
scoring releases each test row once (P releases), so the worst row is a training row. No
amplification by subsampling: every party knows which rows are in each batch.

LDP-VFL releases each party's embedding plus N(0, sigma^2) per coordinate: L2 sensitivity
2C sqrt(P) per use for one party's row, 2C sqrt(P M) for a sample (all M parties' rows): Gaussian
events on the same accountant (exact composition, Balle-Wang epsilon).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from dp_accounting import dp_event
from scipy.special import logsumexp
from scipy.stats import binom

from securevfl.errors import ConfigError, check_int
from securevfl.privacy.accountant import Accountant, PrivacyLedger
from securevfl.privacy.events import PMFPairDpEvent, gaussian_event
from securevfl.privacy.pbm import _GRID_BITS, check_pbm_params, grid_levels

UNITS = ("party-row", "sample")
GRID_POINTS = 4_000  # G: chord grid of the envelope on a >= 1 (costs <= eta = Lmax / G per release)
_BATCH = 256  # configurations evaluated at once


def binom_logpmf(n: int, p: float) -> np.ndarray:
    """log pmf of Binomial(n, p) on {0, ..., n} (n = 0: the point mass at 0)."""
    return binom.logpmf(np.arange(n + 1), n, p)


def log_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log of the convolution of two pmfs given as log pmfs (exact, no underflow)."""
    n = len(a) + len(b) - 1
    k = np.arange(n)[None, :] - np.arange(len(a))[:, None]
    ok = (k >= 0) & (k < len(b))
    grid = np.where(ok, a[:, None] + b[np.clip(k, 0, len(b) - 1)], -np.inf)
    return logsumexp(grid, axis=0)


def poisson_binomial_logpmf(ps: Sequence[float], b: int) -> np.ndarray:
    """log pmf of sum_m Binomial(b, p_m) (brute-force checks)."""
    out = np.zeros(1)
    for p in ps:
        out = log_convolve(out, binom_logpmf(b, p))
    return out


MAX_TRIALS = 2048  # b x parties the exact accountant analyses in minutes, not hours


def check_accountant_size(b: int, n_parties: int) -> None:
    """Refuse, before any work, a setting whose exact accounting would run for hours.

    The level pmfs are N + 1 convolutions of length up to N = b·parties (cost ~N³) and the
    party-row envelope scans ~N·b configurations of N outcomes each; measured on one core:
    N = 512 about 6 s, N = 1024 about 25 s per (b, β) analysed (calibration analyses several),
    by the N³ growth N = 2048 (the paper's b = 128 at 10 parties needs 1280) takes about 8x
    that, N = 10,000 many hours (K = 10, b = 1000 never finished its level tables)."""
    n = b * n_parties
    if n > MAX_TRIALS:
        raise ConfigError(
            f"b * parties must be <= {MAX_TRIALS} for the exact PBM accountant (its cost grows "
            f"as (b * parties)^3: hours at 10,000), got b = {b} x {n_parties} parties = {n}; "
            "lower --b"
        )


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ConfigError(f"privacy unit must be one of {list(UNITS)}, got {unit!r}")
    return unit


@lru_cache(maxsize=64)
def level_pmfs(b: int, beta: float, n_parties: int) -> tuple[np.ndarray, ...]:
    """F_t, t = 0..bM: log pmf of the secure sum when t of its bM trials are at p = hi and the
    rest at lo, (lo, hi) the extreme grid levels reachable at this beta."""
    j_lo, j_hi = grid_levels(beta)
    lo, hi = j_lo / (1 << _GRID_BITS), j_hi / (1 << _GRID_BITS)
    N = b * n_parties
    return tuple(log_convolve(binom_logpmf(t, hi), binom_logpmf(N - t, lo)) for t in range(N + 1))


def configurations(unit: str, b: int, n_parties: int) -> np.ndarray:
    """The ordered pairs (s, t), s != t, of step 3 (party-row: |s - t| <= b), one of each
    mirror pair (s, t) ~ (N - s, N - t), which have the same hockey-stick curve."""
    N = b * n_parties
    s, t = np.meshgrid(np.arange(N + 1), np.arange(N + 1), indexing="ij")
    keep = (s != t) & (s + t <= N)
    if _check_unit(unit) == "party-row":
        keep &= np.abs(s - t) <= b
    return np.stack([s[keep], t[keep]], axis=1)


def max_loss(unit: str, b: int, beta: float, n_parties: int) -> float:
    """The largest privacy loss of any configuration: d log(hi / lo), d trials can differ."""
    j_lo, j_hi = grid_levels(beta)
    d = b if _check_unit(unit) == "party-row" else b * n_parties
    return d * math.log(j_hi / j_lo)


def envelope_curve(
    unit: str, b: int, beta: float, n_parties: int, points: int = GRID_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """(g eta, h(e^(g eta))), g = 0..G: the max over configurations of the hockey-stick
    divergence at the grid points (step 5); h at the last point is 0."""
    F = np.array(level_pmfs(b, beta, n_parties))
    losses = np.linspace(0.0, max_loss(unit, b, beta, n_parties), points + 1)
    h = np.zeros(points + 1)
    cfg = configurations(unit, b, n_parties)
    for i in range(0, len(cfg), _BATCH):
        s, t = cfg[i : i + _BATCH, 0], cfg[i : i + _BATCH, 1]
        lp, lq = F[s], F[t]
        L = lp - lq
        order = np.argsort(-L, axis=1)  # outcomes by decreasing loss
        L = np.take_along_axis(L, order, axis=1)
        log_a = np.logaddexp.accumulate(np.take_along_axis(lp, order, axis=1), axis=1)
        log_b = np.logaddexp.accumulate(np.take_along_axis(lq, order, axis=1), axis=1)
        # k = #outcomes with loss > x, per row: search the ascending losses, rows offset apart
        n = L.shape[1]
        span = 4.0 * (float(np.max(np.abs(L[np.isfinite(L)]), initial=0.0)) + losses[-1] + 1.0)
        rows = np.arange(len(s))[:, None] * span
        flat = (L[:, ::-1] + rows).ravel()
        below = np.searchsorted(flat, (losses[None, :] + rows).ravel(), side="right")
        k = n - (below.reshape(len(s), -1) - n * np.arange(len(s))[:, None])
        idx = np.maximum(k - 1, 0)
        la = np.take_along_axis(log_a, idx, axis=1)
        lb = np.take_along_axis(log_b, idx, axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            hs = np.exp(la) * -np.expm1(np.minimum(losses[None, :] + lb - la, 0.0))
        hs[k == 0] = 0.0
        h = np.maximum(h, hs.max(axis=0))
    h *= 1.0 + 1e-9  # float64 rounding of the sums above: stay an upper bound
    h[-1] = 0.0
    return losses, h


@lru_cache(maxsize=64)
def dominating_pair(
    unit: str, b: int, beta: float, n_parties: int, points: int = GRID_POINTS
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The symmetric pair (log P*, log Q*) of step 5, which dominates every release."""
    b, beta = check_pbm_params(b, beta)
    check_int("n_parties", n_parties, minimum=1)
    if _check_unit(unit) == "sample":  # step 7: (F_0, F_N) itself dominates
        F = level_pmfs(b, beta, n_parties)
        return tuple(map(float, F[0])), tuple(map(float, F[-1]))
    losses, h = envelope_curve(unit, b, beta, n_parties, points)
    a = np.exp(losses)
    # chord slopes: S_Q[g] = Q*(loss > L_g), S_P[g] = P*(loss > L_g), g = 0..G-1
    s_q = (h[:-1] - h[1:]) / np.diff(a)
    s_q = np.maximum.accumulate(s_q[::-1])[::-1]  # convexity (float noise): non-increasing
    s_p = h[:-1] + a[:-1] * s_q
    q = np.append(-np.diff(s_q), s_q[-1])  # Q* mass at loss L_1..L_G
    with np.errstate(divide="ignore"):
        log_q = np.log(np.maximum(q, 0.0))
    log_p = losses[1:] + log_q  # P* = e^L Q* at each outcome
    zero = max(0.0, 1.0 - s_p[0] - s_q[0])
    lower = np.concatenate([log_q[::-1], [math.log(zero) if zero > 0 else -math.inf], log_p])
    upper = np.concatenate([log_p[::-1], [math.log(zero) if zero > 0 else -math.inf], log_q])
    return tuple(map(float, lower)), tuple(map(float, upper))


def pbm_event(unit: str, *, b: int, beta: float, n_parties: int) -> PMFPairDpEvent:
    """One release (one coordinate's secure sum) of PBM as the sampler runs, in ``unit``."""
    lower, upper = dominating_pair(_check_unit(unit), int(b), float(beta), int(n_parties))
    return PMFPairDpEvent(log_lower=lower, log_upper=upper, symmetric=True)


def pbm_ledger(
    *,
    b: int,
    beta: float,
    n_parties: int,
    dim: int,
    uses: int,
    parties: Sequence[int],
    kind: str = "pld",
    extra_events: Sequence[dp_event.DpEvent] = (),
) -> PrivacyLedger:
    """Party-row ledger: ``uses`` uses of a row of each data party, ``dim`` coordinates each.
    Every party's releases are the same events (the dominating pair is the same for all), so
    one accountant, composed once, is that of every party (and answers each δ once).
    ``extra_events``: each party's other releases of a row (the DP bottom's gradient releases),
    composed at the same RDP orders."""
    dim = check_int("dim", dim, minimum=1)
    uses = check_int("uses", uses, minimum=0)
    ledger = PrivacyLedger("party-row", kind=kind)
    acc = Accountant(kind).compose(
        pbm_event("party-row", b=b, beta=beta, n_parties=n_parties), dim * uses
    )
    for ev in extra_events:
        acc.compose(ev)
    for k in parties:
        ledger.parties[int(k)] = acc
    return ledger


def pbm_epsilon(
    unit: str,
    *,
    b: int,
    beta: float,
    n_parties: int,
    dim: int,
    uses: int,
    delta: float,
    kind: str = "pld",
    extra_events: Sequence[dp_event.DpEvent] = (),
) -> float:
    """epsilon(delta) of ``uses`` uses of a row (one accountant: every party's is the same),
    with ``extra_events`` (the row's other releases) composed in."""
    acc = Accountant(kind).compose(pbm_event(unit, b=b, beta=beta, n_parties=n_parties), dim * uses)
    for ev in extra_events:
        acc.compose(ev)
    return acc.get_epsilon(delta)


def ldp_event(
    unit: str, *, sigma: float, n_parties: int, dim: int, uses: int, bound: float = 1.0
) -> dp_event.DpEvent:
    """LDP-VFL: ``uses`` releases of a row's embedding(s) plus N(0, sigma^2 I)."""
    mult = n_parties if _check_unit(unit) == "sample" else 1
    return gaussian_event(
        sigma=sigma, sensitivity=2.0 * bound * math.sqrt(dim * mult), count=int(uses)
    )


def hockey_stick(log_p: np.ndarray, log_q: np.ndarray, epsilon: float) -> float:
    """delta(epsilon) = sum_o max(0, P(o) - e^epsilon Q(o)) of one release."""
    return float(np.sum(np.maximum(0.0, np.exp(log_p) - np.exp(epsilon + log_q))))


def renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_alpha(P || Q) = log(sum P^alpha Q^(1-alpha)) / (alpha - 1), in log space."""
    lp, lq = np.asarray(log_p, dtype=float), np.asarray(log_q, dtype=float)
    live = lp > -np.inf  # outcomes P cannot produce add nothing
    return float(logsumexp(alpha * lp[live] + (1.0 - alpha) * lq[live]) / (alpha - 1.0))
