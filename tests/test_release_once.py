"""The release-once schedule of the per-row DP methods: labels by randomized response, local
DP-SGD bottoms, one release per row, and the ε each record prints (checked independently)."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import norm

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.methods.release_options import release_defaults
from securevfl.training.release_once import (
    keep_probability,
    probe_directions,
    randomized_response,
)


def _gdp_epsilon(mu, delta):
    """ε of a μ-GDP mechanism at δ (Dong, Roth & Su: δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2))."""
    f = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta  # noqa: E731
    return brentq(f, 0.0, 200.0)


def _spec(method, parties=2, epsilon=4.0, dataset="breast", **options):
    return RunSpec(
        method=method, dataset=dataset, parties=parties, model="mlp", epochs=5, batch_size=128,
        embedding_dim=1, seed=3, epsilon=epsilon, delta=1e-5, options=options,
    )  # fmt: skip


def test_randomized_response_has_the_likelihood_ratio_of_its_epsilon():
    for eps, c in [(1.0, 2), (0.5, 10), (4.0, 3)]:
        p = keep_probability(eps, c)
        other = (1 - p) / (c - 1)  # each other class equally likely
        assert p / other == pytest.approx(math.exp(eps))
        y = np.zeros(200_000, dtype=int)
        out = randomized_response(y, n_classes=c, epsilon=eps, rng=np.random.default_rng(0))
        assert np.mean(out == 0) == pytest.approx(p, abs=0.005)
        if c > 2:  # the other classes are uniform
            counts = np.bincount(out, minlength=c)[1:] / len(y)
            assert np.allclose(counts, other, atol=0.005)


def test_parties_share_one_probe_direction_set():
    a = probe_directions(4, 3, seed=7)
    assert torch.equal(a, probe_directions(4, 3, seed=7))
    assert torch.allclose(a.norm(dim=0), torch.ones(3))
    assert torch.equal(probe_directions(1, 2, seed=1), torch.tensor([[-1.0, 1.0]]))


@pytest.mark.parametrize("method", ["ldp-vfl", "afe-vfl", "vafl-dp"])
def test_gaussian_release_once_epsilon_matches_an_independent_gdp_composition(method):
    rec = run_experiment(_spec(method))
    p = rec["privacy"]
    assert p["release_schedule"] == "release-once"
    z = p["sigma"] / p["sensitivity"]  # the one training release
    half = p["bottom_noise_multiplier"] / 2  # noise σ_g·C_g over sensitivity 2·C_g
    mu_train = math.sqrt(1 / z**2 + p["bottom_epochs"] / half**2)
    assert p["train_row_epsilon"] == pytest.approx(_gdp_epsilon(mu_train, 1e-5), rel=1e-3)
    test_mu = p["sensitivity"] / p["sigma_test"]
    assert p["test_row_epsilon"] == pytest.approx(_gdp_epsilon(test_mu, 1e-5), rel=1e-3)
    assert p["epsilon"] == max(p["train_row_epsilon"], p["test_row_epsilon"]) <= 4.0
    # the sample unit holds both parties' releases and the label's randomized response
    assert p["by_unit"]["sample"] > p["by_unit"]["party-row"]
    assert p["label_epsilon"] == 4.0
    assert p["releases_per_row"] == {"train": 1, "test": 1}


def test_pbm_release_once_is_calibrated_and_reports_the_sample_unit():
    """The sample unit composes the label's randomized response (checked against an
    independent RDP sum in tests/test_pbm_release_once.py)."""
    rec = run_experiment(_spec("pbm-vfl", epsilon=8.0, b=16))
    p = rec["privacy"]
    assert p["release_schedule"] == "release-once"
    assert 0.98 * 8.0 <= p["epsilon"] <= 8.0
    assert p["test_row_epsilon"] <= p["epsilon"]
    assert p["by_unit"]["sample"] > p["by_unit"]["party-row"]


def test_release_once_learns_on_breast_at_epsilon_8():
    """Far above the majority class (0.628) where the split schedule sat at it."""
    from dataclasses import replace

    accs = []
    for seed in (3, 4):  # the reproduction mode: the same noise every time (no ε printed)
        spec = replace(_spec("ldp-vfl", epsilon=8.0), seed=seed, reproducible_noise=True)
        accs.append(run_experiment(spec)["metrics"]["accuracy"])
    assert np.mean(accs) > 0.70, accs


def test_active_features_keep_the_label_holders_columns():
    """With its own columns the label holder is party 0: only parties 1..K-1 are accounted,
    and the run is at least the active party alone's order of accuracy."""
    rec = run_experiment(_spec("ldp-vfl", parties=3, epsilon=1.0, active_features=True))
    assert set(rec["privacy"]["per_party"]) == {"1", "2"}
    assert "accuracy_ceiling" not in rec.get("extra", {})
    assert rec["metrics"]["accuracy"] > 0.85


@pytest.mark.parametrize("method", ["ldp-vfl", "vafl-dp", "pbm-vfl"])
def test_k2_label_holder_columns_cost_no_budget(method):
    """K = 2: the label holder's columns go into its own model and only party 1 is accounted;
    its ε and noise are those of one partner's release, the same as with two partners (each
    passive party is calibrated on its own releases: the label holder's columns add nothing)."""
    two = run_experiment(_spec(method, parties=2, epsilon=2.0, active_features=True))
    three = run_experiment(_spec(method, parties=3, epsilon=2.0, active_features=True))
    assert set(two["privacy"]["per_party"]) == {"1"}
    assert 0.98 * 2.0 <= two["privacy"]["epsilon"] <= 2.0
    if method != "pbm-vfl":  # pbm: its secure sum over the senders changes the noise
        assert two["extra"]["sigma"] == pytest.approx(three["extra"]["sigma"], rel=1e-3)
        assert two["privacy"]["epsilon"] == pytest.approx(three["privacy"]["epsilon"], rel=1e-3)
    assert two["metrics"]["accuracy"] > 0.85
    if method == "pbm-vfl":  # a sum of one sender: nothing to mask, and the record says so
        assert two["privacy"]["secure_aggregation"] is False
        assert three["privacy"]["secure_aggregation"] is True


def test_split_schedule_stays_runnable_and_defaults_apply_only_to_release_once():
    rec = run_experiment(_spec("ldp-vfl", release_schedule="split"))
    assert rec["privacy"].get("release_schedule") is None
    assert release_defaults(None, {"epsilon": 1.0, "dataset": "breast"})["embedding_dim"] == 1
    assert release_defaults(None, {"epsilon": 1.0, "release_schedule": "split"}) == {}
    assert release_defaults(None, {}) == {}


@pytest.mark.networked
@pytest.mark.parametrize("method", ["ldp-vfl"])  # pbm-vfl: calibration costs ~25 s a process
def test_release_once_is_identical_in_both_runtimes(method):
    """One OS process per party (MPyC runtime) gives the same models, scores and bytes as
    in-process (the reproduction mode: the same noise in both)."""
    from dataclasses import replace

    from bench.runner import PLUGINS
    from securevfl.experiment import run_in_processes

    # two epochs: the second's batches and noise must match too; the other three add nothing
    spec = replace(_spec(method, epsilon=8.0), epochs=2, reproducible_noise=True, timeout=120)
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["runtime"] == "processes"
    assert net["model_fingerprint"] == local["model_fingerprint"] != {}
    assert net["metrics"] == local["metrics"]
    assert net["comm"]["bytes_total"] == local["comm"]["bytes_total"] > 0


def test_saturated_rows_sit_on_the_edge_of_each_release_bound():
    """Box bound (tanh bottoms): every coordinate at ±1; ball bound (clipped rows): norm C
    (just inside); the direction is kept, so the bound and its sensitivity are unchanged."""
    from securevfl.models.release_shapes import Corners, Sphere
    from securevfl.privacy.afe import clip_rows

    h = torch.tensor([[0.3, -0.01], [0.0, 0.0], [-2.0, 5.0]])
    s = Sphere(2.0)(h)
    assert torch.allclose(s.norm(dim=1), torch.full((3,), 2.0), atol=1e-5)
    assert torch.all(s.norm(dim=1) <= 2.0) and torch.equal(clip_rows(s, 2.0), s)
    assert torch.allclose(s[2] / s[2].norm(), h[2] / h[2].norm())
    assert Corners(1.0)(torch.tensor([[0.2, -0.7, 0.0]])).tolist() == [[1.0, -1.0, 1.0]]


def test_release_shape_is_recorded_and_the_trained_shape_stays_runnable():
    from dataclasses import replace

    recs = {}
    for shape in ("saturate", "as-trained"):
        spec = replace(_spec("vafl-dp", epsilon=8.0, release_shape=shape), seed=3)
        recs[shape] = run_experiment(replace(spec, reproducible_noise=True))
    assert {s: r["privacy"]["release_shape"] for s, r in recs.items()} == {
        "saturate": "saturate",
        "as-trained": "as-trained",
    }
    # the same noise, bottoms and head seed: only what is released differs
    assert recs["saturate"]["metrics"] != recs["as-trained"]["metrics"]
