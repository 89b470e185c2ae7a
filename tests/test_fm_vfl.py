"""FM-VFL (securevfl/methods/fm_vfl.py): Claim 1 with real MPyC parties, the record's budgets,
the baselines fm-central and dpsgd-c, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from baselines.dpsgd_c import vector_laplace
from baselines.fm_central import central_fm
from protocols import shamir_launch
from protocols import shamir_products as sp
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment, validate_spec
from securevfl.methods.fm_vfl import (
    assemble_objective,
    factors,
    label_vector,
    single_coefficients,
    solve_noisy_quadratic,
)
from securevfl.privacy.functional import block_sensitivities, global_sensitivity


def _vfl_same_draws(task, X, y, dims, eps, E_U, E_l):
    """FM-VFL's pipeline (single blocks locally, cross blocks by real MPyC parties) with the
    noise slices of one global draw."""
    K = len(dims)
    offs = np.cumsum([0, *dims])
    scale = global_sensitivity(block_sensitivities(task, dims)) / eps
    alpha, c = factors(task)
    v = label_vector(task, y)
    Xs = [X[:, offs[k] : offs[k + 1]] for k in range(K)]
    sl = [slice(offs[k], offs[k + 1]) for k in range(K)]
    singles = {}
    for k in range(K):
        _, lam, U = single_coefficients(task, Xs[k], v if k == 0 else None)
        singles[k] = {
            "U": U + scale * E_U[sl[k], sl[k]],
            "lam": None if lam is None else lam + scale * E_l[sl[0]],
        }
    pairs = [(a, b) for a in range(K) for b in range(a + 1, K)]
    mats = {k: (np.hstack([v[:, None], Xs[0]]) if k == 0 else Xs[k]) for k in range(K)}
    noises = {}
    for j, (a, b) in enumerate(pairs):
        N = scale * E_U[sl[a], sl[b]] / (2 * c)
        if a == 0:
            N = np.vstack([scale * E_l[sl[b]][None, :] / alpha, N])
        noises[j] = N
    bound = 45 * scale / min(abs(alpha), 2 * c)
    f = sp.choose_frac_bits(sp.MAX_ROWS, bound)
    enc = {k: sp.encode_fixed(M, f) for k, M in mats.items()}
    opened, _ = shamir_launch.run_block_products(
        enc,
        noises,
        [sp.Pair(a, b, a) for a, b in pairs],
        n_parties=K + 1,
        receiver=K,
        frac_bits=f,
        noise_bound=bound,
        timeout=60,
    )
    dec = shamir_launch.decode_products(opened, f)
    lam, U = assemble_objective(task, dims, singles, {p: dec[j] for j, p in enumerate(pairs)})
    return solve_noisy_quadratic(lam, U, scale=scale, ridge=1.0), lam, U, f


@pytest.mark.networked
@pytest.mark.slow
@pytest.mark.parametrize("task", ["logistic", "linear"])
def test_claim_1_vfl_equals_centralized_fm_with_the_same_draws(task):
    rng = np.random.default_rng(3)
    n, d, eps = 400, 9, 5.0
    X = rng.uniform(-1, 1, (n, d))
    y = (
        (rng.random(n) < 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
        if task == "logistic"
        else np.clip(X @ rng.normal(size=d) / d, -1, 1)
    )
    E_U = np.triu(rng.laplace(0, 1, (d, d)))
    E_l = rng.laplace(0, 1, d)
    w_c, scale, *_ = central_fm(task, X, y, epsilon=eps, rng=None, unit_noise=(E_U, E_l, 0.0))
    _, lam_c, U_c = single_coefficients(task, X, label_vector(task, y))
    lam_c, U_c = lam_c + scale * E_l, U_c + scale * E_U
    for dims in ([4, 5], [3, 3, 3], [2, 2, 2, 3]):
        w_v, lam_v, U_v, f = _vfl_same_draws(task, X, y, dims, eps, E_U, E_l)
        # fixed point: inputs rounded to 2^-(f+1), so a product sum moves by <= n 2^-f (times
        # the coefficient factor <= 2); the noise itself is encoded to 2^-2f
        tol = 2 * n * 2.0**-f
        assert np.abs(lam_v - lam_c).max() <= tol and np.abs(U_v - U_c).max() <= tol, dims
        assert np.allclose(w_v, w_c, rtol=0, atol=1e-4), (dims, np.abs(w_v - w_c).max())


@pytest.mark.networked
def test_contract_run_on_breast_reports_budgets():
    rec = run_experiment(
        RunSpec(
            method="fm-vfl",
            dataset="breast",
            parties=2,
            epochs=1,
            batch_size=64,
            seed=0,
            epsilon=1.0,
            delta=1e-5,
            model="glm",
            center=True,  # the CLI's default for fm-vfl
            options={"mechanism": "laplace"},
        )
    )
    pv = rec["privacy"]
    assert pv["epsilon"] == pytest.approx(1.0)
    d = rec["extra"]["d"]
    # Lemma 1 with each party's L1 row bound 2 sqrt(15) (the constant column adds 1 at party 0)
    B = 1 + 2 * 2 * math.sqrt(15)
    assert d == 31 and pv["delta_f"] == pytest.approx(B + B * B / 4)
    # the released means take fm-vfl's share (0.2 of ε, over K = 2): the FM runs at 0.8
    assert pv["centring"]["share"] == 0.2
    assert pv["centring"]["epsilon_per_party"] == pytest.approx(0.1)
    fm_eps = sum(b["sensitivity"] / b["scale"] for b in pv["blocks"].values())
    assert fm_eps == pytest.approx(0.8)
    for k in ("0", "1"):
        assert 0 < pv["per_party"][k]["epsilon"] < 1.0
    assert rec["comm"]["by_phase"]["mpc"]["bytes"] > 0
    assert set(rec["extra"]["mpc"]["peak_rss_mb"]) == {"0", "1", "2"} or set(
        rec["extra"]["mpc"]["peak_rss_mb"]
    ) == {0, 1, 2}
    assert 0.0 <= rec["metrics"]["accuracy"] <= 1.0


@pytest.mark.networked
def test_bottom_up_record_respects_party_choices():
    rec = run_experiment(
        RunSpec(
            method="fm-vfl",
            dataset="diabetes",
            parties=2,
            seed=1,
            options={"budget": "bottom-up", "party_epsilons": "0.5,2", "mechanism": "laplace"},
        )
    )
    assert rec["config"]["epsilon"] is None and "target_epsilon" not in rec["privacy"]
    per = rec["privacy"]["per_party"]
    assert per["0"]["epsilon"] == pytest.approx(0.5)
    assert per["1"]["epsilon"] <= 2.0
    assert rec["privacy"]["epsilon"] < 2.5 and "mse" in rec["metrics"]


def test_bad_options_raise_config_errors():
    bottom_up = {"budget": "bottom-up", "mechanism": "laplace"}
    with pytest.raises(ConfigError, match="party_epsilons must give 2 values"):
        validate_spec(RunSpec(method="fm-vfl", options={**bottom_up, "party_epsilons": "1"}))
    with pytest.raises(ConfigError, match="epsilon must be given"):
        validate_spec(RunSpec(method="fm-vfl"))
    with pytest.raises(ConfigError, match="epsilon must not be given with party_epsilons"):
        validate_spec(
            RunSpec(
                method="fm-vfl",
                epsilon=1.0,
                options={**bottom_up, "party_epsilons": "1,2"},
            )
        )
    with pytest.raises(ConfigError, match="budget bottom-up needs --mechanism laplace"):
        validate_spec(
            RunSpec(method="fm-vfl", options={"budget": "bottom-up", "party_epsilons": "1,2"})
        )
    with pytest.raises(ConfigError, match="--l1-bound of method 'fm-vfl' applies with"):
        validate_spec(RunSpec(method="fm-vfl", epsilon=1.0, options={"l1_bound": "box"}))
    with pytest.raises(ConfigError, match="ridge must be >= 0"):
        validate_spec(RunSpec(method="fm-vfl", epsilon=1.0, options={"ridge": -1.0}))


def test_solver_trims_an_indefinite_noisy_quadratic():
    lam = np.array([1.0, -2.0])
    U = np.array([[1.0, 0.0], [0.0, -5.0]])  # unbounded below without trimming
    w = solve_noisy_quadratic(lam, U, scale=0.0, ridge=0.0)
    assert w[1] == 0.0 and w[0] == pytest.approx(-0.5)
    assert np.isfinite(solve_noisy_quadratic(lam, U, scale=1.0, ridge=1.0)).all()


def test_dpsgd_c_noise_and_accountant():
    rng = np.random.default_rng(0)
    Z = np.array(
        [np.linalg.norm(vector_laplace(rng, 5, sensitivity=2.0, epsilon=0.5)) for _ in range(4000)]
    )
    assert Z.mean() == pytest.approx(5 * 2.0 / 0.5, rel=0.05)  # ||Z|| ~ Gamma(d, Δ/ε)
    # parallel within an epoch (one release per epoch per row), sum across epochs
    rec = run_experiment(RunSpec(method="dpsgd-c", dataset="breast", epochs=3, seed=0, epsilon=0.3))
    assert rec["privacy"]["per_party"]["0"]["releases"] == 3
    assert rec["privacy"]["epsilon_step"] == pytest.approx(0.1)
    assert rec["privacy"]["epsilon"] == pytest.approx(0.3) and rec["privacy"]["unit"] == "sample"


def test_fm_central_and_dpsgd_c_run():
    for m in ("fm-central", "dpsgd-c"):
        rec = run_experiment(RunSpec(method=m, dataset="breast", epochs=2, seed=0, epsilon=1.0))
        assert rec["privacy"]["epsilon"] == pytest.approx(1.0)
        assert 0.0 <= rec["metrics"]["accuracy"] <= 1.0


@pytest.mark.networked
@pytest.mark.slow
def test_processes_runtime_uses_its_own_mpyc_and_gives_the_same_model():
    from securevfl.experiment import run_in_processes

    spec = RunSpec(
        method="fm-vfl", dataset="breast", parties=2, seed=4, epsilon=2.0, timeout=60,
        reproducible_noise=True,  # the same noise in both runtimes (no ε printed)
    )  # fmt: skip
    a = run_experiment(spec)
    b = run_in_processes(spec)
    assert b["runtime"] == "processes"
    assert a["model_fingerprint"] == b["model_fingerprint"]
    assert b["comm"]["by_phase"]["mpc"]["bytes"] > 0


def _breast_fm(eps: float, seed: int, **options) -> dict:
    spec = RunSpec(
        method="fm-vfl", dataset="breast", parties=2, seed=seed, epsilon=eps, center=True,
        reproducible_noise=True, options=options,
    )  # fmt: skip
    return run_experiment(spec)


@pytest.mark.networked
def test_l1_bound_box_is_the_papers_sensitivity_and_clips_nothing():
    """--l1-bound box (the seed's variant): Lemma 1 with B_k = d_k, Δ_f = d²/4 + d."""
    rec = run_experiment(
        RunSpec(
            method="fm-vfl", dataset="breast", parties=2, seed=0, epsilon=1.0, center=True,
            options={"l1_bound": "box", "centre_share": 0.1, "mechanism": "laplace"},
        )
    )  # fmt: skip
    pv, d = rec["privacy"], rec["extra"]["d"]
    assert pv["delta_f"] == pytest.approx(d * d / 4 + d) and pv["epsilon"] == pytest.approx(1.0)
    assert pv["centring"]["epsilon_per_party"] == pytest.approx(0.05)


def test_l1_clipping_bounds_every_row_and_keeps_small_rows():
    from securevfl.methods.fm_options import clip_l1, resolve_l1_bound

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (200, 15))
    B = resolve_l1_bound("auto", 15, False)
    C = clip_l1(X, B)
    assert B == pytest.approx(2 * math.sqrt(15))
    assert np.abs(C).sum(axis=1).max() <= B + 1e-12
    small = np.abs(X).sum(axis=1) <= B
    assert small.any() and np.array_equal(C[small], X[small])


def _phi(task, x, y):
    """One row's contribution to the coefficient vector (λ, and U's upper triangle)."""
    _, lam, U = single_coefficients(task, x[None, :], label_vector(task, np.array([y])))
    const = [label_vector(task, np.array([y]))[0] ** 2] if task == "linear" else []
    return np.concatenate([const, lam, U[np.triu_indices(len(x))]])


@pytest.mark.parametrize("task", ["logistic", "linear"])
def test_gaussian_sensitivity_bounds_every_pair_of_rows(task):
    """The derivation in privacy/fm_gaussian.py, checked by brute force: no pair of rows of L2
    norm <= R (constant column 1 included) moves the coefficient vector by more than Δ₂, and
    extreme pairs reach 60 % of it (the bound is not loose by much)."""
    from securevfl.privacy.fm_gaussian import gaussian_sensitivity, row_l2_bound

    rng = np.random.default_rng(1)
    d, Rk = 6, 1.0
    R = row_l2_bound([Rk, Rk], True)
    D2 = gaussian_sensitivity(task, R)
    assert R == pytest.approx(math.sqrt(3))
    worst = 0.0
    for i in range(3000):
        rows = []
        for _ in range(2):
            z = rng.normal(size=d) * (rng.random(d) < (0.3 if i % 2 else 1.0))
            z = z / max(np.linalg.norm(z), 1e-12) * math.sqrt(2) * Rk  # on the sphere
            y = rng.integers(0, 2) if task == "logistic" else rng.uniform(-1, 1)
            rows.append((np.concatenate([[1.0], z]), y))
        (x, y), (x2, y2) = rows
        if i % 3 == 0:  # opposite rows, opposite labels: the worst case of the first order
            x2, y2 = np.concatenate([[1.0], -x[1:]]), (1 - y if task == "logistic" else -y)
        worst = max(worst, np.linalg.norm(_phi(task, x, y) - _phi(task, x2, y2)))
    assert worst <= D2 + 1e-12 and worst >= 0.6 * D2, (worst, D2)


@pytest.mark.networked
def test_gaussian_record_matches_an_independent_analytic_gaussian():
    """The default mechanism: one Gaussian on the whole objective and the K pure releases of
    the column means in one accountant; the record's ε checked against the exact composition
    written out here with scipy (Balle & Wang's δ(ε) over randomized response's loss)."""
    from scipy.stats import norm

    rec = run_experiment(
        RunSpec(
            method="fm-vfl", dataset="breast", parties=2, seed=0, epsilon=1.0, delta=1e-5,
            center=True,
        )
    )  # fmt: skip
    pv = rec["privacy"]
    assert pv["mechanism"] == "gaussian" and 0.995 <= pv["epsilon"] <= 1.0
    assert pv["centring"]["share"] == 0.25
    R2 = 1 + 2 * 1.0**2  # two blocks at L2 norm 1 and the constant column
    D2 = 2 * math.sqrt(R2 / 4 + R2**2 / 32)
    assert pv["l2_sensitivity"] == pytest.approx(D2) and pv["row_l2_bound"] ** 2 == pytest.approx(
        R2
    )
    s, ec = pv["sigma"] / D2, pv["centring"]["epsilon_per_party"]
    assert ec == pytest.approx(0.125)  # 0.25 of ε over K = 2

    def gauss_delta(e):  # Balle & Wang's δ(ε) of the Gaussian with σ/Δ = s, any real ε
        return norm.cdf(1 / (2 * s) - e * s) - math.exp(e) * norm.cdf(-1 / (2 * s) - e * s)

    # each pure ε_c release is dominated by randomized response: its privacy loss is +ec with
    # probability q, -ec with 1 - q; two of them shift the Gaussian's ε by 2ec, 0 or -2ec
    q = math.exp(ec) / (1 + math.exp(ec))
    shifts = {2 * ec: q * q, 0.0: 2 * q * (1 - q), -2 * ec: (1 - q) ** 2}
    delta = sum(w * gauss_delta(pv["epsilon"] - t) for t, w in shifts.items())
    assert delta == pytest.approx(1e-5, rel=0.02) and pv["epsilon"] <= 1.0
    assert rec["metrics"]["accuracy"] > 0.628  # the majority class


@pytest.mark.networked
def test_breast_small_epsilon_learns_above_the_seed_variant():
    """Issue 25: at ε = 1 and 2 on breast the seed's settings (Laplace, box bound, 10% centring
    share) reach 0.550 and 0.675 on seeds 0-3 (noise drawn from the seed, reproducible); the
    defaults (the Gaussian mechanism) must beat the majority class (0.628) and that variant."""
    for eps, floor in ((1.0, 0.70), (2.0, 0.75)):
        new = np.mean([_breast_fm(eps, s)["metrics"]["accuracy"] for s in range(4)])
        old = np.mean(
            [
                _breast_fm(eps, s, l1_bound="box", centre_share=0.1, mechanism="laplace")[
                    "metrics"
                ]["accuracy"]
                for s in range(4)
            ]
        )
        assert new >= floor and new > old + 0.04, (eps, new, old)


def test_gaussian_sigma_is_cached_and_a_bad_entry_is_recomputed(tmp_path, monkeypatch):
    """σ for the Gaussian and the means together is a pure function of public inputs: cached,
    and a tampered entry (too little noise) is re-checked by the accountant and replaced."""
    import json

    from securevfl.privacy import fm_gaussian as fg

    monkeypatch.setenv("SECUREVFL_CACHE_DIR", str(tmp_path))
    args = dict(epsilon=1.0, delta=1e-5, parties=2, centring_epsilon=0.125)
    sigma, _ = fg.gaussian_sigma("logistic", math.sqrt(3), **args)
    (entry,) = list(tmp_path.rglob("*.json"))
    assert json.loads(entry.read_text())["sigma"] == sigma
    assert fg.gaussian_sigma("logistic", math.sqrt(3), **args)[0] == sigma  # the hit
    entry.write_text(json.dumps({"sigma": sigma * 0.9, "epsilon": 1.0}))  # a lie
    again, sens = fg.gaussian_sigma("logistic", math.sqrt(3), **args)
    assert again == sigma
    eps = fg.gaussian_ledger(sens, again, 2, 0.125).epsilon(1e-5)
    assert 0.99 <= eps <= 1.0
