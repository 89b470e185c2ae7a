"""The *heuristic* privacy figure of VFL-CZOFO's Theorem 4.1, measured on the run — not a DP
guarantee.

The claim: the randomness of the ZO estimate ĝ of the gradient at a client's output acts like
Gaussian noise of variance σ² = tr(Ψ) / (q d_h) per coordinate (Ψ: the covariance of a
one-direction estimate), so each step's release to a client is (ε, δ)-DP with

    ε = 2 ζ √(2 ln(1.25/δ)) / (N σ)          (ζ: the largest per-sample gradient norm at h)

and T steps compose (advanced composition) to ε̄ = √(2 T ln(1/δ')) ε + T ε (e^ε − 1),
δ̄ = T δ + δ'. We measure its inputs: at every ZO reply the server (who knows the directions and
the exact gradient, for measurement only) records ||ĝ_i − ∇_{h_i} f_i||² per row (the q-direction
estimate as the client will form it from the decoded reply, per-row scale) and ||∇_{h_i} f_i||.
tr(Ψ) = q · mean ||ĝ − ∇f||²; σ² its average over the run / (q d_h).

Why it is not a guarantee: the "noise" ĝ − ∇f is a deterministic function of the data and the
directions the client itself knows (it draws them), it is not Gaussian, not independent of the
data, and ζ is observed, not enforced by clipping. Hence the record reports ε = None with this
figure beside it, accountant ``czofo-intrinsic (heuristic, Theorem 4.1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from securevfl.errors import check_open_unit
from securevfl.privacy.events import PrivacyReport

ACCOUNTANT = "czofo-intrinsic (heuristic, Theorem 4.1)"
NOT_A_GUARANTEE = (
    "ZO gradient estimates sent to the clients: no DP noise; the Theorem 4.1 figure "
    "(privacy.intrinsic_heuristic) is a heuristic, not a DP guarantee",
    "embeddings sent to the server: no DP noise (compressed only)",
)


def step_epsilon(*, zeta: float, sigma: float, n: int, delta: float) -> float:
    """Theorem 4.1's per-step ε: the classical Gaussian bound at sensitivity 2ζ/N."""
    check_open_unit("delta", delta)
    if sigma <= 0:
        return math.inf
    return 2.0 * zeta * math.sqrt(2.0 * math.log(1.25 / delta)) / (n * sigma)


def advanced_composition(
    eps: float, *, steps: int, delta: float, delta_prime: float
) -> tuple[float, float]:
    """(ε̄, δ̄) of ``steps`` (ε, δ) releases (Dwork, Rothblum & Vadhan's advanced composition)."""
    check_open_unit("delta_prime", delta_prime)
    e = math.sqrt(2.0 * steps * math.log(1.0 / delta_prime)) * eps + steps * eps * math.expm1(eps)
    return e, steps * delta + delta_prime


@dataclass
class IntrinsicTracker:
    """Accumulates the measured inputs of Theorem 4.1 over a run's ZO replies."""

    q: int
    d_h: int
    sq_err: list[float] = field(default_factory=list)
    zeta: float = 0.0
    steps: int = 0

    def add(self, estimate: np.ndarray, true_grad: np.ndarray) -> None:
        """One reply: per-row estimates and exact per-row gradients, both (b, d_h)."""
        err = ((estimate - true_grad) ** 2).sum(axis=1)
        self.sq_err.append(float(err.mean()))
        self.zeta = max(self.zeta, float(np.linalg.norm(true_grad, axis=1).max()))
        self.steps += 1

    def figure(self, *, n: int, delta: float, delta_prime: float) -> dict[str, float | int]:
        """The measured σ², ζ, per-step ε and the composed (ε̄, δ̄) at the T run."""
        mse = float(np.mean(self.sq_err)) if self.sq_err else math.nan
        sigma_sq = mse / self.d_h
        eps = step_epsilon(zeta=self.zeta, sigma=math.sqrt(sigma_sq), n=n, delta=delta)
        bar, dbar = advanced_composition(
            eps, steps=self.steps, delta=delta, delta_prime=delta_prime
        )
        return {
            "q": self.q,
            "d_h": self.d_h,
            "tr_psi": self.q * mse,
            "sigma_sq": sigma_sq,
            "zeta": self.zeta,
            "N": n,
            "delta": delta,
            "delta_prime": delta_prime,
            "epsilon_step": eps,
            "T": self.steps,
            "epsilon_bar": bar,
            "delta_bar": dbar,
        }


def intrinsic_report(
    trackers: dict[int, IntrinsicTracker], *, n: int, delta: float, delta_prime: float
) -> PrivacyReport:
    """The record's ``privacy``: no DP ε; the heuristic figure per client, labelled as such."""
    per = {k: t.figure(n=n, delta=delta, delta_prime=delta_prime) for k, t in trackers.items()}
    worst = max(per.values(), key=lambda f: f["epsilon_bar"], default=None)
    return PrivacyReport(
        epsilon=None,
        delta=delta,
        accountant=ACCOUNTANT,
        unit="sample",
        per_party={k: {"intrinsic_heuristic": f} for k, f in per.items()},
        outside_guarantee=NOT_A_GUARANTEE,
        extra={
            "intrinsic_heuristic": worst,
            "intrinsic_note": "Theorem 4.1 evaluated on measured tr(Psi) and zeta: the ZO "
            "error is data-dependent and not Gaussian, so this is no (epsilon, delta)-DP "
            "guarantee; it is reported to be tested empirically (attack suite)",
        },
    )
