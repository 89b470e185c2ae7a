"""HDP-VFL sensitivities (Lemmas 3, 4) against hand-computed values, and its accountant."""

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from securevfl.errors import ConfigError
from securevfl.privacy.accountants import GaussianStreamAccountant
from securevfl.privacy.events import GaussianEvent
from securevfl.privacy.hdp_sensitivity import (
    active_sensitivity,
    check_lr,
    passive_sensitivity,
    weight_drift,
)

# T = 10 iterations, e = 2 epochs, b = 5, eta = 0.5, L = 1, k = 1 (logistic constants for A)
CASE = dict(iterations=10, epochs=2, batch_size=5, lr=0.5, L=1.0, k=1.0)


def test_weight_drift_by_hand():
    # 2 e eta L / b = 2 * 2 * 0.5 * 1 / 5
    assert weight_drift(epochs=2, lr=0.5, L=1.0, min_batch=5) == pytest.approx(0.4)


def test_passive_sensitivity_by_hand():
    # 4 T e^2 eta^2 L^2 / b = 4*10*4*0.25/5 = 8;  8 k e^2 eta L / b = 8*4*0.5/5 = 3.2;
    # 4 k^2 e = 8  ->  Delta_B^2 = 19.2
    assert passive_sensitivity(**CASE) == pytest.approx(math.sqrt(19.2), rel=1e-12)


def test_active_sensitivity_by_hand():
    # beta_theta = 0.25, beta_y = 0.5, k_y = 1:
    # 4 bt^2 L^2 T e^2 eta^2 / b = 4*0.0625*10*4*0.25/5 = 0.5
    # 8 (bt k + by ky) bt L e^2 eta / b = 8*0.75*0.25*4*0.5/5 = 0.6
    # 4 (bt k + by ky)^2 e = 4*0.5625*2 = 4.5   ->  Delta_A^2 = 5.6
    got = active_sensitivity(**CASE, beta_theta=0.25, beta_y=0.5, k_y=1.0)
    assert got == pytest.approx(math.sqrt(5.6), rel=1e-12)


def test_short_last_batch_only_increases_sensitivity():
    # 23 rows in batches of 5: r = 5, last batch 3 rows, T = 2 * 5
    equal = passive_sensitivity(**CASE)
    short = passive_sensitivity(**CASE, min_batch=3, rows_per_epoch=23)
    dw = 2 * 2 * 0.5 / 3
    assert short == pytest.approx(math.sqrt(23 * 2 * dw**2 + 2 * (4 * dw + 4)), rel=1e-12)
    assert short > equal


def test_lr_rule():
    check_lr(7.9, beta_theta=0.25, lam=0.0)
    with pytest.raises(ConfigError, match="lr must be <="):
        check_lr(8.1, beta_theta=0.25, lam=0.0)


def test_classic_accountant_is_the_closed_form():
    d_b = math.sqrt(19.2)
    acct = GaussianStreamAccountant("classic")
    acct.compose(GaussianEvent(sigma=3.0, sensitivity=d_b, party=1))
    delta = 1e-5
    expected = math.sqrt(2 * math.log(1.25 / delta)) * d_b / 3.0
    assert acct.get_epsilon(delta, 1) == pytest.approx(expected, rel=1e-12)
    rep = acct.report(delta)
    assert rep.accountant == "gaussian-stream-classic" and "warning" in rep.extra  # eps >= 1


def test_analytic_accountant_composes_like_dp_accounting():
    acct = GaussianStreamAccountant("analytic")
    acct.compose(GaussianEvent(sigma=4.0, sensitivity=1.5, party=0))
    acct.compose(GaussianEvent(sigma=6.0, sensitivity=2.0, party=0, count=2))
    acct.compose(GaussianEvent(sigma=9.0, sensitivity=1.0, party=1))
    ref = pld.from_gaussian_mechanism(4.0, sensitivity=1.5, value_discretization_interval=1e-4)
    for _ in range(2):
        step = pld.from_gaussian_mechanism(6.0, sensitivity=2.0, value_discretization_interval=1e-4)
        ref = ref.compose(step, tail_mass_truncation=1e-15)
    got = acct.get_epsilon(1e-5, 0)
    assert ref.get_epsilon_for_delta(1e-5) == pytest.approx(got, rel=5e-3)
    assert acct.get_epsilon(1e-5) == got  # max over parties: party 0 has the most releases
    rep = acct.report(1e-5)
    assert rep.extra["jdp_weights"] == {"0": got, "1": acct.get_epsilon(1e-5, 1)}


def test_accountant_rejects_bad_events():
    acct = GaussianStreamAccountant()
    with pytest.raises(ConfigError, match="party"):
        acct.compose(GaussianEvent(sigma=1.0, sensitivity=1.0))
    with pytest.raises(ConfigError, match="calibration"):
        GaussianStreamAccountant("laplace")
