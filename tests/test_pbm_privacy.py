"""PBM mechanism and its exact accountant: unbiasedness, brute force, the paper's scaling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from securevfl.errors import ConfigError
from securevfl.privacy.pbm import (
    PBMEvent,
    ldp_sigma,
    pbm_estimate_sum,
    pbm_quantize,
    pbm_sum_variance_bound,
)
from securevfl.privacy.pbm_accountant import (
    PBMAccountant,
    gaussian_epsilon,
    hockey_stick,
    ldp_privacy,
    neighbour_pairs,
    pbm_privacy,
    poisson_binomial_logpmf,
    rdp_per_release,
    renyi_divergence,
)

# ---------------------------------------------------------------- mechanism and estimator
GRID = 1 << 12  # pbm_quantize rounds p toward 1/2 onto multiples of 1/GRID (b < 128)


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


# ---------------------------------------------------------------- brute force on a tiny case
def _brute_sum_pmf(xs: list[float], b: int, beta: float) -> np.ndarray:
    """pmf of sum_m q_m by enumerating every joint outcome (q_1, ..., q_M)."""
    out = np.zeros(b * len(xs) + 1)
    for qs in itertools.product(range(b + 1), repeat=len(xs)):
        pr = 1.0
        for q, x in zip(qs, xs, strict=True):
            p = 0.5 + beta * x
            pr *= math.comb(b, q) * p**q * (1 - p) ** (b - q)
        out[sum(qs)] += pr
    return out


def test_sum_pmf_matches_enumeration() -> None:
    pmf = _brute_sum_pmf([0.3, -0.7, 1.0], 3, 0.2)
    got = np.exp(poisson_binomial_logpmf([0.5 + 0.2 * x for x in (0.3, -0.7, 1.0)], 3))
    assert np.allclose(got, pmf, atol=1e-14)
    up, down = neighbour_pairs("feature", 2, 0.25, 2)[1]  # the other party at +1
    assert np.allclose(np.exp(up), _brute_sum_pmf([1.0, 1.0], 2, 0.25))
    assert np.allclose(np.exp(down), _brute_sum_pmf([-1.0, 1.0], 2, 0.25))


def test_feature_epsilon_matches_brute_force_over_all_inputs() -> None:
    """M=2, b=2, beta=1/4, two coordinates: the worst delta(eps) over every pair of adjacent
    inputs on a grid (each coordinate its own configuration) agrees with the accountant."""
    b, beta, grid = 2, 0.25, np.linspace(-1, 1, 5)
    singles = []  # (P, Q) for one coordinate: party 0 moves x -> x', party 1 sits at z
    for x, x2, z in itertools.product(grid, grid, grid):
        if x != x2:
            singles.append((_brute_sum_pmf([x, z], b, beta), _brute_sum_pmf([x2, z], b, beta)))
    eps0 = 1.5
    worst = 0.0
    for (p1, q1), (p2, q2) in itertools.product(singles, repeat=2):
        P, Q = np.outer(p1, p2).ravel(), np.outer(q1, q2).ravel()
        worst = max(worst, float(np.sum(np.maximum(0.0, P - math.exp(eps0) * Q))))
    res = pbm_privacy("feature", b=b, beta=beta, n_parties=2, dim=2, uses=1, delta=worst)
    assert eps0 - 1e-6 <= res.epsilon <= eps0 + 0.02  # pessimistic PLD rounding only adds


def test_extremes_are_worst_for_rdp_on_a_grid() -> None:
    b, beta, M = 3, 0.2, 3
    grid = np.linspace(-1, 1, 5)
    alpha = 3.0
    worst = 0.0
    for x, x2, z1, z2 in itertools.product(grid, grid, grid, grid):
        if x != x2:
            p = np.log(_brute_sum_pmf([x, z1, z2], b, beta))
            q = np.log(_brute_sum_pmf([x2, z1, z2], b, beta))
            worst = max(worst, renyi_divergence(p, q, alpha))
    got = rdp_per_release("feature", b=b, beta=beta, n_parties=M, orders=(alpha,))[0]
    assert got == pytest.approx(worst, rel=1e-9)


def test_renyi_and_hockey_stick_against_direct_sums() -> None:
    p, q = neighbour_pairs("sample", 3, 0.2, 2)[0]
    P, Q = np.exp(p), np.exp(q)
    a = 2.5
    direct = math.log(np.sum(P**a * Q ** (1 - a))) / (a - 1)
    assert renyi_divergence(p, q, a) == pytest.approx(direct)
    assert hockey_stick(p, q, 0.4) == pytest.approx(np.sum(np.maximum(0, P - math.exp(0.4) * Q)))


def test_pld_agrees_with_dp_accounting_composition_of_same_pmfs() -> None:
    """Independent route: compose via dp_accounting directly and via brute force delta."""
    p, q = neighbour_pairs("sample", 2, 0.15, 2)[0]
    res = pbm_privacy("sample", b=2, beta=0.15, n_parties=2, dim=3, uses=1, delta=1e-3)
    P, Q = np.exp(p), np.exp(q)
    P3 = np.einsum("i,j,k->ijk", P, P, P).ravel()
    Q3 = np.einsum("i,j,k->ijk", Q, Q, Q).ravel()
    d = float(np.sum(np.maximum(0, P3 - math.exp(res.epsilon) * Q3)))
    assert d <= 1e-3 * (1 + 1e-6)
    d_below = float(np.sum(np.maximum(0, P3 - math.exp(res.epsilon - 0.02) * Q3)))
    assert d_below > 1e-3
    pld = pld_lib.from_two_probability_mass_functions(
        dict(enumerate(q)), dict(enumerate(p)), value_discretization_interval=1e-4
    ).self_compose(3)
    assert res.epsilon == pytest.approx(pld.get_epsilon_for_delta(1e-3), abs=0.02)


# ---------------------------------------------------------------- scaling (Theorems 6.1 / 6.2)
def test_feature_rdp_scales_with_b_beta_squared_over_m() -> None:
    r = lambda b, beta, M: rdp_per_release("feature", b=b, beta=beta, n_parties=M, orders=(2.0,))[0]  # noqa: E731
    base = r(64, 0.05, 4)
    assert r(16, 0.1, 4) == pytest.approx(base, rel=0.1)  # same b*beta^2
    assert r(128, 0.05, 4) / base == pytest.approx(2.0, rel=0.1)  # linear in b
    assert r(64, 0.05 * math.sqrt(2), 4) / base == pytest.approx(2.0, rel=0.1)  # in beta^2
    assert base / r(64, 0.05, 8) == pytest.approx(2.0, rel=0.15)  # 1/M


def test_composition_is_linear_in_uses_and_dim() -> None:
    one = pbm_privacy("feature", b=8, beta=0.1, n_parties=3, dim=1, uses=1, delta=1e-5)
    many = pbm_privacy("feature", b=8, beta=0.1, n_parties=3, dim=4, uses=5, delta=1e-5)
    assert many.compositions == 20
    for a, v in one.rdp_curve.items():
        assert many.rdp_curve[a] == pytest.approx(20 * v, rel=1e-12)
    assert many.epsilon > one.epsilon
    assert many.epsilon <= many.rdp_epsilon + 1e-9  # PLD is the tighter of the two


def test_sample_privacy_against_remark_6_3_and_mironov_corollary_4() -> None:
    b, beta, M = 16, 0.1, 2
    feat = rdp_per_release("feature", b=b, beta=beta, n_parties=M, orders=(2.0, 3.0, 4.0, 5.0, 7.0))
    samp = rdp_per_release("sample", b=b, beta=beta, n_parties=M, orders=(2.0, 3.0, 4.0, 5.0, 7.0))
    assert np.all(samp >= M * feat)  # Remark 6.3: sample loss at least M times feature loss
    # the step of Theorem 6.2's proof with exact distributions: P=(+,+), Q=(-,-), R=(-,+)
    P = poisson_binomial_logpmf([0.5 + beta] * 2, b)
    Q = poisson_binomial_logpmf([0.5 - beta] * 2, b)
    R = poisson_binomial_logpmf([0.5 - beta, 0.5 + beta], b)
    for a in (2.0, 3.0, 5.0):
        lhs = renyi_divergence(P, Q, a)
        rhs = (a - 0.5) / (a - 1) * renyi_divergence(P, R, 2 * a) + renyi_divergence(
            R, Q, 2 * a - 1
        )
        assert lhs <= rhs


def test_accountant_consumes_events() -> None:
    acc = PBMAccountant()
    for _ in range(3):
        acc.compose(PBMEvent(b=8, beta=0.1, n_parties=3, dim=4, count=1))
    direct = pbm_privacy("sample", b=8, beta=0.1, n_parties=3, dim=4, uses=3, delta=1e-5)
    assert acc.get_privacy("sample", 1e-5).epsilon == direct.epsilon
    with pytest.raises(ConfigError, match="share"):
        acc.compose(PBMEvent(b=16, beta=0.1, n_parties=3, dim=4))
    with pytest.raises(ConfigError, match="notion"):
        pbm_privacy("column", b=8, beta=0.1, n_parties=3, dim=4, uses=3, delta=1e-5)


# ---------------------------------------------------------------- LDP baseline's accountant
def test_gaussian_epsilon_against_dp_accounting() -> None:
    for mu in (0.5, 2.0, 8.0):
        pld = pld_lib.from_gaussian_mechanism(1.0 / mu, value_discretization_interval=1e-3)
        ref = pld.get_epsilon_for_delta(1e-5)
        assert gaussian_epsilon(mu, 1e-5) == pytest.approx(ref, abs=5e-3)
    r = ldp_privacy("sample", sigma=2.0, n_parties=4, dim=9, uses=1, delta=1e-5)
    assert r["mu"] == pytest.approx(2 * math.sqrt(36) / 2.0)
    assert gaussian_epsilon(60.0, 1e-5) > 1000  # large budgets stay finite, no overflow


@pytest.mark.parametrize("b", [1, 16, 64, 200])  # table sampler (b < 128), then torch's
def test_quantizer_draws_follow_the_binomial_pmf(b: int) -> None:
    from scipy.stats import binom, chisquare

    rng = np.random.default_rng(3)
    for xv in (0.6, 1.0, -1.0, 0.0, 0.3337):
        x = np.full(100_000, xv)
        q, _ = pbm_quantize(x, b=b, beta=0.25, rng=rng)
        assert q.dtype == np.int64 and q.shape == x.shape and q.min() >= 0 and q.max() <= b
        p = float(_p_grid(xv, 0.25)) if b < 128 else 0.5 + 0.25 * xv  # torch: p unrounded
        obs = np.bincount(q, minlength=b + 1)
        exp = binom.pmf(np.arange(b + 1), b, p) * len(q)
        keep = exp > 5
        stat = chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum())
        assert stat.pvalue > 1e-4, (b, xv)
    x = np.full(100_000, 0.6)
    q, _ = pbm_quantize(x, b=b, beta=0.25, rng=np.random.default_rng(3))
    again, _ = pbm_quantize(x, b=b, beta=0.25, rng=np.random.default_rng(3))
    assert np.array_equal(q, again)  # the explicit rng makes it reproducible


@pytest.mark.parametrize("exact", [False, True])
def test_table_samplers_with_per_element_p_are_unbiased_with_binomial_variance(exact: bool) -> None:
    from securevfl.privacy.pbm import _binomial

    rng = np.random.default_rng(8)
    b, beta = 64, 0.25
    x = np.tanh(rng.normal(size=(2000, 16)))
    # the exact sampler at the unrounded p, or pbm_quantize at its grid-rounded p
    p = 0.5 + beta * x if exact else _p_grid(x, beta)
    draw = (
        (lambda: _binomial(b, p, rng))
        if exact
        else (lambda: pbm_quantize(x, b=b, beta=beta, rng=rng)[0])
    )
    q = np.stack([draw() for _ in range(40)])
    resid = q - b * p
    var = b * p * (1 - p)
    assert abs(resid.sum()) < 5 * math.sqrt(40 * var.sum())  # E q = b p for every element
    assert np.mean(resid**2) / np.mean(var) == pytest.approx(1.0, abs=0.01)


def _alias_pmfs(table: np.ndarray, rows: list[int]) -> np.ndarray:
    """Exact outcome probabilities (in units of 2^-62) of the given rows of an alias table."""
    from securevfl.privacy import pbm as P

    out = np.zeros((len(rows), 1 << P._COL_BITS), dtype=object)
    out[:] = 0
    for i, r in enumerate(rows):
        for c in range(1 << P._COL_BITS):
            e = int(table[(r << P._COL_BITS) + c])
            thr, alias = e >> P._SHIFT, e & ((1 << P._SHIFT) - 1)
            out[i, c] += thr
            out[i, alias] += (1 << P._UNIT_BITS) - thr
    return out


@pytest.mark.parametrize("b", [1, 3, 64, 127])
def test_table_sampler_composes_to_the_exact_binomial(b: int) -> None:
    """The sampler's stages, read off its tables, give Binomial(b, p) to float precision:
    K ~ Binomial(b, p_lo) (alias), a candidate among the b - K others or not (threshold),
    N | N >= 1 (alias), then Binomial(N, t / W) successes (exact pmf here)."""
    from scipy.stats import binom

    from securevfl.privacy import pbm as P

    grid, no_cand, cond = P._binomial_tables(b)
    G = 1 << P._GRID_BITS
    ps = [0.25, 0.75, 0.5, 0.6, 0.3337, 0.25 + 1e-9, 0.75 - 1e-9, 0.5 + 3.5 / G]
    rows = sorted({int(p * G) for p in ps})
    grid_pmf = dict(zip(rows, _alias_pmfs(grid, rows), strict=True))
    cond_pmf = _alias_pmfs(cond, list(range(b + 1)))
    for r in list(grid_pmf.values()) + list(cond_pmf):
        assert sum(r) == 1 << 62 and not any(r[b + 1 :])  # exact integer pmfs on 0..b
    for p in ps:
        s = p * G
        j = int(s)
        ratio = (s - j) / (4 - j / (G / 4))
        assert 0 <= ratio < 1
        dist = np.zeros(b + 1)
        for k in range(b + 1):
            pk = float(grid_pmf[j][k]) / 2.0**62
            none = (int(no_cand[k]) + 1) / 2.0**64  # P(no candidate among b - k trials)
            dist[k] += pk * none
            if none == 1.0:
                continue
            for n in range(1, b - k + 1):
                pn = pk * (1 - none) * float(cond_pmf[b - k][n]) / 2.0**62
                dist[k : k + n + 1] += pn * binom.pmf(np.arange(n + 1), n, ratio)
            assert not any(cond_pmf[b - k][b - k + 1 :])  # never more candidates than trials
        assert np.abs(dist - binom.pmf(np.arange(b + 1), b, p)).max() < 1e-14, (b, p)


def test_quantizer_rejects_nan() -> None:
    with pytest.raises(ConfigError, match=r"\[-1.0, 1.0\]"):
        pbm_quantize(np.array([0.1, np.nan]), b=4, beta=0.1, rng=np.random.default_rng(0))
