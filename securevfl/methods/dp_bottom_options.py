"""The DP bottom-update options shared by afe-vfl, ldp-vfl and pbm-vfl, and their plan.

``--bottom dp`` (the default): each data party's bottom model is trained by DP-SGD
(``training.private_bottom``) and a row's ε composes only its own releases
(``privacy.dp_bottom``). ``--bottom exact``: the bottom trains on exact rows, so every release
of a party's rows counts (the older, much larger bound)."""

from __future__ import annotations

from dataclasses import dataclass

from securevfl.context import Option, RunSpec
from securevfl.methods.base import Method
from securevfl.privacy.dp_bottom import grad_event, grad_noise_multiplier
from securevfl.training.private_bottom import BottomDP

BOTTOMS = ("dp", "exact")
DP_ONLY = ("bottom", ("dp",))

BOTTOM_OPTIONS = {
    "bottom": Option(
        str,
        "dp",
        "bottom-model update: dp (DP-SGD, when --epsilon is given; a row's epsilon counts its "
        "own releases) or exact (exact rows; every release of a party's rows counts; also what "
        "runs without --epsilon)",
        choices=BOTTOMS,
    ),
    "grad_clip": Option(
        float,
        0.1,
        "per-example clip C_g of the DP bottom update (0.1: on digits at epsilon 100, 0.65 "
        "accuracy vs 0.33 at 1.0)",
        gt=0,
        le=1e6,
        when=DP_ONLY,
    ),
    "grad_share": Option(
        float,
        0.5,
        "share of the Gaussian-DP budget mu^2 spent on the DP bottom updates",
        gt=0,
        lt=1,
        when=DP_ONLY,
    ),
}


@dataclass(frozen=True)
class BottomPlan:
    """The run's bottom update: ``dp`` None for exact bottoms."""

    dp: BottomDP | None
    epochs: int

    def events(self, count: int = 1) -> list:
        """One row's gradient releases (``count`` epochs); none for exact bottoms."""
        return [] if self.dp is None else [grad_event(self.dp.noise_multiplier, count)]


def bottom_plan(spec: RunSpec, method: Method, *, delta: float) -> BottomPlan:
    """The bottom update a run asks for; its σ_g from ``grad_share`` of the target ε's μ²."""
    if spec.option("bottom", method) == "exact" or spec.epsilon is None:
        return BottomPlan(None, spec.epochs)
    share = float(spec.option("grad_share", method))
    sigma_g = grad_noise_multiplier(
        epsilon=float(spec.epsilon), delta=delta, epochs=spec.epochs, share=share
    )
    return BottomPlan(BottomDP(float(spec.option("grad_clip", method)), sigma_g), spec.epochs)
