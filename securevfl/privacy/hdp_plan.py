"""HDP-VFL's noise plan: per-epoch sensitivities of the batching as run, σ_A, σ_B, σ_w
calibrated to (ε, δ) (the bounds themselves are derived in ``hdp_sensitivity``), the step size
they allow, and the record's privacy report."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from securevfl.errors import ConfigError
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.hdp_sensitivity import (
    active_epoch_sensitivities,
    check_lr,
    max_stable_lr,
    passive_epoch_sensitivities,
    weight_sensitivity,
)
from securevfl.privacy.mechanisms import gaussian_sigma

if TYPE_CHECKING:
    from securevfl.models.glm import GLMLoss


@dataclass
class StreamPlan:
    """The public quantities of one HDP run: noise scales and per-epoch sensitivities."""

    sigma_a: float
    sigma_b: float
    sigma_w: float  # noise on each passive party's scoring weights (0: plain scoring)
    active_epochs: list[float]  # Δ_A,m, m = 1..e
    passive_epochs: list[float]  # Δ_B,m
    weights: float  # Δ of a passive party's final weights (the scoring release)
    derivative_clip: float
    facts: dict[str, Any]

    @property
    def mu_b(self) -> float:
        """The Gaussian-DP μ of a passive party's releases (stream and scoring weights)."""
        mu_sq = sum(d * d for d in self.passive_epochs) / self.sigma_b**2
        if self.sigma_w > 0:
            mu_sq += (self.weights / self.sigma_w) ** 2
        return math.sqrt(mu_sq)


def loss_constants(loss: GLMLoss) -> tuple[float, float, float, float]:
    """(L, β_θ, β_y, k_y) of a loss; ConfigError if the loss does not declare them."""
    consts = (loss.L, loss.beta_theta, loss.beta_y, loss.k_y)
    if any(c is None for c in consts):
        raise ConfigError(
            f"loss for hdp-vfl must declare L, beta_theta, beta_y, k_y, "
            f"got {loss.name!r} without them"
        )
    return tuple(float(c) for c in consts)  # type: ignore[return-value]


def plan_hdp_streams(
    loss: GLMLoss,
    *,
    rows: int,
    batch_size: int,
    epsilon: float,
    delta: float,
    epochs: int,
    clip: float,
    lr: float,
    calibration: str,
    derivative_clip: float,
    score_share: float,
    feature_norm: float = 1.0,
) -> StreamPlan:
    """Sensitivities of this run's batching and σ_A, σ_B, σ_w calibrated to the spec's (ε, δ).

    The active stream's σ_A is calibrated for its whole sensitivity. A passive party spends the
    Gaussian-DP budget μ² of (ε, δ) on two releases: its stream (share 1 - ``score_share``) and
    its noisy scoring weights (``score_share``; 0 = plain scoring, nothing spent). So each party's
    exact ε is the request (``analytic``) or the classic formula's (``classic``, valid for ε < 1).
    """
    L, beta_theta, beta_y, k_y = loss_constants(loss)
    n = rows
    b = min(batch_size, n)
    r = -(-n // b)  # batches per epoch
    b_min = n - (r - 1) * b  # the trailing batch (== b when b divides n)
    common = dict(epochs=epochs, rows=n, lr=lr, k=clip, min_batch=b_min)
    d_a = active_epoch_sensitivities(
        **common, L=L, beta_theta=beta_theta, beta_y=beta_y, k_y=k_y, feature_norm=feature_norm
    )
    d_b = passive_epoch_sensitivities(**common, derivative_clip=derivative_clip)
    d_w = weight_sensitivity(epochs=epochs, lr=lr, derivative_clip=derivative_clip, min_batch=b_min)
    total_a = math.sqrt(sum(x * x for x in d_a))
    total_b = math.sqrt(sum(x * x for x in d_b))
    eps, delta = float(epsilon), float(delta)
    unit_sigma = gaussian_sigma(calibration, epsilon=eps, delta=delta, sensitivity=1.0)  # 1/μ
    sigma_b = total_b * unit_sigma / math.sqrt(1.0 - score_share)
    sigma_w = d_w * unit_sigma / math.sqrt(score_share) if score_share > 0 else 0.0
    facts = {
        "loss": loss.name,
        "T": epochs * r,
        "b": b,
        "b_min": b_min,
        "e": epochs,
        "k": clip,
        "lr": lr,
        "L": L,
        "beta_theta": beta_theta,
        "beta_y": beta_y,
        "k_y": k_y,
        "feature_norm": feature_norm,
        "derivative_clip": derivative_clip,
        "score_share": score_share,
        "sensitivity_a": total_a,
        "sensitivity_b": total_b,
        "sensitivity_weights": d_w,
        "sigma_w": sigma_w,
    }
    return StreamPlan(
        sigma_a=total_a * unit_sigma,
        sigma_b=sigma_b,
        sigma_w=sigma_w,
        active_epochs=d_a,
        passive_epochs=d_b,
        weights=d_w,
        derivative_clip=derivative_clip,
        facts=facts,
    )


DEFAULT_SCORE_SHARE = 0.25
# derivative_clip "auto" = L/10. The hdp-truth suite (breast, e = 10, full batch, centred, 4 seeds):
# at eps = 1, c = L gave 0.50 +- 0.30 and c = L/10 0.894 +- 0.03 (the noisy scoring weights'
# sensitivity d_e grows with c); at eps = 10, 0.912 vs 0.905.
AUTO_CLIP_SHARE = 0.1


def parse_derivative_clip(value: Any) -> float | None:
    """'auto' (the loss's L) or a number > 0."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        c = float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"derivative_clip must be 'auto' or a number > 0, got {value!r}"
        ) from None
    if not (math.isfinite(c) and c > 0):
        raise ConfigError(f"derivative_clip must be 'auto' or a finite number > 0, got {value!r}")
    return c


def hdp_lr(
    lr: float | None, *, default: float, beta_theta: float, lam: float, feature_norm: float
) -> float:
    """The step size of a run: ``lr`` if it keeps the active steps non-expansive (else
    ConfigError), or the trainer's ``default`` lowered to that bound where it exceeds it."""
    if lr is None:
        lr = min(default, max_stable_lr(beta_theta=beta_theta, lam=lam, feature_norm=feature_norm))
    check_lr(float(lr), beta_theta=beta_theta, lam=lam, feature_norm=feature_norm)
    return float(lr)


def hdp_report(
    ledger: PrivacyLedger,
    plan: StreamPlan,
    *,
    delta: float,
    epsilon: float,
    parties: int,
    calibration: str,
    outside: list[str],
    void: bool,
    extra: dict[str, Any],
) -> PrivacyReport:
    """The record's ``privacy``: the ledger's ε per party with each party's σ and sensitivity
    (σ_A / Δ_A for the active party, σ_B / Δ_B for the passive ones), and a warning where the
    classic calibration misses the target."""
    facts = plan.facts
    sigma = {0: plan.sigma_a, **dict.fromkeys(range(1, parties), plan.sigma_b)}
    sens = {0: facts["sensitivity_a"], **dict.fromkeys(range(1, parties), facts["sensitivity_b"])}
    report = ledger.report(
        delta,
        outside_guarantee=outside,
        target_epsilon=epsilon,
        void=void,
        per_party_extra={k: {"sigma": sigma[k], "sensitivity": sens[k]} for k in sigma},
        extra=extra,
    )
    achieved = ledger.epsilon(delta)
    if calibration == "classic" and achieved > epsilon * (1 + 1e-9):
        report.extra["warning"] = (
            f"classic Gaussian calibration misses the target here: the true epsilon of its "
            f"sigma is {achieved:.4g} for the requested {epsilon:.4g}"
        )
    return report
