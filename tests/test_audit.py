"""The audit's statistics against independent computations, and a small end-to-end audit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from bench.audit_cli import parse_variants
from bench.cli import main
from securevfl.audit import (
    AuditConfig,
    audit,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    fit_direction,
    one_run_epsilon_lower_bound,
)
from securevfl.errors import ConfigError
from securevfl.rng import UnderNoised
from securevfl.run_options import build_spec


@pytest.mark.parametrize("k,n", [(0, 10), (3, 50), (49, 50), (7, 7)])
def test_clopper_pearson_matches_beta_quantile(k, n):
    want = 1.0 if k == n else stats.beta.ppf(0.975, k + 1, n - k)
    assert clopper_pearson_upper(k, n, alpha=0.025) == pytest.approx(want, rel=1e-12)
    # and its defining property: P[Binomial(n, upper) <= k] = alpha
    if k < n:
        assert stats.binom.cdf(k, n, want) == pytest.approx(0.025, rel=1e-6)


def test_zero_errors_closed_form():
    # 0 of n: the upper bound solves (1 - p)^n = alpha
    assert clopper_pearson_upper(0, 40, alpha=0.025) == pytest.approx(1 - 0.025 ** (1 / 40))


def test_epsilon_from_rates_is_the_dp_inequality():
    want = max(math.log((1 - 0.2) / 0.1), math.log((1 - 0.1) / 0.2))  # both worlds as positive
    assert epsilon_from_rates(0.1, 0.2, delta=0.0) == pytest.approx(want)
    assert epsilon_from_rates(0.5, 0.5, delta=1e-5) == 0.0
    assert epsilon_from_rates(0.0, 0.1, delta=0.0) == math.inf


def test_epsilon_lower_bound_combines_the_two_upper_bounds():
    fpr = stats.beta.ppf(0.975, 3, 98)  # 2 false positives of 100
    fnr = stats.beta.ppf(0.975, 6, 95)  # 5 false negatives of 100
    want = max(math.log((1 - 1e-5 - fnr) / fpr), math.log((1 - 1e-5 - fpr) / fnr))
    assert epsilon_lower_bound(2, 100, 5, 100, delta=1e-5, alpha=0.05) == pytest.approx(want)


def test_one_run_bound_matches_its_formula():
    eps = one_run_epsilon_lower_bound(45, 50, alpha=0.05)
    p = math.exp(eps) / (1 + math.exp(eps))
    assert stats.binom.sf(44, 50, p) == pytest.approx(0.05, rel=1e-6)
    assert one_run_epsilon_lower_bound(25, 50, alpha=0.05) == 0.0  # chance level: no bound


def test_fit_direction_separates_shifted_gaussians():
    rng = np.random.default_rng(0)
    a = rng.normal(0, 1, (200, 5))
    b = rng.normal(0, 1, (200, 5)) + np.array([3.0, 0, 0, 0, 0])
    w, thr = fit_direction(a, b)
    assert np.mean(a @ w > thr) < 0.1 and np.mean(b @ w > thr) > 0.9


def test_under_noised_generator_divides_continuous_noise_only():
    g = UnderNoised(np.random.default_rng(1), 10.0)
    ref = np.random.default_rng(1)
    assert np.allclose(g.normal(0, 2.0, 5), ref.normal(0, 0.2, 5))
    assert np.allclose(g.laplace(0, 1.0, 5), ref.laplace(0, 0.1, 5))
    assert np.allclose(g.standard_normal(4), ref.standard_normal(4) / 10)
    assert np.array_equal(g.integers(0, 9, 6), ref.integers(0, 9, 6))  # not scaled


def _spec(method="dpsgd-c", parties=1, **kw):
    return build_spec(
        dict(method=method, dataset="breast", parties=parties, epsilon=1.0, delta=1e-5, **kw)
    )


def test_audit_catches_noise_switched_off_and_not_the_method():
    rec = audit(_spec(epochs=1, seed=0), AuditConfig(trials=80), variants=(1e9,))
    assert rec["claimed_epsilon"] == pytest.approx(1.0)
    assert rec["epsilon_lower_bound"] <= rec["claimed_epsilon"]  # the method itself holds
    off = rec["variants"][0]
    assert off["violation"] and off["epsilon_lower_bound"] > 1.0  # no noise: caught
    assert off["test"]["false_pos"] == 0 and off["test"]["false_neg"] == 0
    assert rec["smallest_divisor_caught"] == 1e9


def test_audit_split_nn_run_view_is_the_canary_embedding():
    spec = _spec("ldp-vfl", 2, epochs=1, seed=0, bottom_epochs=1)  # whole runs: keep them short
    rec = audit(spec, AuditConfig(trials=8, view="run"))
    assert rec["audit"] == "run"
    assert "embeddings of the canary row" in rec["view"]["describe"]
    # release-once: the canary's one release, one number per embedding coordinate
    assert rec["result"]["view_size"] == spec.embedding_dim


def test_audit_cli_json(capsys):
    rc = main(
        ["audit", "dpsgd-c", "--dataset", "breast", "--parties", "1", "--epsilon", "1",
         "--delta", "1e-5", "--epochs", "1", "--trials", "16", "--variants", "none", "--json"]
    )  # fmt: skip
    assert rc == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["claimed_epsilon"] == pytest.approx(1.0)
    assert 0.0 <= rec["epsilon_lower_bound"] <= rec["largest_detectable_epsilon"]


def test_run_cannot_under_noise(capsys):
    assert main(["run", "dpsgd-c", "--parties", "1", "--epsilon", "1", "--variants", "2"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["0.5", "x", "1"])
def test_bad_variants_are_one_line(bad):
    with pytest.raises(ConfigError):
        parse_variants(bad)


def test_audit_refuses_a_method_without_epsilon():
    with pytest.raises(ConfigError):
        audit(build_spec(dict(method="vfl", dataset="breast", epochs=1)), AuditConfig(trials=8))
