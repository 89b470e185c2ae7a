"""VFL-CZOFO: cascaded zeroth-order clients, a first-order server, compression both ways (seed 002).

Parties: K >= 2 clients (0..K-1: features, a bottom model each) and the server (index K: labels
and the top model). Per round the active client (async: one drawn at random; sync: all) uploads
its embedding quantised to ``--uplink-bits``; the server trains its top model by first order and
returns, for that client, the q loss differences δ_j = L(h + μ u_j) − L(h) along directions it
shares with the client (``--deltas batch``: q scalars per batch, the authors' code; ``sample``:
q per row, the poster's Eq. 2), quantised to ``--downlink-bits``; the client forms
Avg-RandGradEst (Eq. 2) and backpropagates it through its bottom model (chain rule). Optional
lossless range coding of the quantiser's codes (``--entropy-coding``) and uplink rows sent as
differences from their previous visit (``--uplink-delta-bits``) shrink the bytes further. The server
computes the δ before it steps (the authors' code steps first, so each δ mixes two models).

**Defaults.** ``--preset tuned`` (the default) runs 30 epochs with q = 50 directions, chosen on
digits seed 3 (mean of seeds 0-2: 0.925 beside split learning's 0.945, ``docs/references.md``);
``--preset paper`` keeps the authors' literal settings (10 epochs, q = 10: 0.68 on digits). Both
are async with 8-bit links both ways; an option the user gives always wins.

**Privacy.** Nothing is noised. The record carries Theorem 4.1's figure measured on the run
(``securevfl.privacy.czofo_intrinsic``) with ε = None: a heuristic, not a DP guarantee.
"""

from __future__ import annotations

from typing import Any

from securevfl.context import Option, RunContext
from securevfl.methods.base import register_method
from securevfl.methods.cascade_options import CascadeMethod, cascade_options, fit_cascade
from securevfl.privacy.czofo_intrinsic import IntrinsicTracker, intrinsic_report
from securevfl.results import FitResult
from securevfl.training.cascade_trainer import CascadeHooks

DEFAULT_DELTA = 1e-6  # the poster's δ = δ' of Table 2
PRESETS = {
    # measured on digits seed 3 (epochs x q, lr 0.01): 10x10 0.649, 10x50 0.752, 30x10 0.861,
    # 30x50 0.955; lr 0.03 and sync were no better at 30x50 (0.883, 0.944)
    "tuned": {"epochs": 30},  # and q 50, the option's default
    "paper": {"q": 10},  # the authors' literal settings: q 10 and the common 10 epochs
}
TUNED_Q = 50


class IntrinsicHooks(CascadeHooks):
    """Feed every ZO reply (as the client will decode it) to the Theorem 4.1 tracker."""

    def __init__(self, trackers: dict[int, IntrinsicTracker]) -> None:
        self.trackers = trackers

    def on_zo_reply(self, k, estimate, true_grad, step) -> None:
        self.trackers[k].add(estimate, true_grad)


@register_method
class CZOFOVFL(CascadeMethod):
    name = "czofo-vfl"
    summary = "VFL-CZOFO: ZO clients (estimate at their output), FO server, compressed both ways"
    family = "zo"
    client_grad = "zo-output"
    options = {
        **cascade_options(schedule="async", uplink_bits=8, downlink_bits=8, zo=True),
        # q's default is a static value (not a preset's) so a spec rebuilt from its dict in
        # another process resolves to the same q
        "q": Option(
            int, TUNED_Q, "directions per zeroth-order estimate (paper preset: 10)", ge=1, le=10_000
        ),
        "preset": Option(
            str,
            "tuned",
            "tuned: 30 epochs, q 50 (best measured); paper: the authors' settings (10 epochs, "
            "q 10); options given explicitly win",
            choices=tuple(PRESETS),
        ),
    }

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """The preset's epochs (tuned: 30) or q (paper: 10) (module docstring: measured)."""
        return dict(PRESETS.get(str(given.get("preset", "tuned")), {}))

    def fit(self, ctx: RunContext) -> FitResult:
        q = int(ctx.spec.option("q", self))
        trackers = {k: IntrinsicTracker(q, ctx.spec.embedding_dim) for k in ctx.data_parties}
        _, fit = fit_cascade(self, ctx, IntrinsicHooks(trackers))
        fit.extra["preset"] = ctx.spec.option("preset", self)
        if ctx.rt.here(ctx.info.label_party):
            fit.privacy = intrinsic_report(
                trackers,
                n=ctx.info.n_train,
                delta=float(ctx.spec.delta or DEFAULT_DELTA),
                delta_prime=DEFAULT_DELTA,
            )
        return fit
