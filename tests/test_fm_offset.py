"""fm-vfl's residual mode (``--offset gbdt``, securevfl/methods/fm_offset.py): the bound for
offsets in (0, 1), the partner's party-row ε against an independent PLD composition, and one
small run (what it records, what it refuses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment, validate_spec
from securevfl.methods.fm_offset import residual_vector, step_gain
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
def record():
    spec = RunSpec(
        method="fm-vfl",
        dataset="breast",
        parties=2,
        seed=0,
        epsilon=4.0,
        delta=1e-5,
        options={"offset": "gbdt"},  # no centring: the σ is the analytic Gaussian's alone
    )
    return run_experiment(spec)


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


def test_residual_mode_refusals(tmp_path):
    base = dict(method="fm-vfl", dataset="breast", parties=2, epsilon=4.0, delta=1e-5)
    with pytest.raises(ConfigError, match="--offset gbdt needs --mechanism gaussian"):
        validate_spec(RunSpec(**base, options={"offset": "gbdt", "mechanism": "laplace"}))
    with pytest.raises(ConfigError, match="trees are not saved yet"):
        run_experiment(RunSpec(**base, options={"offset": "gbdt"}), save=str(tmp_path / "m"))
    with pytest.raises(ConfigError, match="--offset gbdt needs a binary dataset"):
        run_experiment(
            RunSpec(**{**base, "dataset": "diabetes"}, options={"offset": "gbdt"}), save=None
        )
