"""--center: numeric columns centred per party, row-norm bound kept."""

import numpy as np

from securevfl.context import RunSpec
from securevfl.experiment import build_views, validate_spec


def _views(dataset: str, center: bool):
    spec = RunSpec(method="vfl", dataset=dataset, parties=3, seed=0, center=center)
    method = validate_spec(spec)
    return build_views(spec, method, [0, 1, 2])


def test_centering_keeps_the_row_norm_bound_and_zero_means():
    for dataset in ("breast", "adult"):
        info, views, _ = _views(dataset, True)
        for split in ("X_train", "X_test"):
            X = np.hstack([getattr(views[k], split) for k in range(3)])
            assert np.linalg.norm(X, axis=1).max() <= 1 + 1e-12
        if dataset == "breast":  # all numeric: every training column has mean 0
            X = np.hstack([views[k].X_train for k in range(3)])
            np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-12)


def test_one_hot_columns_are_left_alone():
    info, plain, _ = _views("adult", False)
    _, cent, _ = _views("adult", True)
    X0 = np.hstack([plain[k].X_train for k in range(3)])
    X1 = np.hstack([cent[k].X_train for k in range(3)])
    unscaled = np.round(X0 * np.sqrt(info.row_norm_bound_sq), 12)
    binary = np.all(np.isin(unscaled, [0.0, 1.0]), axis=0)  # the one-hot columns
    changed = ~np.all(np.isclose(X0, X1), axis=0)
    assert binary.sum() > 50 and changed.any()
    assert not (changed & binary).any()


def test_dp_records_account_the_centring_and_disclose_no_data_dependent_preprocessing():
    from securevfl.experiment import run_experiment
    from securevfl.privacy.centring import CENTRE_SHARE

    spec = RunSpec(
        method="hdp-vfl", dataset="breast", parties=2, seed=0, epochs=1, epsilon=4, center=True
    )
    rec = run_experiment(spec)
    said = " ".join(rec["privacy"]["outside_guarantee"])
    assert "min/max" not in said and "means" not in said
    # the released means are composed in: the method ran at (1 - share) ε, the record adds it
    c = rec["privacy"]["centring"]
    assert c["epsilon_per_party"] == CENTRE_SHARE * 4
    assert abs(rec["privacy"]["epsilon"] - 4.0) < 0.02 and rec["privacy"]["target_epsilon"] == 4
    plain = run_experiment(RunSpec(method="vfl", dataset="breast", parties=2, seed=0, epochs=1))
    assert plain["privacy"] is None
