"""Issue 25: the pooled DP references stay above the majority class (the sign flips' fixes),
fm-central's L1 bound, dpsgd-c's averaged iterates, and czofo-vfl's presets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from baselines.fm_central import clip_l1, resolve_l1_bound
from securevfl.errors import ConfigError
from securevfl.experiment import build_views, run_experiment
from securevfl.privacy.functional import block_sensitivities
from securevfl.registry import lookup
from securevfl.run_options import build_spec

# adult and phishing subsampled to keep the test in seconds (docs/references.md: full adult)
SIZES = {"breast": None, "phishing": 1500, "adult": 3000}


def _params(method: str, dataset: str, seed: int, eps: float, **kw) -> dict:
    p = dict(method=method, dataset=dataset, parties=2, seed=seed, epsilon=eps, delta=1e-5, **kw)
    if SIZES[dataset]:
        p["n"] = SIZES[dataset]
    return p


def _majority(params: dict) -> float:
    spec = build_spec(params)
    _, _, pooled = build_views(spec, lookup("method", spec.method)(), [0])
    y = pooled()[3]
    return float(np.unique(y, return_counts=True)[1].max() / len(y))


@pytest.mark.parametrize("method", ["dpsgd-c", "fm-central"])
@pytest.mark.parametrize("dataset", sorted(SIZES))
def test_no_dp_reference_falls_below_the_majority_class(method, dataset):
    """Mean of seeds 0-2 at ε 1, 2, 4, 8 within 1 point of the majority class or above, with
    the noise drawn from the seeds (the reproduction mode): with fresh CSPRNG noise the outcome
    is random. With Lemma 1's Laplace, fm-central on breast at ε = 1 flipped sign in about 1 run
    of 30 (0.37); with the Gaussian mechanism (the default since issue 25) 0 of 30 runs fell
    below the majority at ε = 1 and at ε = 2 (means 0.730, 0.864), and 1 of 12 more at ε = 2
    (0.540), measured 2026-11-26."""
    seeds = (0, 1, 2)
    # the majority class of each seed's test rows: the split depends on the seed, not on ε
    majs = [_majority(_params(method, dataset, seed, 1.0)) for seed in seeds]
    for eps in (1.0, 2.0, 4.0, 8.0):
        accs = []
        for seed in seeds:
            p = _params(method, dataset, seed, eps, reproducible_noise=True)
            accs.append(run_experiment(build_spec(p))["metrics"]["accuracy"])
        assert np.mean(accs) >= np.mean(majs) - 0.01, (eps, accs, majs)


def test_fm_central_l1_bound_sets_the_sensitivity():
    assert resolve_l1_bound("box", 30, True) == 31.0  # the paper's B = d
    assert resolve_l1_bound("auto", 30, True) == pytest.approx(1 + 2 * math.sqrt(30))
    assert resolve_l1_bound("auto", 3, False) == 3.0  # never above the box's corner
    with pytest.raises(ConfigError, match="l1_bound"):
        resolve_l1_bound(0.5, 30, True)
    X = np.random.default_rng(0).uniform(-1, 1, size=(50, 30))
    C = clip_l1(X, 5.0)
    assert np.abs(C).sum(1).max() <= 5.0 + 1e-9
    small = np.abs(X).sum(1) <= 5.0
    assert np.array_equal(C[small], X[small])  # rows inside the bound are untouched
    lap = {"mechanism": "laplace"}  # Lemma 1's bounds (the default is the Gaussian since issue 25)
    rec = run_experiment(build_spec(_params("fm-central", "breast", 0, 1.0, **lap)))
    p = rec["privacy"]
    B = p["l1_bound"]
    assert p["delta_f"] == pytest.approx(sum(block_sensitivities("logistic", [B]).values()))
    box = run_experiment(build_spec(_params("fm-central", "breast", 0, 1.0, l1_bound="box", **lap)))
    assert box["privacy"]["delta_f"] == pytest.approx(31 + 31**2 / 4)  # Lemma 1 at B = d
    assert p["epsilon"] == pytest.approx(1.0) == box["privacy"]["epsilon"]


def test_dpsgd_c_averaging_spends_nothing():
    a = run_experiment(build_spec(_params("dpsgd-c", "breast", 0, 1.0)))
    b = run_experiment(build_spec(_params("dpsgd-c", "breast", 0, 1.0, average=False)))
    assert a["privacy"]["epsilon"] == b["privacy"]["epsilon"] == pytest.approx(1.0)
    assert a["privacy"]["releases"] == b["privacy"]["releases"]
    # fingerprints are gathered only in the reproduction mode (no ε then)
    ra = run_experiment(
        build_spec({**_params("dpsgd-c", "breast", 0, 1.0), "reproducible_noise": True})
    )
    rb = run_experiment(
        build_spec(
            {**_params("dpsgd-c", "breast", 0, 1.0, average=False), "reproducible_noise": True}
        )
    )
    assert ra["model_fingerprint"] != rb["model_fingerprint"] != {}


def test_czofo_presets():
    tuned = build_spec({"method": "czofo-vfl", "dataset": "digits"})
    assert (tuned.epochs, tuned.option("q", lookup("method", "czofo-vfl"))) == (30, 50)
    paper = build_spec({"method": "czofo-vfl", "dataset": "digits", "preset": "paper"})
    assert (paper.epochs, paper.option("q", lookup("method", "czofo-vfl"))) == (10, 10)
    mine = build_spec({"method": "czofo-vfl", "q": 7, "epochs": 3})
    assert (mine.epochs, mine.option("q", lookup("method", "czofo-vfl"))) == (3, 7)


@pytest.mark.slow
def test_czofo_defaults_come_within_5_points_of_split_learning_on_digits():
    czofo = run_experiment(build_spec({"method": "czofo-vfl", "dataset": "digits", "seed": 0}))
    vfl = run_experiment(
        build_spec({"method": "vfl", "model": "mlp", "dataset": "digits", "seed": 0})
    )
    assert czofo["extra"]["preset"] == "tuned"
    assert czofo["metrics"]["accuracy"] >= vfl["metrics"]["accuracy"] - 0.05
