"""VAFL (Chen et al., 2020): asynchronous first-order split learning (one random client per round,
the server's table of the others' latest embeddings), and VAFL-DP: the same with each released
embedding row clipped to norm C and Gaussian noise added at the client.

**VAFL-DP privacy (unit party-row: one row of one client's block).** A clipped row moves by at
most 2C when the row changes, and no other row's release moves given the model; but the bottom
model trains on the client's exact rows, so every later release of any row may depend on a row
once used. The ledger therefore composes every row release of each client — the table's first
fill, every training upload (active and refresh rounds, counted from the public round plan) and
the test embeddings — each a Gaussian release of Δ = 2C (exact Gaussian-DP composition), composed
at the server as each message arrives; σ is calibrated from the public round plan so the largest
client's ε meets ``--epsilon``. The gradients returned to a client are
post-processing for that client's rows. Outside: the server's labels (replies carry them with no
noise). The benchmark's accuracy curve sends un-clipped, un-noised test embeddings to the server,
so it is off by default here (``curve_points`` 0); a run that asks for it prints no ε.
"""

from __future__ import annotations

import math

import numpy as np

from securevfl.context import Option, RunContext
from securevfl.methods.base import register_method
from securevfl.methods.cascade_options import (
    CascadeMethod,
    cascade_options,
    check_cascade,
    fit_cascade,
)
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.analytic_gaussian import analytic_gaussian_sigma
from securevfl.privacy.events import gaussian_event
from securevfl.privacy.units import label_unit
from securevfl.results import FitResult
from securevfl.training.cascade_trainer import CascadeHooks
from securevfl.training.rounds import plan_rounds, releases_per_client

DEFAULT_DELTA = 1e-5


@register_method
class VAFL(CascadeMethod):
    name = "vafl"
    summary = "VAFL: asynchronous FO split learning with a server-side embedding table"
    family = "plain"
    options = cascade_options(schedule="async", uplink_bits=32, downlink_bits=32, zo=False)


def row_releases(ctx: RunContext, schedule: str, max_staleness: int) -> list[int]:
    """Embedding rows each client releases in the whole run (public: from the round plan)."""
    info, spec = ctx.info, ctx.spec
    plan = plan_rounds(
        info.n_train, spec.batch_size, spec.epochs, info.data_parties,
        schedule=schedule, seed=ctx.shared_seed, max_staleness=max_staleness,
    )  # fmt: skip
    fill = info.n_train if schedule == "async" else 0
    return [r + fill + info.n_test for r in releases_per_client(plan, info.data_parties)]


class NoisyEmbeddings(CascadeHooks):
    """Clip each released row to norm C, add N(0, σ²) per entry (the client's noise generator);
    at the server, compose one Gaussian release (Δ = 2C) per row that arrives."""

    def __init__(self, ctx: RunContext, clip: float, sigma: float, ledger: PrivacyLedger) -> None:
        self.clip, self.sigma, self.ledger = clip, sigma, ledger
        self.rngs = {k: ctx.noise_rng(k, "vafl-dp/embedding") for k in ctx.rt.local_parties}

    def on_upload(self, k: int, rows: int, step: int) -> None:
        self.ledger.compose(
            k, gaussian_event(sigma=self.sigma, sensitivity=2 * self.clip, count=rows)
        )

    def release(self, ctx: RunContext, k: int, h: np.ndarray, step: int) -> np.ndarray:
        norms = np.linalg.norm(h, axis=1, keepdims=True)
        clipped = h * np.minimum(1.0, self.clip / np.maximum(norms, 1e-300))
        return clipped + self.rngs[k].normal(0.0, self.sigma, size=h.shape)


@register_method
class VAFLDP(CascadeMethod):
    name = "vafl-dp"
    summary = "VAFL + DP: clipped embeddings with Gaussian noise (party-row, accounted)"
    family = "dp"
    requires_epsilon = True
    options = {
        **cascade_options(schedule="async", uplink_bits=32, downlink_bits=32, zo=False),
        "clip": Option(float, 1.0, "clipping bound C of each released embedding row", gt=0, le=1e6),
        # the curve instrument sends exact test embeddings: off unless asked (then no ε)
        "curve_points": Option(
            int,
            0,
            "test-accuracy measurements during training; they send exact test embeddings "
            "outside the mechanism, so any > 0 voids ε (0: none)",
            ge=0,
            le=10_000,
        ),
    }

    def fit(self, ctx: RunContext) -> FitResult:
        cfg = check_cascade(ctx.spec, self, "foo")
        C, eps = float(ctx.spec.option("clip", self)), float(ctx.spec.epsilon)
        delta = float(ctx.spec.delta or DEFAULT_DELTA)
        rows = row_releases(ctx, cfg.schedule, cfg.max_staleness)
        # calibration: the plan's row releases compose exactly into one Gaussian release of
        # sensitivity 2C √(rows); the ledger then counts the releases as they arrive
        sigma = analytic_gaussian_sigma(
            epsilon=eps, delta=delta, sensitivity=2 * C * math.sqrt(max(rows))
        )
        ledger = PrivacyLedger("party-row")
        _, fit = fit_cascade(self, ctx, NoisyEmbeddings(ctx, C, sigma, ledger))
        if not ctx.rt.here(ctx.info.label_party):
            return fit
        outside = ["the server's labels: replies to clients carry them without noise"]
        if cfg.curve_points:
            outside.append(
                f"the accuracy curve ({cfg.curve_points} points): exact test embeddings sent to "
                "the server outside the mechanism, so no ε (curve_points 0 restores it)"
            )
        fit.privacy = ledger.report(
            delta,
            outside_guarantee=outside,
            void=bool(cfg.curve_points),
            target_epsilon=eps,
            per_party_extra={k: {"sigma": sigma, "sensitivity": 2 * C} for k in ctx.data_parties},
            extra={"noise_sigma": sigma, "clip": C},
        )
        # the server's replies carry its labels without noise: no sample unit
        fit.privacy = label_unit(fit.privacy, labels_protected=False)
        fit.extra.update(sigma=sigma, clip=C)
        return fit
