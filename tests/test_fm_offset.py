"""fm-vfl's residual mode (``--offset gbdt``, securevfl/methods/fm_offset.py): the bound for
offsets in (0, 1), the partner's party-row ε against an independent PLD composition, and one
small run (what it records, what it refuses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

import securevfl
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment, validate_spec
from securevfl.methods.fm_offset import residual_vector, step_gain
from securevfl.model.evaluation import metrics_for
from securevfl.model.files import classes_digest
from securevfl.privacy.fm_gaussian import clip_l2, gaussian_sensitivity


def _phi(x: np.ndarray, v: float) -> np.ndarray:
    """One row's coefficients (first order v x_a, diagonal x_a²/8, off-diagonal x_a x_b/4)."""
    iu = np.triu_indices(len(x), 1)
    return np.concatenate([v * x, np.square(x) / 8, (np.outer(x, x) / 4)[iu]])


def test_the_residual_bound_holds_for_offsets_anywhere():
    """Rows of L2 norm <= R (a constant 1 and a partner's block) and v = σ(m) - y anywhere in
    (-1, 1): every replaced row moves the vector by at most Δ₂ with label_bound 1, while the
    joint mode's bound (v_max 1/2) would be exceeded."""
    rng = np.random.default_rng(0)
    R = math.sqrt(2.0)  # the constant column and one partner at l2 bound 1
    bound = gaussian_sensitivity("logistic", R, label_bound=1.0)
    n = 2000
    X = np.hstack([np.ones((2 * n, 1)), clip_l2(rng.uniform(-1, 1, (2 * n, 4)) * 3, 1.0)])
    v = residual_vector(rng.normal(0, 8, 2 * n), rng.integers(0, 2, 2 * n))
    phi = np.array([_phi(X[i], v[i]) for i in range(2 * n)])
    worst = float(np.linalg.norm(phi[:n] - phi[n:], axis=1).max())
    assert worst <= bound
    assert worst > gaussian_sensitivity("logistic", R)  # the joint mode's v_max = 1/2 is too small


def test_step_gain_is_the_mean_curvature_ratio():
    m = np.array([0.0, 0.0])
    assert step_gain(m) == pytest.approx(1.0)  # σ(0)(1 - σ(0)) = 1/4
    m = np.array([2.0, -3.0])
    p = 1 / (1 + np.exp(-m))
    assert step_gain(m) == pytest.approx(0.25 / np.mean(p * (1 - p)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    spec = RunSpec(
        method="fm-vfl",
        dataset="breast",
        parties=2,
        seed=0,
        epsilon=4.0,
        delta=1e-5,
        options={"offset": "gbdt"},  # no centring: the σ is the analytic Gaussian's alone
    )
    out = tmp_path_factory.mktemp("fm-offset") / "model"
    return run_experiment(spec, save=str(out)), out


@pytest.fixture(scope="module")
def record(trained):
    return trained[0]


def test_residual_run_records_the_partners_party_row_epsilon(record):
    priv = record["privacy"]
    assert priv["unit"] == "party-row"
    assert set(priv["by_unit"]) == {"party-row"}  # no sample-unit figure is claimed
    assert list(priv["per_party"]) in (["1"], [1])  # the label holder's rows: no ε
    assert any("--offset gbdt" in line for line in priv["outside_guarantee"])
    assert priv["offset"] == "gbdt" and priv["label_bound"] == 1.0
    # independent: the one Gaussian release (σ, Δ₂) in dp_accounting's PLD
    acct = pld_privacy_accountant.PLDAccountant()
    acct.compose(dp_event.GaussianDpEvent(priv["sigma"] / priv["l2_sensitivity"]))
    assert priv["epsilon"] == pytest.approx(acct.get_epsilon(1e-5), rel=0.01)
    assert priv["epsilon"] <= 4.0 + 1e-9
    bound = gaussian_sensitivity("logistic", math.sqrt(2), label_bound=1.0)
    assert priv["l2_sensitivity"] == pytest.approx(bound)
    assert record["extra"]["offset"] == "gbdt"
    assert record["metrics"]["accuracy"] > 0.85  # the label holder's trees alone reach ~0.9


def test_saved_residual_model_predicts_the_training_runs_scores(trained):
    """The label holder's trees saved as plain arrays (no pickle), reloaded and walked by numpy:
    the test split's scores equal the training run's (classes digest and metrics)."""
    record, out = trained
    model = securevfl.load_model(out)
    scores, y = model.predict_test_split()
    assert classes_digest(model.task, scores) == model.card["test_classes_sha256"]
    assert metrics_for(model.task, y, scores) == pytest.approx(record["metrics"], abs=1e-12)
    head = model.parts[0]
    assert head.arrays["own_trees_leaf"].dtype == np.uint8  # numbers only, no object arrays


def test_tree_arrays_score_as_scikit_learn_does():
    """Exported nodes walked by numpy give scikit-learn's raw margins exactly, blanks included;
    a child pointing back to its parent is refused (a walk must end)."""
    from securevfl.models.tree_arrays import PREFIX, tree_margins, trees_to_arrays
    from securevfl.models.trees import fit_trees

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = (X[:, 0] + X[:, 1] ** 2 > 1).astype(int)
    X[rng.random(X.shape) < 0.05] = np.nan
    model = fit_trees(X, y, "binary", 0)
    arrays = trees_to_arrays(model)
    Xt = rng.normal(size=(200, 4))
    Xt[rng.random(Xt.shape) < 0.05] = np.nan
    assert np.array_equal(tree_margins(arrays, Xt), model.decision_function(Xt))
    bad = dict(arrays)
    inner = int(np.flatnonzero(bad[PREFIX + "leaf"] == 0)[0])
    bad[PREFIX + "left"] = bad[PREFIX + "left"].copy()
    bad[PREFIX + "left"][inner] = inner
    with pytest.raises(ValueError, match="children must follow"):
        tree_margins(bad, Xt)


def test_residual_mode_refusals():
    base = dict(method="fm-vfl", dataset="breast", parties=2, epsilon=4.0, delta=1e-5)
    with pytest.raises(ConfigError, match="--offset gbdt needs --mechanism gaussian"):
        validate_spec(RunSpec(**base, options={"offset": "gbdt", "mechanism": "laplace"}))
    with pytest.raises(ConfigError, match="--offset gbdt needs a binary dataset"):
        run_experiment(
            RunSpec(**{**base, "dataset": "diabetes"}, options={"offset": "gbdt"}), save=None
        )


def test_saved_label_holder_trees_predict_the_training_runs_scores(tmp_path):
    """``local --model gbdt`` saves (so does the floor ``--model best`` when it picks the
    trees: the same ``fit_one``); the reloaded model's test scores give the run's metrics."""
    spec = RunSpec(method="local", dataset="breast", parties=2, seed=0, model="gbdt")
    record = run_experiment(spec, save=str(tmp_path / "m"))
    loaded = securevfl.load_model(tmp_path / "m")
    scores, y = loaded.predict_test_split()
    assert classes_digest(loaded.task, scores) == loaded.card["test_classes_sha256"]
    assert metrics_for(loaded.task, y, scores) == pytest.approx(record["metrics"], abs=1e-12)
