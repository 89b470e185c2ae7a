"""fm-vfl ``--offset dp-gbdt`` (securevfl/methods/fm_dp_offset.py, securevfl/models/dp_trees.py):
the trees' release sensitivity by brute force over neighbouring rows, their routing against the
saved arrays' walk, the run's sample-unit ε against the Gaussian-DP closed form, one small run
(what it records, what it refuses) and the saved model's round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

import securevfl
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment, validate_spec
from securevfl.methods.fm_offset import LABEL_HOLDER_OUTSIDE
from securevfl.model.evaluation import metrics_for
from securevfl.model.files import classes_digest
from securevfl.models.dp_trees import (
    DpTreesConfig,
    fit_dp_trees,
    normalised_sums,
    release_sensitivity,
    thresholds,
    tree_releases,
)
from securevfl.models.tree_arrays import tree_margins


def _pairs(p: np.ndarray, y: int) -> tuple[np.ndarray, np.ndarray]:
    return p - y, p * (1 - p)


def test_a_replaced_row_moves_the_leaf_sums_by_at_most_two():
    """Brute force over the replaced row's old and new (margin, label, slot) on a fixed
    background of rows: the normalised (G, H / C_h) vector moves by at most Δ = 2, and the
    worst case comes close to it (the bound is not loose)."""
    rng = np.random.default_rng(0)
    slots = 3
    rest_slot = rng.integers(0, slots, 5)
    rest_g, rest_h = _pairs(rng.uniform(0, 1, 5), 1)
    grid = np.linspace(0.0, 1.0, 201)
    vectors = [
        normalised_sums(np.append(rest_slot, a), np.append(rest_g, g), np.append(rest_h, h), slots)
        for y in (0, 1)
        for a in range(slots)
        for g, h in zip(*_pairs(grid, y), strict=True)
    ]
    v = np.stack([x.ravel() for x in vectors])  # every (label, slot, margin) of the row
    sq = (v**2).sum(1)
    worst = float(np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * v @ v.T, 0)).max())
    assert worst <= release_sensitivity(None) + 1e-12
    assert worst > 1.99  # p -> 1 with y = 0 replaced by p -> 0 with y = 1, one slot


def test_a_histogram_level_moves_by_at_most_two_root_d():
    """A row is in one bin of every column of its node: d columns at Δ = 2 each, in L2."""
    d, slots_per_col = 3, 4
    worst = 0.0
    for p_old in np.linspace(0, 1, 21):
        for p_new in np.linspace(0, 1, 21):
            for y_old, y_new in ((0, 1), (1, 0), (0, 0)):
                for bins_old, bins_new in (([0, 1, 2], [3, 2, 1]), ([1, 1, 1], [1, 1, 1])):
                    idx_old = np.arange(d) * slots_per_col + np.array(bins_old)
                    idx_new = np.arange(d) * slots_per_col + np.array(bins_new)
                    go, ho = _pairs(np.array([p_old]), y_old)
                    gn, hn = _pairs(np.array([p_new]), y_new)
                    o = normalised_sums(idx_old[None, :], go, ho, d * slots_per_col)
                    n = normalised_sums(idx_new[None, :], gn, hn, d * slots_per_col)
                    worst = max(worst, float(np.linalg.norm(o - n)))
    assert worst <= release_sensitivity(d) + 1e-12
    assert release_sensitivity(d) == pytest.approx(2 * math.sqrt(d))


@pytest.mark.parametrize("splits", ["random", "greedy"])
def test_trained_margins_are_the_saved_arrays_walk(splits):
    """Rows on the public edges included: the margins the fit trained with are those the
    saved arrays give (``x <= threshold`` left, in training and in scoring), and the fit lists
    the releases the ledger composes."""
    rng = np.random.default_rng(1)
    bound_sq = 4.0
    edges = thresholds(8, bound_sq)
    X = rng.uniform(-0.5, 0.5, (300, 3))
    X[:40, 0] = rng.choice(edges, 40)  # values exactly on an edge
    y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
    cfg = DpTreesConfig(trees=5, depth=3, bins=8, splits=splits)
    fit = fit_dp_trees(
        X,
        y,
        cfg,
        mu_per_tree=1.0,
        bound_sq=bound_sq,
        noise_rng=np.random.default_rng(2),
        split_rng=np.random.default_rng(3),
    )
    assert np.allclose(tree_margins(fit.arrays, X), fit.margins, atol=1e-12)
    assert fit.releases == tree_releases(cfg, 1.0, 3)
    assert 0.01 <= fit.mean_hessian <= 0.25
    assert np.mean((fit.margins > 0) == y) > 0.7  # little noise (μ = 1 per tree): it learns


def _gdp_epsilon(mu: float, delta: float) -> float:
    """ε(δ) of μ-Gaussian DP (Dong, Roth & Su: δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2))."""

    def delta_of(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    return brentq(lambda e: delta_of(e) - delta, 0.0, 200.0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    spec = RunSpec(
        method="fm-vfl",
        dataset="breast",
        parties=2,
        seed=0,
        epsilon=4.0,
        delta=1e-5,
        options={"offset": "dp-gbdt", "offset_share": 0.4},  # no centring: Gaussians only
    )
    out = tmp_path_factory.mktemp("fm-dp-offset") / "model"
    return run_experiment(spec, save=str(out)), out


def test_dp_offset_run_is_in_the_sample_unit(trained):
    """Unit sample, the label holder's rows inside the guarantee; ε recomputed independently
    from the recorded σs: the trees' T releases and the objective compose to one Gaussian of
    μ² = T (Δ_t/σ_t)² + (Δ₂/σ)², whose ε(δ) is the closed form's; the trees took the share."""
    priv = trained[0]["privacy"]
    assert priv["unit"] == "sample" and priv["offset"] == "dp-gbdt"
    assert LABEL_HOLDER_OUTSIDE not in priv["outside_guarantee"]
    assert not any("--offset" in line for line in priv["outside_guarantee"])
    trees = priv["offset_trees"]["releases"]
    mu_trees_sq = sum(r["count"] * (r["sensitivity"] / r["sigma"]) ** 2 for r in trees)
    mu_obj_sq = (priv["l2_sensitivity"] / priv["sigma"]) ** 2
    assert mu_trees_sq / (mu_trees_sq + mu_obj_sq) == pytest.approx(0.4)
    eps = _gdp_epsilon(math.sqrt(mu_trees_sq + mu_obj_sq), 1e-5)
    assert priv["epsilon"] == pytest.approx(eps, rel=0.01)
    assert priv["epsilon"] <= 4.0 + 1e-9
    assert set(priv["per_party"]) <= {0, 1, "0", "1"} and len(priv["per_party"]) == 2
    assert trained[0]["metrics"]["accuracy"] > 0.85


def test_saved_dp_offset_model_predicts_the_training_runs_scores(trained):
    record, out = trained
    model = securevfl.load_model(out)
    scores, y = model.predict_test_split()
    assert classes_digest(model.task, scores) == model.card["test_classes_sha256"]
    assert metrics_for(model.task, y, scores) == pytest.approx(record["metrics"], abs=1e-12)


def test_dp_offset_refusals():
    base = dict(method="fm-vfl", dataset="breast", parties=2, epsilon=4.0, delta=1e-5)
    with pytest.raises(ConfigError, match="--offset dp-gbdt needs --mechanism gaussian"):
        validate_spec(RunSpec(**base, options={"offset": "dp-gbdt", "mechanism": "laplace"}))
    with pytest.raises(ConfigError, match="--offset-share .* applies with --offset dp-gbdt"):
        validate_spec(RunSpec(**base, options={"offset": "gbdt", "offset_share": 0.3}))
    with pytest.raises(ConfigError, match="offset.share"):
        validate_spec(RunSpec(**base, options={"offset": "dp-gbdt", "offset_share": 1.0}))
    with pytest.raises(ConfigError, match="--offset dp-gbdt needs a binary dataset"):
        run_experiment(
            RunSpec(**{**base, "dataset": "diabetes"}, options={"offset": "dp-gbdt"}), save=None
        )


def test_dp_ledger_with_means_matches_an_independent_pld():
    """The ledger (the project's accountant) against dp_accounting's PLD built here: the T tree
    releases and the objective as separate Gaussians, each party's means as a pure ε_c."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    from securevfl.methods.fm_dp_offset import dp_ledger

    trees, sigma_t, sigma, sens2, eps_c = 5, 9.0, 3.0, 2.9, 0.5
    ledger = dp_ledger((sigma, sens2), [(sigma_t, 2.0, trees)], 2, eps_c)
    step = 1e-3
    acc = pld.from_gaussian_mechanism(
        sigma_t / 2.0, value_discretization_interval=step
    ).self_compose(trees)
    acc = acc.compose(
        pld.from_gaussian_mechanism(sigma / sens2, value_discretization_interval=step)
    )
    pure = pld.from_privacy_parameters(
        pld.common.DifferentialPrivacyParameters(eps_c, 0.0), value_discretization_interval=step
    )
    acc = acc.compose(pure).compose(pure)
    assert ledger.epsilon(1e-5) == pytest.approx(acc.get_epsilon_for_delta(1e-5), rel=0.01)
    assert ledger.unit == "sample"
    assert ledger.epsilon(1e-5, party=1) < ledger.epsilon(1e-5, party=0)  # no trees at party 1
