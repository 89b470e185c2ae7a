"""PBM mechanism and its exact accountant: unbiasedness, brute force, the paper's scaling."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from securevfl.errors import ConfigError
from securevfl.privacy.accountant import Accountant
from securevfl.privacy.pbm import (
    ldp_sigma,
    pbm_estimate_sum,
    pbm_quantize,
    pbm_sum_variance_bound,
)
from securevfl.privacy.pbm_accountant import (
    configurations,
    dominating_pair,
    hockey_stick,
    ldp_event,
    level_pmfs,
    pbm_epsilon,
    pbm_event,
    poisson_binomial_logpmf,
    renyi_divergence,
)

# ---------------------------------------------------------------- mechanism and estimator
GRID = 1 << 12  # pbm_quantize rounds p toward 1/2 onto multiples of 1/GRID


def _p_grid(x: np.ndarray, beta: float, bound: float = 1.0) -> np.ndarray:
    """The p pbm_quantize draws with: 1/2 + trunc(beta x / C * GRID) / GRID, |.| <= beta."""
    level = np.trunc(np.asarray(x, dtype=np.float64) * (beta / bound * GRID))
    top = math.floor(beta * GRID)
    return 0.5 + np.clip(level, -top, top) / GRID


def test_p_is_rounded_toward_one_half_inside_the_privacy_range(monkeypatch) -> None:
    from securevfl.privacy import pbm as pbm_mod

    rng = np.random.default_rng(4)
    seen: list[np.ndarray] = []
    monkeypatch.setattr(
        pbm_mod, "_binomial_grid", lambda b, j, rng: seen.append(j.copy()) or np.zeros_like(j)
    )
    for beta in (0.25, 0.2, 0.1, 0.013):
        x = np.concatenate([rng.uniform(-1, 1, 10_000), [-1.0, 1.0, 0.0, 1 + 1e-7, -1 - 1e-7]])
        p, pq = 0.5 + beta * np.clip(x, -1, 1), _p_grid(x, beta)
        assert np.all(np.abs(pq - 0.5) <= np.abs(p - 0.5) + 1e-15)  # toward 1/2 ...
        assert np.all(np.abs(pq - 0.5) <= beta) and np.all(np.abs(p - pq) < 1 / GRID)  # < 2^-12
        seen.clear()  # and it is what pbm_quantize draws with
        pbm_quantize(x.reshape(-1, 5), b=8, beta=beta, rng=rng)
        assert np.array_equal(seen[0].ravel(), np.rint(pq * GRID).astype(np.int64))
    assert _p_grid(np.array([-1.0, 1.0]), 0.25).tolist() == [0.25, 0.75]  # extremes kept exactly


def test_quantize_range_and_unbiased_sum() -> None:
    rng = np.random.default_rng(0)
    M, b, beta, n = 4, 16, 0.2, 200_000
    x = np.array([0.9, -0.3, 0.5, -1.0])
    q = np.stack([pbm_quantize(np.full(n, xm), b=b, beta=beta, rng=rng)[0] for xm in x])
    assert q.min() >= 0 and q.max() <= b and q.dtype == np.int64
    est = pbm_estimate_sum(q.sum(axis=0), b=b, beta=beta, n_parties=M)
    var = pbm_sum_variance_bound(b=b, beta=beta, n_parties=M)
    # unbiased for the sum of the grid-rounded inputs, within M C 2^-12 / beta of the true sum
    x_grid = (_p_grid(x, beta) - 0.5) / beta
    assert abs(x_grid.sum() - x.sum()) < M / (GRID * beta)
    assert abs(est.mean() - x_grid.sum()) < 5 * math.sqrt(var / n)
    # exact variance C^2/(beta b)^2 * sum b p(1-p) <= the Theorem 2.3 bound
    p = _p_grid(x, beta)
    exact = np.sum(b * p * (1 - p)) / (beta * b) ** 2
    assert est.var() == pytest.approx(exact, rel=0.02)
    assert exact <= var


def test_variance_bound_is_attained_at_zero() -> None:
    rng = np.random.default_rng(1)
    q = sum(pbm_quantize(np.zeros(100_000), b=8, beta=0.1, rng=rng)[0] for _ in range(3))
    est = pbm_estimate_sum(q, b=8, beta=0.1, n_parties=3)
    assert est.var() == pytest.approx(pbm_sum_variance_bound(b=8, beta=0.1, n_parties=3), rel=0.03)


def test_bad_parameters_raise_naming_them() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="beta must be in"):
        pbm_quantize(np.zeros(3), b=4, beta=0.3, rng=rng)
    with pytest.raises(ConfigError, match="b must be >= 1"):
        pbm_quantize(np.zeros(3), b=0, beta=0.1, rng=rng)
    with pytest.raises(ConfigError, match=r"\[-1.0, 1.0\]"):
        pbm_quantize(np.array([1.5]), b=4, beta=0.1, rng=rng)


def test_ldp_sigma_formula() -> None:
    assert ldp_sigma(b=64, beta=0.25, n_parties=5) == pytest.approx(math.sqrt(2 * 5 / (64 / 16)))


# ---------------------------------------------------------------- the sampler's own pmf
class _Words:
    """A stand-in bit generator: random_raw(n) returns the next planned words of n elements."""

    def __init__(self, planes: list[np.ndarray]) -> None:
        self.planes = list(planes)

    def random_raw(self, n: int) -> np.ndarray:
        w = self.planes.pop(0)
        assert w.size == n
        return w


def test_sampler_enumerated_over_every_random_word_at_b_1() -> None:
    """b = 1: element i of 2^12 sees bit l of i in bit plane l, so the elements run through
    every outcome of the sampler's 12 random bits once: P(q = 1) must be j / 2^12 exactly."""
    from types import SimpleNamespace

    from securevfl.privacy.pbm import _binomial_grid

    paths = np.arange(GRID, dtype=np.uint64)
    for j in (1, 1024, 2047, 2048, 2049, 3072, 4095):
        planes = [(paths >> np.uint64(lv)) & np.uint64(1) for lv in range(12)]
        planes += [np.full(GRID, 0xFFFF, dtype=np.uint64)] * 12  # noise in unused bits
        for lv in range(12):
            planes[lv] = planes[lv] | (np.uint64(0xFFF0) & (paths << np.uint64(4)))
        rng = SimpleNamespace(bit_generator=_Words(planes))
        q = _binomial_grid(1, np.full(GRID, j), rng)
        assert q.sum() == j, j  # exactly j of the 2^12 equally likely paths succeed


def _sampler_pmf_by_planes(b: int, j: int) -> list[int]:
    """The exact pmf of _binomial_grid's algorithm, times 2^(64 * 12 * chunks), by dynamic
    programming over its bit planes: per plane the popcount of rem fresh bits is
    Binomial(rem, 1/2); successes where j's bit is 1 and the trial's is 0."""
    total = [1]
    for first in range(0, b, 64):
        m = min(64, b - first)
        states = {(m, 0): 1}  # (ties left, successes) -> weight in units of 2^-(64 * planes)
        for lv in range(11, -1, -1):
            bit = (j >> lv) & 1
            nxt: dict[tuple[int, int], int] = {}
            for (rem, succ), w in states.items():
                for d in range(rem + 1):  # d of the rem tied trials have bit 1 here
                    key = (d, succ + rem - d) if bit else (rem - d, succ)
                    nxt[key] = nxt.get(key, 0) + w * math.comb(rem, d) * (1 << (64 - rem))
            states = nxt
        chunk = [0] * (m + 1)
        for (_, succ), w in states.items():
            chunk[succ] += w
        total = [
            sum(total[i] * chunk[c - i] for i in range(len(total)) if 0 <= c - i <= m)
            for c in range(len(total) + m)
        ]
    return total


@pytest.mark.parametrize("b,j", [(3, 1024), (64, 3072), (64, 2049), (65, 1500), (130, 3000)])
def test_sampler_pmf_is_exactly_the_binomial_the_accountant_uses(b: int, j: int) -> None:
    pmf = _sampler_pmf_by_planes(b, j)
    chunks = -(-b // 64)
    scale = 1 << (64 * 12 * chunks)  # the DP's unit
    for c in range(b + 1):
        # C(b, c) j^c (2^12 - j)^(b - c) / 2^(12 b), exactly, in the DP's unit
        exact = math.comb(b, c) * j**c * (GRID - j) ** (b - c) * (scale >> (12 * b))
        assert pmf[c] == exact, (b, j, c)
        assert pmf[c] > 0  # full support: no outcome is impossible at any level 0 < j < 2^12


@pytest.mark.parametrize("b", [1, 16, 64, 200])  # one chunk of 64 trials, then several
def test_quantizer_draws_follow_the_binomial_pmf(b: int) -> None:
    from scipy.stats import binom, chisquare

    rng = np.random.default_rng(3)
    for xv in (0.6, 1.0, -1.0, 0.0, 0.3337):
        x = np.full(100_000, xv)
        q, _ = pbm_quantize(x, b=b, beta=0.25, rng=rng)
        assert q.dtype == np.int64 and q.shape == x.shape and q.min() >= 0 and q.max() <= b
        p = float(_p_grid(xv, 0.25))  # every b: the grid-rounded p, drawn exactly
        obs = np.bincount(q, minlength=b + 1)
        exp = binom.pmf(np.arange(b + 1), b, p) * len(q)
        keep = exp > 5
        stat = chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum())
        assert stat.pvalue > 1e-4, (b, xv)
    x = np.full(100_000, 0.6)
    q, _ = pbm_quantize(x, b=b, beta=0.25, rng=np.random.default_rng(3))
    again, _ = pbm_quantize(x, b=b, beta=0.25, rng=np.random.default_rng(3))
    assert np.array_equal(q, again)  # the explicit rng makes it reproducible


# ---------------------------------------------------------------- the dominating pair
def _curve(lp: np.ndarray, lq: np.ndarray, log_a: np.ndarray) -> np.ndarray:
    """H_a(P || Q) = sum_o (P(o) - a Q(o))_+ at each log a (numpy, direct)."""
    P, Q = np.exp(lp), np.exp(lq)
    return np.maximum(0.0, P[None, :] - np.exp(log_a)[:, None] * Q[None, :]).sum(axis=1)


def _breaks(lp: np.ndarray, lq: np.ndarray) -> np.ndarray:
    lp, lq = np.asarray(lp), np.asarray(lq)
    live = lp > -np.inf
    L = lp[live] - lq[live]
    return np.concatenate([[0.0], L[(L > 0) & np.isfinite(L)]])


class _Dominates:
    """H_a(P* || Q*) >= H_a(P || Q) and >= H_a(Q || P) for every a >= 1: both curves are
    piecewise linear in a, so checking at the union of their breakpoints is exact. The pair's
    own curve at its own breakpoints is computed once and reused for every (P, Q) checked."""

    def __init__(self, pair: tuple) -> None:
        self.sp, self.sq = np.asarray(pair[0]), np.asarray(pair[1])
        self.la = _breaks(self.sp, self.sq)
        self.h = _curve(self.sp, self.sq, self.la)

    def __call__(self, lp: np.ndarray, lq: np.ndarray) -> None:
        for x, y in ((lp, lq), (lq, lp)):
            assert np.all(self.h >= _curve(x, y, self.la) * (1 - 1e-9) - 1e-15)
            la = _breaks(x, y)
            assert np.all(_curve(self.sp, self.sq, la) >= _curve(x, y, la) * (1 - 1e-9) - 1e-15)


@pytest.mark.parametrize("unit", ["party-row", "sample"])
def test_dominating_pair_covers_every_reachable_input(unit: str) -> None:
    """Brute force over actual grid levels (not the configurations of the derivation): every
    pair of neighbouring inputs' secure-sum pmfs is dominated by the event's pair."""
    for b, M, levels, beta in [
        (2, 2, range(2045, 2052), 3 / GRID),
        (2, 3, (1024, 1700, 2048, 2500, 3072), 0.25),
        (3, 2, (1024, 1100, 2048, 3000, 3072), 0.25),
    ]:
        assert min(levels) == 2048 - int(beta * GRID) and max(levels) == 2048 + int(beta * GRID)
        dominates = _Dominates(dominating_pair(unit, b, beta, M, points=300))
        lg = functools.cache(lambda js, b=b: poisson_binomial_logpmf([j / GRID for j in js], b))
        for js in itertools.product(levels, repeat=M):
            if unit == "party-row":
                for j2 in levels:
                    if j2 != js[0]:
                        dominates(lg(js), lg((j2, *js[1:])))
            else:
                for js2 in itertools.product(levels, repeat=M):
                    if js2 != js:
                        dominates(lg(js), lg(js2))


@pytest.mark.parametrize("b,M", [(8, 2), (4, 3)])
def test_envelope_dominates_every_configuration_exactly(b: int, M: int) -> None:
    F = level_pmfs(b, 0.25, M)
    pair = dominating_pair("party-row", b, 0.25, M, points=400)
    dominates = _Dominates(pair)
    for s, t in configurations("party-row", b, M):
        dominates(F[s], F[t])
    samp = _Dominates(dominating_pair("sample", b, 0.25, M))
    for s, t in configurations("sample", b, M):
        samp(F[s], F[t])
    # no single configuration dominates the others: the envelope is needed
    la = np.linspace(0.0, 8.0, 200)
    curves = np.array([_curve(F[s], F[t], la) for s, t in configurations("party-row", b, M)])
    assert not np.any(np.all(curves >= curves.max(axis=0) - 1e-12, axis=1))


def _composed_delta_upper(lp: np.ndarray, lq: np.ndarray, k: int, eps: float, step: float) -> float:
    """An upper bound on delta(eps) of k releases of the pair (P, Q), computed with numpy alone:
    privacy losses rounded UP to multiples of ``step`` (which can only raise delta), the loss
    distribution under P composed by FFT (the support is small enough to take whole)."""
    L = np.asarray(lp) - np.asarray(lq)
    idx = np.ceil(L / step - 1e-9).astype(np.int64)
    lo = int(idx.min())
    w = np.zeros(int(idx.max()) - lo + 1)
    np.add.at(w, idx - lo, np.exp(lp))
    n = 1 << int(math.ceil(math.log2(k * (len(w) - 1) + 1)))
    comp = np.fft.irfft(np.fft.rfft(w, n) ** k, n)[: k * (len(w) - 1) + 1]
    comp = np.maximum(comp, 0.0)
    loss = (k * lo + np.arange(len(comp))) * step
    above = loss > eps
    return float(np.sum(comp[above] * -np.expm1(eps - loss[above])) + 1e-12)


SETTINGS = {
    # default suite: breast, M = 2, b = 64, P = 8, 30 epochs, beta = 1/4 (the default option)
    "default": dict(b=64, beta=0.25, n_parties=2, dim=8, uses=30),
    # the paper's setting as run by pbm-acceptance: M = 5, P = 16, b = 64, beta = 1/4, 10 epochs
    "paper": dict(b=64, beta=0.25, n_parties=5, dim=16, uses=10),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, unit", [("default", "sample"), ("default", "party-row"), ("paper", "party-row")]
)
def test_claimed_epsilon_holds_for_the_composed_sampler_pmfs(name: str, unit: str) -> None:
    """delta(eps_claimed) of the sampler's exact pmfs, composed over a run, computed
    independently (numpy, no accountant): sample unit exactly (k releases of Binomial(N, p) are
    Binomial(kN, p)); party-row for the configurations of the others' trials that bound the
    envelope (all at lo, balanced, and a changed party that moves only part way). One unit a
    test: each asks the accountant for a run's epsilon (13-40 s of PLD composition). The sample
    unit runs once: its pair is two binomials whatever M is (the paper's M = 5 only makes N
    larger, at 40 CPU-s), while party-row's envelope depends on M, so both settings run."""
    from scipy.stats import binom

    st = SETTINGS[name]
    b, M, k, delta = st["b"], st["n_parties"], st["dim"] * st["uses"], 1e-5
    N = b * M
    eps = pbm_epsilon(unit, delta=delta, **st)
    if unit == "sample":
        lo, hi = 0.25, 0.75  # the extreme grid levels at beta = 1/4 (1024 and 3072)
        o = np.arange(k * N + 1)
        lp, lq = binom.logpmf(o, k * N, hi), binom.logpmf(o, k * N, lo)
        d = float(np.sum(np.exp(lp) * -np.expm1(np.minimum(eps - (lp - lq), 0.0))))
        assert d <= delta
        return
    F = level_pmfs(b, 0.25, M)
    half = (M - 1) * b // 2
    for s, t in [(0, b), (half, half + b), (0, b // 2), (N - b, N)]:
        assert _composed_delta_upper(F[s], F[t], k, eps, 5e-3) <= delta, (s, t)
    # and the headline is not loose: it sits within 1% of the worst homogeneous composition
    worst = max(
        _composed_delta_upper(F[s], F[t], k, eps * 0.99, 5e-3)
        for s, t in [(0, b), (half, half + b)]
    )
    assert worst > delta


def test_sample_pair_is_the_two_binomials_and_events_compose() -> None:
    lo, up = dominating_pair("sample", 3, 0.2, 2)
    j_lo, j_hi = 2048 - int(0.2 * GRID), 2048 + int(0.2 * GRID)
    assert np.allclose(np.exp(lo), np.exp(poisson_binomial_logpmf([j_lo / GRID] * 2, 3)))
    assert np.allclose(np.exp(up), np.exp(poisson_binomial_logpmf([j_hi / GRID] * 2, 3)))
    ev = pbm_event("sample", b=3, beta=0.2, n_parties=2)
    assert ev.symmetric
    a = Accountant().compose(ev, 6)
    assert a.releases == 6
    assert pbm_epsilon("sample", b=3, beta=0.2, n_parties=2, dim=2, uses=3, delta=1e-5) == (
        a.get_epsilon(1e-5)
    )
    assert Accountant("rdp").compose(ev, 6).get_epsilon(1e-5) >= a.get_epsilon(1e-5)
    with pytest.raises(ConfigError, match="privacy unit"):
        pbm_event("feature", b=3, beta=0.2, n_parties=2)


def test_accountant_uses_the_rounded_beta() -> None:
    """beta = 0.1 reaches floor(0.1 * 2^12) = 409 grid steps only: the same epsilon as
    beta = 409 / 2^12, less than a beta a grid step above."""
    kw = dict(n_parties=2, dim=2, uses=1, delta=1e-5, b=8)
    assert pbm_epsilon("party-row", beta=0.1, **kw) == pbm_epsilon(
        "party-row", beta=409 / GRID, **kw
    )
    assert pbm_epsilon("party-row", beta=0.1, **kw) < pbm_epsilon(
        "party-row", beta=410 / GRID, **kw
    )


def test_renyi_and_hockey_stick_against_direct_sums() -> None:
    F = level_pmfs(3, 0.2, 2)
    p, q = F[0], F[-1]
    P, Q = np.exp(p), np.exp(q)
    a = 2.5
    direct = math.log(np.sum(P**a * Q ** (1 - a))) / (a - 1)
    assert renyi_divergence(p, q, a) == pytest.approx(direct)
    assert hockey_stick(p, q, 0.4) == pytest.approx(np.sum(np.maximum(0, P - math.exp(0.4) * Q)))


def test_sample_privacy_against_remark_6_3() -> None:
    """Remark 6.3 of the paper: the sample loss is at least M times the feature loss (Renyi)."""
    b, M = 16, 2
    for a in (2.0, 3.0, 5.0):
        feat = max(renyi_divergence(*dominating_pair("party-row", b, 0.1, M, points=400), a), 0)
        samp = renyi_divergence(*dominating_pair("sample", b, 0.1, M), a)
        assert samp >= M * feat * 0.99


# ---------------------------------------------------------------- LDP baseline's events
def test_ldp_events_are_gaussian_with_row_and_sample_sensitivity() -> None:
    ev = ldp_event("sample", sigma=2.0, n_parties=4, dim=9, uses=1)
    assert ev.noise_multiplier == pytest.approx(2.0 / (2 * math.sqrt(36)))
    row = Accountant().compose(ldp_event("party-row", sigma=2.0, n_parties=4, dim=9, uses=5))
    assert row.gaussian_mu == pytest.approx(2 * math.sqrt(9 * 5) / 2.0)
    big = Accountant().compose(ldp_event("party-row", sigma=0.05, n_parties=4, dim=9, uses=5))
    assert math.isfinite(big.get_epsilon(1e-5)) and big.get_epsilon(1e-5) > 1000


def test_quantizer_rejects_nan() -> None:
    with pytest.raises(ConfigError, match=r"\[-1.0, 1.0\]"):
        pbm_quantize(np.array([0.1, np.nan]), b=4, beta=0.1, rng=np.random.default_rng(0))


@pytest.mark.parametrize("unit", ["party-row", "sample"])
@pytest.mark.parametrize("b", [1, 3, 8])
def test_a_single_sender_is_dominated_by_its_own_binomial_pair(unit: str, b: int) -> None:
    """K = 2 with the label holder's columns kept at home: one partner sends, so the secure sum
    is that party's own b trials (n_parties=1, N = b). Brute force over every pair of reachable
    grid levels: the event's pair dominates Binomial(b, p) against Binomial(b, p'), and its
    epsilon is no smaller than that of the extreme pair (Binomial(b, lo), Binomial(b, hi))."""
    beta = 0.25
    top = int(beta * GRID)
    levels = (2048 - top, 2048 - top // 3, 2048, 2048 + 7, 2048 + top)
    pair = dominating_pair(unit, b, beta, 1, points=300)
    dominates = _Dominates(pair)
    lg = functools.cache(lambda j: poisson_binomial_logpmf([j / GRID], b))
    for j, j2 in itertools.product(levels, repeat=2):
        if j != j2:
            dominates(lg(j), lg(j2))
    lo, hi = lg(levels[0]), lg(levels[-1])
    la = np.linspace(0.0, b * math.log((0.5 + beta) / (0.5 - beta)) + 0.1, 120)
    assert np.all(_curve(*pair, la) >= _curve(hi, lo, la) - 1e-12)
