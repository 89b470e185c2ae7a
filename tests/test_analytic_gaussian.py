"""Analytic Gaussian mechanism against dp_accounting's PLD and the classic calibration."""

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given, settings
from hypothesis import strategies as st

from securevfl.errors import ConfigError
from securevfl.privacy.analytic_gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
)
from securevfl.privacy.mechanisms import classic_gaussian_sigma


@pytest.mark.parametrize("sigma,sens", [(0.7, 1.0), (2.0, 1.0), (5.0, 3.0), (40.0, 2.0)])
def test_epsilon_matches_dp_accounting_pld(sigma, sens):
    delta = 1e-5
    ours = analytic_gaussian_epsilon(sigma=sigma, delta=delta, sensitivity=sens)
    ref = pld.from_gaussian_mechanism(sigma, sensitivity=sens, value_discretization_interval=1e-4)
    theirs = ref.get_epsilon_for_delta(delta)
    # the PLD is a pessimistic discretisation: slightly above the exact value, never below
    assert theirs >= ours - 1e-9
    assert theirs == pytest.approx(ours, rel=5e-3, abs=1e-3)


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 10.0, 1000.0])
def test_sigma_is_the_smallest_satisfying_the_exact_condition(eps):
    delta = 1e-5
    s = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=2.0)
    assert analytic_gaussian_delta(sigma=s, epsilon=eps, sensitivity=2.0) <= delta
    assert analytic_gaussian_delta(sigma=s * (1 - 1e-6), epsilon=eps, sensitivity=2.0) > delta
    # and the inverse gives back eps
    assert analytic_gaussian_epsilon(sigma=s, delta=delta, sensitivity=2.0) == pytest.approx(
        eps, rel=1e-8
    )


def test_known_value_balle_wang():
    # eps = 1, delta = 1e-5, sensitivity 1: classic needs 4.84; analytic about 3.73
    assert classic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0) == pytest.approx(
        math.sqrt(2 * math.log(1.25e5)), rel=1e-12
    )
    assert analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0) == pytest.approx(
        3.7306, abs=1e-3
    )


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(1e-3, 0.999), log_delta=st.floats(-12, -1), sens=st.floats(0.01, 100))
def test_analytic_never_needs_more_noise_than_classic(eps, log_delta, sens):
    delta = 10.0**log_delta
    a = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
    c = classic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
    assert a <= c * (1 + 1e-9)


def test_bad_inputs_raise_config_error():
    with pytest.raises(ConfigError, match="delta"):
        analytic_gaussian_sigma(epsilon=1.0, delta=1.5, sensitivity=1.0)
    with pytest.raises(ConfigError, match="epsilon"):
        analytic_gaussian_sigma(epsilon=-1.0, delta=1e-5, sensitivity=1.0)
    with pytest.raises(ConfigError, match="sigma"):
        analytic_gaussian_epsilon(sigma=0.0, delta=1e-5, sensitivity=1.0)
