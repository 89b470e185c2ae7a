"""Appendix D losses and penalties: derivatives, declared constants, label domains, proxes."""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from securevfl.errors import ConfigError
from securevfl.models import glm_family, make_loss, make_penalty

assert glm_family  # importing it registers the family

FAMILY = ["logistic", "svm", "least-squares-bounded", "poisson", "gamma"]
LABELS = {
    "logistic": np.array([-1.0, 1.0]),
    "svm": np.array([-1.0, 1.0]),
    "least-squares-bounded": np.linspace(-1.0, 1.0, 9),
    "poisson": np.arange(0.0, 11.0),
    "gamma": np.linspace(0.05, 5.0, 12),
}
THETA = np.linspace(-6.0, 6.0, 2401)


@pytest.mark.parametrize("name", FAMILY)
def test_derivative_is_the_gradient_of_value(name):
    loss = make_loss(name)
    for y in LABELS[name]:
        yv = np.full_like(THETA, y)
        h = 1e-6
        num = (loss.value(THETA + h, yv) - loss.value(THETA - h, yv)) / (2 * h)
        # away from the clipping kinks the central difference is exact to ~1e-6
        np.testing.assert_allclose(num, loss.derivative(THETA, yv), atol=1e-4)


@pytest.mark.parametrize("name", FAMILY)
def test_declared_constants_hold_on_every_theta(name):
    loss = make_loss(name)
    ys = LABELS[name]
    d = np.array([loss.derivative(THETA, np.full_like(THETA, y)) for y in ys])
    assert np.max(np.abs(d)) <= loss.L + 1e-9  # |h| <= L
    slope = np.max(np.abs(np.diff(d, axis=1)) / np.diff(THETA))
    assert slope <= loss.beta_theta + 1e-6  # h is β_θ-Lipschitz in θ
    jump = np.max(d, axis=0) - np.min(d, axis=0)
    assert np.max(jump) <= 2 * loss.beta_y * loss.k_y + 1e-9  # label change term
    # the derivative is non-decreasing in θ: the (continued) loss is convex
    assert np.all(np.diff(d, axis=1) >= -1e-12)


def test_svm_constants_are_tight():
    loss = make_loss("svm")
    assert abs(loss.derivative(np.array([-1.0]), np.array([1.0]))[0]) == pytest.approx(4.0)


@pytest.mark.parametrize(
    "name,bad",
    [
        ("svm", [0, 2]),
        ("poisson", [1.5, 2]),
        ("least-squares-bounded", [0.5, 1.5]),
        ("poisson", [-1, 2]),
        ("gamma", [0.0, 1.0]),
    ],
)
def test_wrong_label_domain_is_a_config_error(name, bad):
    with pytest.raises(ConfigError, match=f"labels for loss '{name}'"):
        make_loss(name).encode_labels(np.array(bad))


def test_label_encodings():
    assert make_loss("svm").encode_labels(np.array([0, 1])).tolist() == [-1.0, 1.0]
    assert make_loss("poisson").encode_labels(np.array([0, 3, 40])).tolist() == [0.0, 3.0, 10.0]


@pytest.mark.parametrize("name", ["l1", "elastic-net"])
def test_prox_is_the_argmin(name):
    pen = make_penalty(name, 0.3)
    w = np.array([-2.0, -0.05, 0.0, 0.1, 1.7])
    step = 0.5
    got = pen.prox(w, step)
    for wi, gi in zip(w, got, strict=True):
        obj = lambda u, wi=wi: 0.5 * (u - wi) ** 2 + step * pen.value(np.array([u]))
        ref = minimize_scalar(obj, bounds=(-5, 5), method="bounded", options={"xatol": 1e-10}).x
        assert gi == pytest.approx(ref, abs=1e-6)
    assert got[1] == 0.0 and got[3] == 0.0  # small weights are set exactly to zero


def test_svm_loss_trains_through_the_core():
    from bench.runner import load_plugins
    from securevfl.context import RunSpec
    from securevfl.experiment import run_experiment

    load_plugins()
    rec = run_experiment(
        RunSpec(
            method="vfl",
            dataset="breast",
            loss="svm",
            penalty="l1",
            lam=1e-4,
            epochs=5,
            lr=0.2,
            seed=0,
        )
    )
    # 114 test rows drawn without the labels (majority rate 0.64): ±0.03 from one split to another
    assert rec["metrics"]["accuracy"] > 0.8
