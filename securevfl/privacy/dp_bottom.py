"""Accounting of DP bottom-model updates (``training.private_bottom``) and the budget split.

A passive party's DP-SGD step releases (internally, into its model) the clipped per-example
gradient sum plus N(0, (σ_g·C_g)² I). One row moves the clipped sum by at most 2·C_g (replace
one row), so one step is a Gaussian mechanism of noise multiplier σ_g / 2 for the rows of its
batch; batches of an epoch are disjoint (a public shuffle; no subsampling amplification is
claimed), so a row costs one such release per epoch. Every later release depends on the other
rows only through these releases (post-processing), so a row's ε composes only its own
releases: E embedding releases and E gradient releases (and the method's extras) for a training
row, one scoring release for a test row. Training and test rows are disjoint, so the run's ε is
the larger of the two (:func:`with_test_rows`), and a test row's scoring noise is calibrated
to the whole target on its own (:func:`test_noise_multiplier`).

**Budget split.** The target ε at δ corresponds to a Gaussian-DP μ (ε(μ) = target, Balle-Wang);
``share`` of μ² goes to the gradient releases: E·(2/σ_g)² = share·μ², i.e.
σ_g = 2·√(E / share) / μ. The method then calibrates its embedding noise on the whole ledger
(gradient releases included), so the printed ε is the accountant's, whatever the split. With
Gaussian embeddings and share = 1/2 the two kinds get equal noise multipliers.
"""

from __future__ import annotations

import dataclasses
import math

from dp_accounting import dp_event

from securevfl.privacy.accountant import PrivacyLedger, calibrate
from securevfl.privacy.analytic_gaussian import analytic_gaussian_epsilon
from securevfl.privacy.events import PrivacyReport, gaussian_event


def gdp_mu(epsilon: float, delta: float) -> float:
    """The Gaussian-DP μ whose (ε, δ) curve passes through (``epsilon``, ``delta``)."""
    inv, _ = calibrate(
        lambda s: analytic_gaussian_epsilon(sigma=s, delta=delta, sensitivity=1.0),
        epsilon,
        lo=1e-4,
        hi=1e6,
        rel_tol=1e-4,
        what="1/mu",
    )
    return 1.0 / inv


def grad_noise_multiplier(*, epsilon: float, delta: float, epochs: int, share: float) -> float:
    """σ_g (noise N(0, (σ_g·C_g)²) on the clipped sum) spending ``share`` of μ² over ``epochs``."""
    return 2.0 * math.sqrt(epochs / share) / gdp_mu(epsilon, delta)


def grad_event(noise_multiplier: float, count: int = 1) -> dp_event.DpEvent:
    """``count`` bottom updates of one row: Gaussian, sensitivity 2·C_g, noise σ_g·C_g (C_g = 1:
    the event is scale-free)."""
    return gaussian_event(sigma=noise_multiplier, sensitivity=2.0, count=count)


def test_noise_multiplier(epsilon: float, delta: float) -> float:
    """Noise multiplier (noise / Δ) of a test row's one Gaussian scoring release at ``epsilon``."""
    return 1.0 / gdp_mu(epsilon, delta)


def with_test_rows(report: PrivacyReport, test: PrivacyLedger, delta: float) -> PrivacyReport:
    """The run's report when training rows and test rows are disjoint (parallel composition).

    With DP bottoms a training row's releases and a test row's scoring release concern
    different rows: the model that scores test rows is post-processing of the training
    releases, and no test row enters training. A neighbouring dataset changes one row, so ε is
    the larger of a training row's ε (``report``) and a test row's (``test``)."""
    eps_test = test.epsilon(delta)
    eps = None if report.epsilon is None else max(report.epsilon, eps_test)
    by_unit = {
        u: max(v, test.by_unit(delta).get(u, 0.0))
        for u, v in dict(report.extra.get("by_unit", {})).items()
    }
    extra = {
        **report.extra,
        "by_unit": by_unit,
        "train_row_epsilon": report.epsilon,
        "test_row_epsilon": eps_test,
    }
    return dataclasses.replace(report, epsilon=eps, extra=extra)
