"""HDP-VFL's plug points on the GLM trainer and one private run of Algorithm 1 (see
``hdp_vfl`` for the method, its privacy unit and options)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from securevfl.context import RunContext
from securevfl.engine import EngineRows
from securevfl.errors import ConfigError
from securevfl.models.active_refit import refit_active
from securevfl.models.glm import GLMLoss
from securevfl.models.logistic_threshold import recording_start, refit_threshold
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import gaussian_event
from securevfl.privacy.hdp_plan import (
    AUTO_CLIP_SHARE,
    DEFAULT_SCORE_SHARE,
    StreamPlan,
    hdp_lr,
    loss_constants,
    plan_hdp_streams,
)
from securevfl.privacy.noise_stream import NoiseStream
from securevfl.training import GLMHooks, GLMState, Release, TrainRun, fit_glm
from securevfl.training.batching import balanced_batch_size
from securevfl.training.glm_adapters import (
    check_deconvolvable,
    parse_intercept,
    with_constant_feature,
)
from securevfl.training.glm_trainer import DEFAULT_GLM_LR, resolve_loss


class HDPHooks(GLMHooks):
    """Algorithm 1's plug points: noisy IR_B, noisy derivative back (clipped where received),
    weight-norm clipping, private scoring; each epoch's and the scoring's releases as events."""

    record_from: int | None = None  # steps >= this keep the exact derivative (threshold)
    refit: dict[str, Any] | None = None  # threshold 'deconvolved': lr and free_bias
    final_fit: str = "trained"  # 'refit': the label holder refits on what it received
    last_received: np.ndarray | None = None  # refit: each training row's latest messages

    def __init__(self, ctx: RunContext, plan: StreamPlan, *, clip: float, tag: str) -> None:
        self.plan, self.clip = plan, clip
        self.recorded: list[tuple[int, np.ndarray]] = []
        self.mean_deriv: list[float] = []
        chunk = ctx.info.n_train  # about one epoch of draws per refill
        # one generator per party living here: party k's noise never depends on another's draws
        self.noise = {
            k: NoiseStream(
                ctx.noise_rng(k, f"hdp/{tag}"), plan.sigma_a if k == 0 else plan.sigma_b, chunk
            )
            for k in ctx.rt.local_parties
        }

    def passive_message(self, ctx: RunContext, k: int, ir: np.ndarray, step: int) -> np.ndarray:
        return self.noise[k].added(ir)

    def active_message(self, ctx: RunContext, deriv: np.ndarray, step: int) -> np.ndarray:
        if self.record_from is not None:
            self.mean_deriv.append(float(np.mean(deriv)))  # replays a free bias's trajectory
            if step >= self.record_from:
                self.recorded.append((step, np.array(deriv, dtype=float)))
        return self.noise[0].added(deriv)

    def received_derivative(self, ctx: RunContext, k: int, deriv: np.ndarray) -> np.ndarray:
        c = self.plan.derivative_clip
        return np.clip(deriv, -c, c)  # bounds every per-row gradient: the passive bound holds

    def after_update(self, ctx: RunContext, k: int, w: np.ndarray) -> np.ndarray:
        norm = math.sqrt(float(w @ w))
        return w if norm <= self.clip else w * (self.clip / norm)

    def epoch_releases(self, ctx: RunContext, epoch: int) -> list[Release]:
        plan = self.plan
        out = [(0, gaussian_event(sigma=plan.sigma_a, sensitivity=plan.active_epochs[epoch]))]
        for k in range(1, ctx.info.data_parties):
            out.append(
                (k, gaussian_event(sigma=plan.sigma_b, sensitivity=plan.passive_epochs[epoch]))
            )
        return out

    def saw_received(
        self, ctx: RunContext, idx: np.ndarray, received: dict[int, np.ndarray], epoch: int
    ) -> None:
        """final_fit 'refit': keep each training row's latest noisy passive messages."""
        if self.final_fit != "refit":
            return
        if self.last_received is None:
            self.last_received = np.full((ctx.info.n_train, len(received)), np.nan)
        for j, k in enumerate(sorted(received)):
            self.last_received[idx, j] = received[k]

    def configure_evaluate(self, ctx: RunContext, state: GLMState) -> None:
        """final_fit 'refit': the label holder refits its weights, bias and one factor per
        passive party on its training rows (``models.active_refit``); threshold
        'deconvolved': it refits its decision threshold. Both use only what it already holds
        and received (post-processing, no release)."""
        if not ctx.rt.here(0):
            return
        if self.final_fit == "refit" and self.last_received is not None:
            self._refit(ctx, state)
            return
        if self.refit is None:
            return
        noise_var = (ctx.info.data_parties - 1) * self.plan.sigma_b**2
        t, info = refit_threshold(self.recorded, self.mean_deriv, noise_var=noise_var, **self.refit)
        info["trained_bias"] = float(state.bias)
        if t is not None:
            state.bias = -t  # decide x·w >= t: scoring adds state.bias to every score
        self.plan.facts["threshold"] = {"applied": t is not None, **info}

    def _refit(self, ctx: RunContext, state: GLMState) -> None:
        view = ctx.views[0]
        seen = ~np.isnan(self.last_received).any(axis=1)
        loss = resolve_loss(ctx)
        y = loss.encode_labels(view.y_train[seen])
        w, b, scales = refit_active(loss, _own_rows(ctx, seen), self.last_received[seen], y)
        passives = range(1, ctx.info.data_parties)
        self.plan.facts["final_fit"] = {
            "rows": int(seen.sum()),
            "trained_bias": float(state.bias),
            "bias": b,
            "passive_scale": {str(k): float(a) for k, a in zip(passives, scales, strict=True)},
        }
        state.w[0], state.bias = w, b
        state.passive_scale = {k: float(a) for k, a in zip(passives, scales, strict=True)}

    def checkpoint_refusal(self, ctx: RunContext) -> str | None:
        return None  # its state is below; the weights are the trainer's

    def checkpoint_state(self, ctx: RunContext, k: int) -> tuple[dict[str, np.ndarray], dict]:
        """Party k's noise position (draws handed out: public, the key is never kept); at the
        label holder what it kept of its own: the noisy messages it received (final_fit
        'refit') and its exact derivatives (threshold 'deconvolved')."""
        kept: dict[str, np.ndarray] = {}
        if k == 0 and self.last_received is not None:
            kept["received"] = self.last_received
        if k == 0 and self.record_from is not None:
            kept["mean_deriv"] = np.asarray(self.mean_deriv, dtype=float)
            kept["recorded_steps"] = np.asarray([t for t, _ in self.recorded], dtype=np.int64)
            kept["recorded_sizes"] = np.asarray([len(d) for _, d in self.recorded], dtype=np.int64)
            kept["recorded"] = np.concatenate([d for _, d in self.recorded] or [np.zeros(0)])
        return kept, {"noise_draws": self.noise[k].taken}

    def restore_checkpoint(
        self, ctx: RunContext, k: int, arrays: dict[str, np.ndarray], counts: dict, replay: bool
    ) -> None:
        if replay:  # noise from --seed: resume the stream where it stopped
            self.noise[k].skip(int(counts["noise_draws"]))
        if k == 0 and "received" in arrays:
            got, want = arrays["received"].shape, (ctx.info.n_train, ctx.info.data_parties - 1)
            if got != want:
                raise ConfigError(f"checkpoint's received messages must be {want}, got {got}")
            self.last_received = np.array(arrays["received"], dtype=float)
        if k == 0 and self.record_from is not None:
            sizes = arrays["recorded_sizes"]
            if int(sizes.sum()) != len(arrays["recorded"]) or (sizes < 0).any():
                raise ConfigError("checkpoint's recorded derivatives must match their sizes")
            parts = np.split(arrays["recorded"], np.cumsum(sizes)[:-1]) if len(sizes) else []
            self.mean_deriv = [float(v) for v in arrays["mean_deriv"]]
            self.recorded = [
                (int(t), np.array(d)) for t, d in zip(arrays["recorded_steps"], parts, strict=True)
            ]

    def score_weights(self, ctx: RunContext, k: int, w: np.ndarray) -> np.ndarray:
        if self.plan.sigma_w == 0:
            return w
        # the stream's unit normals, rescaled: party k's noise stays one generator's draws
        return w + self.noise[k].take(len(w)) * (self.plan.sigma_w / self.plan.sigma_b)

    def eval_releases(self, ctx: RunContext, n_rows: int) -> list[Release]:
        """Every passive party's noisy-weight release (none under plain scoring)."""
        if self.plan.sigma_w == 0:
            return []
        event = gaussian_event(sigma=self.plan.sigma_w, sensitivity=self.plan.weights)
        return [(k, event) for k in range(1, ctx.info.data_parties)]


def plan_streams(ctx: RunContext, loss: GLMLoss, **kw: Any) -> StreamPlan:
    """The run's noise plan (``privacy.hdp_plan``) for the batching and (ε, δ) of ``ctx``."""
    spec = ctx.spec
    return plan_hdp_streams(
        loss,
        rows=ctx.info.n_train,
        batch_size=spec.batch_size,
        epsilon=float(spec.epsilon),
        delta=float(spec.delta),
        **kw,
    )


def train_hdp(
    ctx: RunContext,
    ledger: PrivacyLedger,
    *,
    epochs: int,
    clip: float,
    calibration: str,
    tag: str,
    derivative_clip: float | None = None,
    scoring: str = "private",
    score_share: float = DEFAULT_SCORE_SHARE,
    intercept: str = "clipped",
    threshold: str = "trained",
    final_fit: str = "trained",
) -> tuple[TrainRun, HDPHooks]:
    """One run of Algorithm 1 (clipped received derivative) at the spec's (ε, δ), test split
    scored through the hooks; every release (epochs, noisy scoring weights) enters ``ledger``."""
    b = balanced_batch_size(ctx.info.n_train, ctx.spec.batch_size)
    spec = dataclasses.replace(ctx.spec, epochs=epochs, batch_size=b)
    ctx = dataclasses.replace(ctx, spec=spec)
    loss = resolve_loss(ctx)
    intercept = parse_intercept(intercept)
    c = 1.0 if intercept == "none" else math.sqrt(2.0)
    L, beta_theta = loss_constants(loss)[:2]
    lr = hdp_lr(
        spec.lr, default=DEFAULT_GLM_LR, beta_theta=beta_theta, lam=spec.lam, feature_norm=c
    )
    ctx = dataclasses.replace(ctx, spec=dataclasses.replace(spec, lr=lr))
    plan = plan_streams(
        ctx,
        loss,
        epochs=epochs,
        clip=clip,
        lr=lr,
        calibration=calibration,
        derivative_clip=L * AUTO_CLIP_SHARE if derivative_clip is None else derivative_clip,
        score_share=score_share if scoring == "private" else 0.0,
        feature_norm=c,
    )
    hooks = HDPHooks(ctx, plan, clip=clip, tag=tag)
    # a deconvolved threshold is refitted on Algorithm 1's weights as trained
    hooks.final_fit = "trained" if threshold == "deconvolved" else final_fit
    facts = plan.facts
    if threshold == "deconvolved":
        check_deconvolvable(loss.name, intercept)
        hooks.record_from = recording_start(facts["T"], epochs)
        hooks.refit = {"lr": lr, "free_bias": intercept == "free"}
    if intercept == "clipped":
        ctx = with_constant_feature(ctx)
    run = fit_glm(ctx, hooks, fit_intercept=intercept == "free", ledger=ledger)
    facts.update(sigma_a=plan.sigma_a, sigma_b=plan.sigma_b)
    return run, hooks


def _own_rows(ctx: RunContext, seen: np.ndarray) -> Any:
    """The label holder's ``seen`` training rows for the refit; where they stay on its engine
    (:class:`~securevfl.data.resident.EngineRows`), its products over them."""
    X = ctx.views[0].X_train
    if not isinstance(X, EngineRows):
        return X[seen]
    rows, engine = np.flatnonzero(seen), ctx.engine(0)
    return (
        lambda w: engine.matvec(X, w, rows),
        lambda g: engine.rmatvec(X, g, rows),
        X.shape[1],
    )
