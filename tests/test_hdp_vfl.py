"""HDP-VFL (method hdp-vfl): Algorithm 1 against a numpy reference, its record, its errors."""

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from bench.runner import load_plugins
from securevfl.context import RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import build_views, run_experiment, validate_spec
from securevfl.methods.hdp_vfl import train_hdp
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.rng import make_rng
from securevfl.runtime import InProcessRuntime
from securevfl.training import balanced_batch_size, minibatches

load_plugins()


def _spec(**kw):
    base = dict(
        method="hdp-vfl",
        dataset="breast",
        parties=2,
        epochs=1,
        batch_size=64,
        seed=0,
        epsilon=1.0,
        delta=1e-5,
    )
    base.update(kw)
    return RunSpec(**base)


def test_contract_run_reports_target_epsilon_per_stream():
    rec = run_experiment(_spec())
    priv = rec["privacy"]
    assert priv["accountant"].startswith("pld (dp_accounting; Gaussian")
    assert priv["unit"] == "party-row" and priv["outside_guarantee"][0].startswith("test rows")
    assert priv["epsilon"] == pytest.approx(1.0, rel=1e-6) and priv["epsilon"] <= 1.0 + 1e-9
    assert priv["target_epsilon"] == 1.0
    assert set(priv["per_party"]) == {"0", "1"}
    assert priv["per_party"]["1"]["epsilon"] == pytest.approx(1.0, rel=1e-6)
    # the passive party's noisy scoring weights are one more release than the active's epochs
    assert priv["per_party"]["1"]["releases"] == priv["per_party"]["0"]["releases"] + 1
    # one sample changes both streams: the sample-unit ε composes them
    assert priv["by_unit"]["sample"] > priv["by_unit"]["party-row"]
    assert rec["time"]["train_s"] > 0 and rec["comm"]["bytes_total"] > 0


def test_plain_scoring_voids_the_guarantee_and_says_why():
    rec = run_experiment(_spec(options={"eval": "plain"}))
    priv = rec["privacy"]
    assert priv["epsilon"] is None
    assert any("eval=plain" in why for why in priv["outside_guarantee"])


def test_algorithm_1_matches_a_numpy_reference_with_the_same_noise():
    spec = _spec(
        parties=3, epochs=2, batch_size=100, seed=3, epsilon=5.0, lam=0.01, lr=1.0,
        reproducible_noise=True,  # the reference redraws the same noise from the seed
    )  # fmt: skip
    method = validate_spec(spec)
    info, views, _ = build_views(spec, method, [0, 1, 2])
    ctx = RunContext(InProcessRuntime(3), spec, info, views, shared_seed=3)
    run, hooks = train_hdp(
        ctx,
        PrivacyLedger("party-row"),
        epochs=2,
        clip=0.5,
        calibration="analytic",
        tag="final",
        intercept=True,
    )
    state, facts = run.state, hooks.plan.facts
    # reference: Algorithm 1 written out (balanced batches, noise from the same party streams);
    # the intercept is a constant column of the active party, clipped with its block
    n, b = info.n_train, balanced_batch_size(info.n_train, 100)
    y = np.where(views[0].y_train == 1, 1.0, -1.0)
    X = {k: views[k].X_train for k in range(3)}
    X[0] = np.hstack([X[0], np.ones((n, 1))])
    rng = {k: make_rng(3, purpose="noise/hdp/final", party=k) for k in range(3)}
    w = {k: np.zeros(X[k].shape[1]) for k in range(3)}

    def clip(v):
        return v / max(1.0, np.linalg.norm(v) / 0.5)

    for epoch in range(2):
        for idx in minibatches(n, b, seed=3, epoch=epoch):
            sec_b = [
                X[k][idx] @ w[k] + rng[k].normal(0, facts["sigma_b"], len(idx)) for k in (1, 2)
            ]
            theta = X[0][idx] @ w[0] + sum(sec_b)
            ir_a = -y[idx] / (1.0 + np.exp(y[idx] * theta))
            sec_a = ir_a + rng[0].normal(0, facts["sigma_a"], len(idx))
            w[0] = clip(w[0] - 1.0 * (X[0][idx].T @ ir_a / len(idx) + 0.01 * w[0]))
            got = np.clip(sec_a, -0.1, 0.1)  # the passive parties clip what they receive (L/10)
            for k in (1, 2):
                w[k] = clip(w[k] - 1.0 * (X[k][idx].T @ got / len(idx) + 0.01 * w[k]))
    for k in range(3):
        np.testing.assert_allclose(state.w[k], w[k], atol=1e-10)
        assert np.linalg.norm(state.w[k]) <= 0.5 + 1e-12
    assert state.bias == 0.0 and state.w[0][-1] != 0.0  # the bias is the last weight of party 0


def _hand_sensitivities(n, e, lr, c, n_test, k=1.0):
    """Per-epoch sums of hdp_sensitivity's docstring, written out (logistic, L = 1, c_h = 0.1)."""
    dp = [2 * m * lr * 0.1 / n for m in range(e + 1)]  # passive drift (auto clip: L/10)
    da = [2 * m * lr * c * 1.0 / n for m in range(e + 1)]  # active drift
    bw, jump = 0.25 * c, 2 * (0.25 * k + 0.5)
    d_b2 = sum((n - 1) * dp[m] ** 2 + (dp[m - 1] + 2 * k) ** 2 for m in range(1, e + 1))
    d_a2 = sum((n - 1) * (bw * da[m]) ** 2 + (bw * da[m - 1] + jump) ** 2 for m in range(1, e + 1))
    return math.sqrt(d_a2), math.sqrt(d_b2)


def test_classic_calibration_reports_the_exact_epsilon_of_its_sigma():
    # full batch: b = n = 455, e = 3, eta = 1, k = 1, no intercept
    delta = 1e-5
    for eps in (0.5, 10.0):
        rec = run_experiment(
            _spec(
                epochs=3,
                batch_size=1000,
                lr=1.0,
                epsilon=eps,
                delta=delta,
                options={"calibration": "classic", "intercept": False},
            )
        )
        priv = rec["privacy"]
        d_a, d_b = _hand_sensitivities(rec["n_train"], 3, 1.0, 1.0, rec["n_test"])
        classic = math.sqrt(2 * math.log(1.25 / delta)) / eps  # σ per unit of sensitivity
        # the passive party spends 3/4 of its μ² on its stream, 1/4 on its scoring weights
        for party, d, share in (("1", d_b, 0.75), ("0", d_a, 1.0)):
            pp = priv["per_party"][party]
            assert pp["sensitivity"] == pytest.approx(d, rel=1e-12)
            assert pp["sigma"] == pytest.approx(classic * d / math.sqrt(share), rel=1e-12)
            # the ε reported is the exact one of the classic σ (one Gaussian of μ = 1/classic)
            exact = pld.from_gaussian_mechanism(classic).get_epsilon_for_delta(delta)
            assert pp["epsilon"] == pytest.approx(exact, rel=2e-3)
        if eps < 1:
            assert priv["epsilon"] < eps and "warning" not in priv
        else:  # the classic σ misses large targets: say so, report the truth
            assert priv["epsilon"] > eps and "misses the target" in priv["warning"]


def test_analytic_sigma_not_larger_than_classic_in_a_run():
    kw = dict(epochs=2, batch_size=1000, epsilon=0.5)
    a = run_experiment(_spec(**kw))["extra"]
    c = run_experiment(_spec(**kw, options={"calibration": "classic"}))["extra"]
    assert a["sigma_a"] < c["sigma_a"] and a["sigma_b"] < c["sigma_b"]


def test_regression_uses_the_bounded_least_squares():
    rec = run_experiment(_spec(dataset="diabetes", epochs=3, batch_size=1000, epsilon=100.0))
    assert rec["privacy"]["stream"]["loss"] == "least-squares-bounded"
    assert np.isfinite(rec["metrics"]["mse"]) and rec["metrics"]["mse"] < 1.0


def test_noise_is_seeded_only_in_the_reproduction_mode_and_changes_the_model():
    fp = [
        run_experiment(_spec(seed=s, epsilon=e, reproducible_noise=True))["model_fingerprint"]
        for s, e in ((0, 1.0), (0, 1.0), (0, 2.0))
    ]
    assert fp[0] == fp[1] and fp[0] != fp[2]
    # --seed alone: the CSPRNG draws the noise and the fingerprints stay with their owners
    assert run_experiment(_spec(seed=0, epsilon=1.0))["model_fingerprint"] == {}


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(options={"calibration": "laplace"}), "calibration must be one of"),
        (dict(epsilon=None), "epsilon must be given"),
        (dict(options={"clip_norm": 0.0}), "clip_norm must be > 0"),
        (dict(options={"tune": "maybe"}), "must be true or false"),
        (dict(model="mlp"), "model for method 'hdp-vfl'"),
        (dict(lr=5.0), "lr must be <="),
        (dict(dataset="diabetes", loss="least-squares"), "must have a bounded derivative"),
    ],
)
def test_bad_input_is_a_one_line_config_error(kw, match):
    with pytest.raises(ConfigError, match=match):
        run_experiment(_spec(**kw))


def test_tuning_picks_from_the_grid_and_accounts_its_runs():
    rec = run_experiment(_spec(batch_size=3200, options={"tune": True}))
    t = rec["extra"]["tuning"]
    assert t["chosen_epochs"] in (5, 10, 15) and t["chosen_clip_norm"] in (0.1, 0.5, 1.0)
    assert len(t["cv"]) == 9
    priv = rec["privacy"]
    assert priv["epsilon_final_run_only"] == pytest.approx(1.0, rel=1e-6)
    # the choice is sent outside any mechanism: no ε, and the record says why
    assert priv["epsilon"] is None and "tuning" in priv["outside_guarantee"][0]
    # all 45 CV runs + the final one are in the ledger
    assert priv["by_unit"]["party-row"] > 3.0
    assert rec["config"]["tune"] is True


@pytest.mark.networked
@pytest.mark.slow
def test_processes_k3_give_the_inprocess_model():
    from bench.runner import PLUGINS
    from securevfl.experiment import run_in_processes

    spec = _spec(parties=3, epochs=2, seed=5, timeout=60, reproducible_noise=True)
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["runtime"] == "processes"
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert len(net["model_fingerprint"]) == 3
    assert net["privacy"]["epsilon"] == local["privacy"]["epsilon"]


def test_free_intercept_keeps_the_clipped_bias_sensitivities_hand_computed():
    # full batch b = n = 455, e = 3, eta = 1, k = 1, c = sqrt(2) on the active side
    kw = dict(epochs=3, batch_size=1000, lr=1.0, epsilon=0.5)
    free = run_experiment(_spec(**kw, options={"calibration": "classic", "intercept": "free"}))
    clipped = run_experiment(_spec(**kw, options={"calibration": "classic", "intercept": True}))
    d_a, d_b = _hand_sensitivities(free["n_train"], 3, 1.0, math.sqrt(2.0), free["n_test"])
    for rec in (free, clipped):
        pp = rec["privacy"]["per_party"]
        assert pp["1"]["sensitivity"] == pytest.approx(d_b, rel=1e-12)
        assert pp["0"]["sensitivity"] == pytest.approx(d_a, rel=1e-12)
    assert free["extra"]["sigma_b"] == clipped["extra"]["sigma_b"]


def test_free_intercept_is_an_unclipped_bias_of_the_active_party():
    spec = _spec(epochs=3, batch_size=100, seed=2, epsilon=1000.0, lr=2.0)
    method = validate_spec(spec)
    info, views, _ = build_views(spec, method, [0, 1])
    ctx = RunContext(InProcessRuntime(2), spec, info, views, shared_seed=2)
    run, hooks = train_hdp(
        ctx,
        PrivacyLedger("party-row"),
        epochs=3,
        clip=0.05,
        calibration="analytic",
        tag="final",
        intercept="free",
    )
    state = run.state
    assert hooks.plan.facts["feature_norm"] == pytest.approx(math.sqrt(2.0))
    assert len(state.w[0]) == info.features_per_party[0]  # no constant column
    assert abs(state.bias) > 0.05  # breast's prior logit: the bias is not held to k
    assert np.linalg.norm(state.w[0]) <= 0.05 + 1e-12


def test_theta_is_recovered_from_the_logistic_derivative():
    from securevfl.models.glm import LogisticLoss
    from securevfl.models.logistic_threshold import theta_from_logistic_derivative

    theta = np.linspace(-20, 20, 41)
    y = np.where(np.arange(41) % 2 == 0, 1.0, -1.0)
    th, y01 = theta_from_logistic_derivative(LogisticLoss().derivative(theta, y))
    np.testing.assert_allclose(th, theta, atol=1e-6)
    np.testing.assert_array_equal(y01, (y > 0).astype(float))


def test_deconvolved_threshold_recovers_the_noise_free_crossing():
    from securevfl.models.logistic_threshold import deconvolved_threshold, logistic_fit_1d

    rng = np.random.default_rng(0)
    s = rng.normal(0.0, 1.0, 200_000)
    y01 = (rng.random(len(s)) < 1 / (1 + np.exp(-(3.0 * s - 2.0)))).astype(float)
    noisy = s + rng.normal(0.0, 2.0, len(s))
    a, c, _ = logistic_fit_1d(noisy, y01)
    assert -c / a > 2.0  # the naive crossing on noisy scores lies far in the tail
    t, info = deconvolved_threshold(noisy, y01, noise_var=4.0)
    assert info["reliability"] == pytest.approx(0.2, abs=0.01)
    assert t == pytest.approx(2.0 / 3.0, abs=0.08)
    # no signal: no threshold (the bias stays as trained)
    t0, _ = deconvolved_threshold(rng.normal(0.0, 2.0, 5000), y01[:5000], noise_var=4.0)
    assert t0 is None


def test_deconvolved_threshold_needs_logistic_and_an_unclipped_bias():
    with pytest.raises(ConfigError, match="needs intercept 'free' or 'none'"):
        run_experiment(_spec(options={"threshold": "deconvolved"}))
    with pytest.raises(ConfigError, match="threshold must be one of"):
        run_experiment(_spec(options={"threshold": "median"}))
    rec = run_experiment(
        _spec(epsilon=100.0, options={"threshold": "deconvolved", "intercept": "free"})
    )
    # the refit threshold is a statistic of exact derivatives: named withheld (issue 42)
    assert "threshold" not in rec["privacy"]["stream"]
    assert any(w.startswith("stream.threshold") for w in rec["privacy"]["withheld"])
    assert rec["privacy"]["epsilon"] == pytest.approx(100.0, rel=1e-6)


def test_refit_drops_a_pure_noise_block_and_keeps_an_informative_one():
    from securevfl.models.active_refit import refit_active
    from securevfl.models.glm import LogisticLoss

    rng = np.random.default_rng(0)
    n = 4000
    X_own = rng.normal(size=(n, 3)) / 3
    signal = rng.normal(size=n)
    y = np.where(X_own @ [3.0, -2.0, 1.0] + 2.0 * signal + rng.logistic(size=n) > 0, 1.0, -1.0)
    loss = LogisticLoss()
    # the passive column a party would send: its score under huge noise, or nearly exact
    noisy = signal + rng.normal(0, 50.0, n)
    _, _, a_noise = refit_active(loss, X_own, noisy[:, None], y)
    w, _, a_clean = refit_active(loss, X_own, (signal + rng.normal(0, 0.1, n))[:, None], y)
    assert abs(a_noise[0]) < 0.01  # a block of pure noise is (nearly) ignored
    assert a_clean[0] == pytest.approx(2.0, rel=0.2)  # an informative one is used at its weight
    np.testing.assert_allclose(w, [3.0, -2.0, 1.0], rtol=0.25)


def test_refit_keeps_the_label_holder_near_itself_alone_at_no_privacy_cost():
    # reproducible noise: the label holder's split then comes from --seed, the rows `local` uses
    spec = dict(epochs=10, batch_size=10_000_000, epsilon=1.0, options={}, reproducible_noise=True)
    refit = run_experiment(_spec(**spec))
    trained = run_experiment(_spec(**{**spec, "options": {"final_fit": "trained"}}))
    alone = run_experiment(RunSpec(method="local", dataset="breast", parties=2, seed=0))
    acc = refit["metrics"]["accuracy"]
    assert acc >= alone["metrics"]["accuracy"] - 0.01
    assert acc > trained["metrics"]["accuracy"]
    # the refit's bias and scales are statistics of the label holder's exact rows: withheld
    # from a guarded record (CSPRNG noise)
    guarded = run_experiment(_spec(**{**spec, "reproducible_noise": False}))
    assert "final_fit" not in guarded["privacy"]["stream"]
    assert any(w.startswith("stream.final_fit") for w in guarded["privacy"]["withheld"])
    # post-processing: the same releases, the same ε
    for key in ("epsilon", "by_unit", "per_party"):
        assert refit["privacy"][key] == trained["privacy"][key]
