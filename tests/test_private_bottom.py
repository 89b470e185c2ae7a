"""The DP bottom update: per-example gradients, the 2·C_g bound, and the ε the methods print."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import norm

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.models.nets import bottom_mlp, seeded_init
from securevfl.training.private_bottom import (
    BottomDP,
    clipped_sum,
    per_example_grads,
    private_step,
)


def _model(d, P, seed):
    return seeded_init(bottom_mlp(d, P, hidden=8), seed)


def assert_per_example_grads_match_one_row_at_a_time(m, x, v, atol=1e-6):
    """``per_example_grads`` of model ``m`` equal plain autograd on each row alone."""
    got = per_example_grads(m, x, v)
    for i in range(x.shape[0]):
        m.zero_grad()
        (m(x[i : i + 1])[0] * v[i]).sum().backward()
        for n, p in m.named_parameters():
            assert torch.allclose(got[n][i], p.grad, atol=atol)


def test_per_example_gradients_match_one_row_at_a_time():
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(7, 5)), dtype=torch.float32)
    v = torch.as_tensor(rng.normal(size=(7, 3)), dtype=torch.float32)
    assert_per_example_grads_match_one_row_at_a_time(_model(5, 3, 1), x, v)


def test_one_row_moves_the_clipped_sum_by_at_most_twice_the_clip():
    rng = np.random.default_rng(1)
    for trial in range(60):
        b, d, P = int(rng.integers(1, 20)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
        clip = float(rng.choice([0.01, 0.5, 3.0]))
        m = _model(d, P, trial)
        x = rng.normal(size=(b, d)) * rng.choice([0.1, 1.0, 10.0])
        v = rng.normal(size=(b, P)) * rng.choice([0.01, 1.0, 100.0])
        x2, v2 = x.copy(), v.copy()
        i = int(rng.integers(b))
        x2[i], v2[i] = rng.normal(size=d) * 10, rng.normal(size=P) * 100
        s1 = clipped_sum(
            per_example_grads(m, torch.tensor(x).float(), torch.tensor(v).float()), clip
        )
        s2 = clipped_sum(
            per_example_grads(m, torch.tensor(x2).float(), torch.tensor(v2).float()), clip
        )
        diff = math.sqrt(sum(float(((s1[n] - s2[n]) ** 2).sum()) for n in s1))
        assert diff <= 2 * clip * (1 + 1e-5)


def test_private_step_is_reproducible_from_the_noise_generator():
    x = torch.ones(4, 3)
    v = torch.ones(4, 2)
    outs = []
    for _ in range(2):
        m = _model(3, 2, 0)
        opt = torch.optim.Adam(m.parameters(), lr=0.1)
        private_step(m, opt, x, v, dp=BottomDP(1.0, 2.0), rng=np.random.default_rng(3))
        outs.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.equal(outs[0], outs[1])


def _gdp_epsilon(mu, delta):
    """ε of a μ-GDP mechanism at δ (Dong, Roth & Su: δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2))."""
    f = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta  # noqa: E731
    return brentq(f, 0.0, 100.0)


def _spec(method, **options):
    return RunSpec(
        method=method, dataset="breast", parties=2, model="mlp", epochs=2, batch_size=64,
        seed=3, epsilon=4.0, delta=1e-5, options=options,
    )  # fmt: skip


def test_afe_epsilon_matches_an_independent_gdp_composition():
    rec = run_experiment(_spec("afe-vfl", variant="full"))
    p, E = rec["privacy"], 2
    z_e, z_s = p["noise_multiplier_embedding"], p["noise_multiplier_stats"]
    half = p["bottom_noise_multiplier"] / 2  # noise σ_g·C_g over sensitivity 2·C_g
    mu = math.sqrt(E * (1 / z_e**2 + 1 / z_s**2 + 1 / half**2))
    assert p["train_row_epsilon"] == pytest.approx(_gdp_epsilon(mu, 1e-5), rel=1e-3)
    test_eps = _gdp_epsilon(1 / p["noise_multiplier_test"], 1e-5)
    assert p["test_row_epsilon"] == pytest.approx(test_eps, rel=1e-3)
    assert p["epsilon"] == max(p["train_row_epsilon"], p["test_row_epsilon"]) <= 4.0
    assert p["bottom"] == "dp"


def test_ldp_epsilon_matches_an_independent_gdp_composition():
    rec = run_experiment(_spec("ldp-vfl", release_schedule="split"))
    p, E, P = rec["privacy"], 2, 8  # P: the default embedding dimension
    z = p["sigma"] / (2 * math.sqrt(P))  # each use: the whole embedding, Δ = 2·√P (tanh bound)
    half = p["bottom_noise_multiplier"] / 2
    mu = math.sqrt(E * (1 / z**2 + 1 / half**2))
    assert p["train_row_epsilon"] == pytest.approx(_gdp_epsilon(mu, 1e-5), rel=1e-3)
    assert p["epsilon"] <= 4.0 and p["per_row_only"] is None


def test_pbm_with_dp_bottom_meets_the_target_and_counts_a_rows_own_uses():
    rec = run_experiment(_spec("pbm-vfl", release_schedule="split"))
    p = rec["privacy"]
    assert p["bottom"] == "dp" and 0.98 * 4.0 <= p["epsilon"] <= 4.0
    assert p["releases_per_party"] == 8 * (2 + 1)  # P coordinates x (E epochs + its scoring)
    assert "per_row_only" not in p


@pytest.mark.parametrize("q, z, eps", [(0.1, 0.5, 1.0), (0.3, 1.0, 0.5), (1.0, 0.8, 1.0)])
def test_sampled_gaussian_event_matches_numerical_hockey_stick(q, z, eps):
    """A secret Poisson inclusion (q) of one record in a Gaussian sum, replace-one: the
    accountant's δ(ε) against the hockey-stick divergence of the two mixtures, integrated."""
    from scipy import integrate

    from securevfl.privacy import Accountant, sampled_gaussian_event

    def mix(x, shift):  # contributions ±1/2 apart by 1 (Δ = 1), noise z
        return q * norm.pdf(x, shift, z) + (1 - q) * norm.pdf(x, 0.0, z)

    def gap(x):
        return max(mix(x, -0.5) - math.exp(eps) * mix(x, 0.5), 0.0)

    exact = integrate.quad(gap, -40 * z, 40 * z, limit=500, points=[0.0])[0]
    acc = Accountant().compose(sampled_gaussian_event(sigma=z, sensitivity=1.0, sampling=q))
    assert acc.get_delta(eps) == pytest.approx(exact, rel=1e-3, abs=1e-9)
    assert not Accountant("rdp").supports(
        sampled_gaussian_event(sigma=z, sensitivity=1.0, sampling=0.5)
    )
