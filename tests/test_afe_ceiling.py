"""The accuracy ceiling of Gaussian-DP releases (securevfl.privacy.ceiling) against Monte Carlo."""

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

from securevfl.errors import ConfigError
from securevfl.privacy.ceiling import (
    accuracy_ceiling,
    binary_ceiling,
    composed_mu,
    tv_bound,
    tv_ceiling,
)


def _bayes_accuracy(means, priors, sigma, rng, n=60_000):
    """Monte Carlo accuracy of the exact Bayes rule when class y's release is a uniform mixture
    of N(m, σ² I) over the points ``means[y]`` (each in the C-ball)."""
    ys = rng.choice(len(priors), size=n, p=priors)
    comp = np.array([rng.integers(len(means[y])) for y in ys])
    x = np.stack([means[y][c] for y, c in zip(ys, comp, strict=True)])
    x = x + rng.normal(0, sigma, size=x.shape)
    logpost = []
    for y, m in enumerate(means):
        d2 = ((x[:, None, :] - m[None, :, :]) ** 2).sum(axis=2)
        logpost.append(np.log(priors[y]) + logsumexp(-d2 / (2 * sigma**2), axis=1))
    acc = float(np.mean(np.argmax(np.stack(logpost, axis=1), axis=1) == ys))
    return acc, 3 * np.sqrt(acc * (1 - acc) / n)


def test_antipodal_embeddings_reach_the_binary_ceiling():
    rng = np.random.default_rng(0)
    C, mu, priors = 0.5, 1.3, [0.76, 0.24]
    means = [np.array([[C, 0.0]]), np.array([[-C, 0.0]])]  # the two classes 2C apart
    acc, se = _bayes_accuracy(means, priors, sigma=2 * C / mu, rng=rng)
    assert abs(acc - binary_ceiling(mu, priors)) <= se


@pytest.mark.parametrize("classes", [2, 4])
def test_no_mixture_of_embeddings_beats_the_ceiling(classes):
    rng = np.random.default_rng(classes)
    C, mu = 1.0, 1.5
    for _ in range(4):
        priors = rng.dirichlet(np.ones(classes) * 2)
        means = []
        for _y in range(classes):  # each class: a few points in the C-ball, 3 dimensions
            m = rng.normal(size=(3, 3))
            means.append(
                m
                * (
                    C
                    * rng.uniform(0.3, 1.0, size=(3, 1))
                    / np.linalg.norm(m, axis=1, keepdims=True)
                )
            )
        acc, se = _bayes_accuracy(means, priors, sigma=2 * C / mu, rng=rng, n=20_000)
        assert acc <= accuracy_ceiling(mu, priors) + se
        assert accuracy_ceiling(mu, priors) <= tv_ceiling(mu, priors) + 1e-12


def test_tv_bound_is_the_largest_gap_of_the_tradeoff_curve():
    for mu in (0.2, 1.0, 3.0):
        a = np.linspace(0, 1, 200_001)
        gap = 1 - a - norm.cdf(norm.ppf(1 - a) - mu)
        assert tv_bound(mu) == pytest.approx(gap.max(), abs=1e-6)


def test_ceiling_limits_and_bad_input():
    assert binary_ceiling(0.0, [0.7, 0.3]) == 0.7
    assert binary_ceiling(40.0, [0.7, 0.3]) == pytest.approx(1.0)
    assert composed_mu([0.3, 0.4]) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="mu"):
        tv_bound(-1.0)
    with pytest.raises(ConfigError, match="priors"):
        accuracy_ceiling(1.0, [0.5, 0.6])
