"""A ``csv:`` run with an ε and no ``--bounds`` releases each party's scaling ranges under a share
of the budget (issue 42, item 5): the release's ε against an independent Gaussian-DP
computation, its sensitivity on neighbouring tables, sane ranges on known data, and a run whose
record has no scaling hole and whose releases compose to its ε."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy.optimize import brentq
from scipy.stats import norm

from securevfl.data.bounds import released_domains
from securevfl.data.custom import schema_of
from securevfl.experiment import run_experiment
from securevfl.privacy.accountant import Accountant
from securevfl.privacy.dp_bounds import (
    MARGIN,
    histograms,
    noise_scale,
    plan_bounds,
    released_ranges,
)
from securevfl.run_options import build_spec
from tests.test_release_composition import headline_epsilon


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ, from δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su)."""

    def gap(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(gap, 0.0, 100.0, xtol=1e-12)


@pytest.mark.parametrize("unit,K", [("party-row", 2), ("sample", 3)])
def test_the_share_and_the_method_compose_to_the_run_epsilon(unit, K):
    eps, delta, share = 2.0, 1e-5, 0.1
    plan = plan_bounds(eps, delta, unit=unit, parties=K, share=share)
    # independently: the run's μ, the bounds' sqrt(share)·μ (K releases for the sample unit)
    mu = brentq(lambda m: gdp_epsilon(m, delta) - eps, 1e-3, 10.0, xtol=1e-12)
    releases = K if unit == "sample" else 1
    assert releases / plan.noise_multiplier**2 == pytest.approx(share * mu**2, rel=1e-6)
    method_mu = math.sqrt(1 - share) * mu
    assert plan.epsilon_method == pytest.approx((1 - MARGIN) * gdp_epsilon(method_mu, delta), 1e-6)
    # the accountant's ε of one party's release is its Gaussian-DP ε
    one = Accountant().compose(dp_event.GaussianDpEvent(plan.noise_multiplier))
    assert one.get_epsilon(delta) == pytest.approx(gdp_epsilon(1 / plan.noise_multiplier, delta))
    # and a Gaussian method at the rest composes with the releases to the run's ε, no more
    acct = Accountant().compose(dp_event.GaussianDpEvent(1 / method_mu))
    acct.compose(dp_event.GaussianDpEvent(plan.noise_multiplier), releases)
    assert acct.get_epsilon(delta) == pytest.approx(eps, rel=1e-6)


def test_a_pure_run_spends_the_share_of_epsilon_by_laplace():
    plan = plan_bounds(4.0, 1e-5, unit="sample", parties=2, share=0.25, pure=True)
    assert plan.mechanism == "laplace" and plan.epsilon_method == pytest.approx(3.0)
    acct = Accountant().compose(dp_event.LaplaceDpEvent(plan.noise_multiplier), 2)
    assert acct.get_epsilon(0.0) == pytest.approx(1.0)  # 2 releases of 0.5 each


def test_one_replaced_row_moves_the_histograms_by_the_stated_sensitivity():
    rng = np.random.default_rng(0)
    X = rng.normal(0, 100, size=(50, 4))
    X[3, 1] = np.nan  # a blank counts nowhere
    other = X.copy()
    other[3] = [1e-6, 7.0, -3e5, 1e15]  # every column's value in another bin (one was blank)
    diff = histograms(other) - histograms(X)
    d = X.shape[1]
    assert np.linalg.norm(diff) <= math.sqrt(2 * d) + 1e-12
    assert np.abs(diff).sum() <= 2 * d
    assert np.linalg.norm(diff) > math.sqrt(2 * d - 1) - 1e-12  # the bound is reached here
    plan = plan_bounds(2.0, 1e-5, unit="party-row", parties=2)
    assert noise_scale(plan, d)[0] == pytest.approx(plan.noise_multiplier * math.sqrt(2 * d))


def test_released_ranges_on_known_data_cover_the_bulk_and_are_finite():
    rng = np.random.default_rng(3)
    n = 1000
    X = np.column_stack(
        [
            rng.normal(50, 10, n),  # income-like
            rng.lognormal(8, 1, n),  # skewed, thousands
            -rng.uniform(0.01, 0.5, n),  # small negatives
            rng.integers(0, 6, n).astype(float),  # counts with zeros
        ]
    )
    plan = plan_bounds(2.0, 1e-5, unit="party-row", parties=2)
    for seed in range(3):
        ranges = released_ranges(X, plan, np.random.default_rng(seed))
        for j, (lo, hi) in enumerate(ranges):
            c = X[:, j]
            assert math.isfinite(lo) and math.isfinite(hi) and lo < hi, (j, lo, hi)
            assert np.mean((c >= lo) & (c <= hi)) >= 0.9, (j, lo, hi)
            assert hi - lo <= 8 * (c.max() - c.min()), (j, lo, hi)  # the grid's factor 2, twice
    # indicator columns keep the public [0, 1]; a regression target is released with the rest
    got, target = released_domains(
        ["a", "b=x", "b_missing"], X[:, :3], plan, np.random.default_rng(0), target=X[:, 3]
    )
    assert got[1] == got[2] == (0.0, 1.0) and got[0][0] < 50 < got[0][1]
    assert target is not None and target[0] <= 1 and target[1] >= 4


@pytest.fixture(scope="module")
def csv_pair(tmp_path_factory):
    rng = np.random.default_rng(1)
    n = 200
    x0, x1 = rng.normal(50, 10, size=(n, 2)), rng.lognormal(3, 1, size=(n, 2))
    y = (x0[:, 0] - 50 + np.log(x1[:, 0]) - 3 > 0).astype(int)
    root = tmp_path_factory.mktemp("dpb")
    p0, p1 = root / "p0.csv", root / "p1.csv"
    np.savetxt(p0, np.column_stack([x0, y]), delimiter=",", header="u,v,label", comments="")
    np.savetxt(p1, x1, delimiter=",", header="w,z", comments="")
    return p0, p1, np.hstack([x0, x1])


def test_a_csv_run_without_bounds_has_no_hole_and_its_releases_compose(csv_pair):
    p0, p1, raw = csv_pair
    name = f"csv:{p0},{p1}"
    base = {"method": "hdp-vfl", "dataset": name, "parties": 2, "epsilon": 4.0}
    base.update(seed=0, epochs=1, bounds_share=0.2)
    p = run_experiment(build_spec(base))["privacy"]
    said = " ".join(p["outside_guarantee"])
    assert "no --bounds" not in said and "min/max" not in said, said
    assert p["public_bounds"].startswith("released under the budget by parties [0, 1]")
    assert p["bounds"]["share"] == 0.2 and p["bounds"]["parties"] == [0, 1]
    z = p["bounds"]["noise_multiplier"]
    mine = [x for x in p["releases"] if x.get("noise_multiplier") == z]
    assert [(x["party"], x["count"]) for x in mine] == [(0, 1), (1, 1), (None, 2)]
    assert p["epsilon"] <= 4.0 + 1e-9 and p["target_epsilon"] == 4.0
    for unit, eps in p["by_unit"].items():  # the record's lines, composed independently
        assert headline_epsilon(p, unit) == pytest.approx(eps, rel=0.03), unit
    # the ranges a saved model scales new rows by are the released ones, not the min/max
    scaling = np.array(schema_of(name)["scaling"])
    exact = np.column_stack([raw.min(axis=0), raw.max(axis=0)])
    assert scaling.shape == exact.shape and not np.allclose(scaling, exact)


def test_a_run_without_epsilon_keeps_the_exact_min_max(csv_pair):
    p0, p1, raw = csv_pair
    name = f"csv:{p0},{p1}"
    rec = run_experiment(build_spec({"method": "vfl", "dataset": name, "seed": 0, "epochs": 1}))
    assert rec["privacy"] is None
    assert np.allclose(schema_of(name)["scaling"], np.column_stack([raw.min(0), raw.max(0)]))


def test_each_party_releases_its_own_file_s_ranges(csv_pair):
    """The own-file path (``securevfl party --data``): each party releases only its own ranges
    with its own generator; a party with --bounds releases nothing."""
    from securevfl.data.bounds import DpRanges
    from securevfl.data.own_csv import OwnFile, open_own_files
    from securevfl.runtime.inprocess import InProcessRuntime

    p0, p1, raw = csv_pair
    plan = plan_bounds(4.0, 1e-5, unit="party-row", parties=2, seed=0)
    bounds = p1.parent / "b1.csv"
    bounds.write_text("column,lo,hi\nw,0,100\nz,0,100\n")
    files = {
        0: OwnFile(str(p0), dp=DpRanges(plan, np.random.default_rng(0))),
        1: OwnFile(str(p1), bounds=str(bounds), dp=DpRanges(plan, np.random.default_rng(1))),
    }
    own = open_own_files(InProcessRuntime(2), files, id_column=None, data_parties=2)
    assert own[0].public()["dp_bounds"] and not own[0].fitted
    assert not own[1].public()["dp_bounds"] and own[1].scaling == [[0.0, 100.0]] * 2
    for (lo, hi), c in zip(own[0].scaling, raw[:, :2].T, strict=True):
        assert lo < np.median(c) < hi and np.mean((c >= lo) & (c <= hi)) >= 0.9


def test_lucky_draws_beside_a_large_bulk_do_not_stretch_a_range():
    """With many rows the noise is small beside the bulk: a run of bins whose draws each beat
    the noise's deviation joins the scan's interval, and the 1 % tail trim takes it off."""
    from securevfl.privacy.dp_bounds import CENTRE, GRID_EDGES, bulk_interval

    sd, rows = 5.0, 10_000
    noisy = np.zeros(len(GRID_EDGES) - 1)
    noisy[CENTRE + 13 : CENTRE + 15] = rows / 2  # the bulk: [1, 4)
    noisy[CENTRE + 15 : CENTRE + 19] = 1.5 * sd  # lucky draws past it: [4, 64)
    assert bulk_interval(noisy, sd, rows) == (1.0, 4.0)
    assert bulk_interval(noisy, sd, 100)[1] == 64.0  # few rows: such bins may be real
