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
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.context import Option, RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.methods.base import register_method
from securevfl.methods.cascade_options import (
    CascadeMethod,
    cascade_options,
    check_cascade,
    fit_cascade,
)
from securevfl.methods.dp_bottom_options import BOTTOM_OPTIONS
from securevfl.methods.release_options import (
    ACTIVE_FEATURES,
    RELEASE_OPTIONS,
    accuracy_ceiling_extra,
    gaussian_release_report,
    release_defaults,
    release_once,
    release_plan,
)
from securevfl.models.release_shapes import Sphere
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.afe import clip_rows
from securevfl.privacy.analytic_gaussian import analytic_gaussian_sigma
from securevfl.privacy.events import gaussian_event
from securevfl.privacy.units import label_unit
from securevfl.results import FitResult
from securevfl.training import EVAL, SplitNNHooks
from securevfl.training.cascade_trainer import CascadeHooks
from securevfl.training.release_once import fit_release_once
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

    def __init__(
        self, ctx: RunContext, clip: float, sigma: float, ledger: PrivacyLedger, delta: float
    ) -> None:
        self.clip, self.sigma, self.ledger, self.delta = clip, sigma, ledger, delta
        self.rngs = {k: ctx.noise_rng(k, "vafl-dp/embedding") for k in ctx.rt.local_parties}

    def on_upload(self, k: int, rows: int, step: int) -> None:
        self.ledger.compose(
            k, gaussian_event(sigma=self.sigma, sensitivity=2 * self.clip, count=rows)
        )

    def release(self, ctx: RunContext, k: int, h: np.ndarray, step: int) -> np.ndarray:
        # the clip of Eq. 2 (``clip_rows``), the one predict replays on a scored row
        clipped = clip_rows(torch.from_numpy(np.ascontiguousarray(h)), self.clip).numpy()
        return clipped + self.rngs[k].normal(0.0, self.sigma, size=h.shape)

    def scoring_release(self, ctx: RunContext) -> dict[str, Any]:
        """A scored row, as a test row (``release`` at σ): clipped to norm C, N(0, σ²) per
        entry; Δ = 2C."""
        return _clipped_gaussian(self.sigma, self.clip, self.delta)


@register_method
class VAFLDP(CascadeMethod):
    name = "vafl-dp"
    summary = "VAFL + DP: clipped embeddings with Gaussian noise (party-row, accounted)"
    family = "dp"
    requires_epsilon = True
    models = ("mlp",)
    options = {
        **cascade_options(schedule="async", uplink_bits=32, downlink_bits=32, zo=False),
        **BOTTOM_OPTIONS,
        **RELEASE_OPTIONS,
        "active_features": ACTIVE_FEATURES,
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

    def has_server(self, spec: RunSpec) -> bool:
        """No server when the label holder holds columns (release-once): it is party 0 then."""
        return not spec.option("active_features", self)

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Release-once runs: larger DP-SGD batches, one scalar per row on binary tasks."""
        return release_defaults(cls, given)

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        once = release_once(spec, self)
        if not once and spec.option("release_schedule", self) == "split":
            if "bottom" in spec.options and spec.option("bottom", self) == "dp":
                raise ConfigError(
                    "bottom 'dp' of vafl-dp applies to the release-once schedule; its split "
                    "schedule (VAFL's asynchronous rounds) trains exact bottoms, got --bottom dp"
                )
        if spec.option("active_features", self):
            if not once:
                raise ConfigError(
                    "--active-features of vafl-dp needs the release-once schedule, got "
                    f"--release-schedule {spec.option('release_schedule', self)}"
                )

    def fit(self, ctx: RunContext) -> FitResult:
        if release_once(ctx.spec, self, ctx.info.task):
            return self.fit_release_once(ctx)
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
        _, fit = fit_cascade(self, ctx, NoisyEmbeddings(ctx, C, sigma, ledger, delta))
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

    def fit_release_once(self, ctx: RunContext) -> FitResult:
        """Release-once (``training.release_once``): each client's row clipped to norm C plus
        N(0, σ² I), once per training row and once per test row, concatenated at the server;
        no asynchrony is left to run (every row goes out once). Δ = 2C."""
        delta = float(ctx.spec.delta or DEFAULT_DELTA)
        C = float(ctx.spec.option("clip", self))
        plan = release_plan(ctx.spec, self, delta=delta, n_train=ctx.info.n_train)
        report, sigma, sigma_test = gaussian_release_report(
            ctx, plan, sensitivity=2 * C, delta=delta
        )
        hooks = ClippedGaussianHooks(ctx, clip=C, sigma=sigma, sigma_test=sigma_test, delta=delta)
        run = fit_release_once(ctx, hooks, plan=plan)
        n_passive = sum(1 for k in ctx.data_parties if k != ctx.info.label_party)
        extra = {
            "sigma": sigma,
            "clip": C,
            **accuracy_ceiling_extra(ctx, mus=[2 * C / sigma_test] * n_passive, delta=delta),
        }
        return run.result(privacy=report, extra=extra)


class ClippedGaussianHooks(SplitNNHooks):
    """VAFL-DP's mechanism on the split-NN core: rows clipped to norm C, N(0, σ²) per entry
    (σ_test when scoring), concatenated at the label holder."""

    aggregation = "concat"

    def __init__(
        self, ctx: RunContext, *, clip: float, sigma: float, sigma_test: float, delta: float
    ) -> None:
        self.clip, self.sigma, self.sigma_test, self.delta = clip, sigma, sigma_test, delta
        self.rngs = {k: ctx.noise_rng(k, "vafl-dp/embedding") for k in ctx.rt.local_parties}

    def scoring_release(self, ctx: RunContext) -> dict[str, Any]:
        """A scored row, as a test row: clipped to norm C, N(0, σ_test²) per entry; Δ = 2C."""
        return _clipped_gaussian(self.sigma_test, self.clip, self.delta)

    def bound_rows(self, ctx: RunContext, k: int, h: torch.Tensor) -> torch.Tensor:
        return clip_rows(h, self.clip)

    def test_gain(self) -> float:
        """σ²_train / σ²_test (a test row's one release gets the whole target)."""
        return float((self.sigma / self.sigma_test) ** 2)

    def saturation(self, ctx: RunContext, k: int) -> nn.Module:
        return Sphere(self.clip)

    def embed(self, ctx: RunContext, k: int, emb: torch.Tensor, step: int) -> torch.Tensor:
        return clip_rows(emb, self.clip)

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> np.ndarray:
        sigma = (
            self.sigma_test if self.batch is not None and self.batch.phase == EVAL else self.sigma
        )
        return (emb + self.rngs[k].normal(0.0, sigma, size=emb.shape)).astype(np.float32)


def _clipped_gaussian(sigma: float, clip: float, delta: float) -> dict[str, Any]:
    """The release descriptor predict replays (``securevfl.model.predict_privacy``)."""
    return {
        "mechanism": "gaussian",
        "sigma": float(sigma),
        "sensitivity": float(2 * clip),
        "delta": float(delta),
        "clip": {"mode": "hard", "bound": float(clip)},
    }
