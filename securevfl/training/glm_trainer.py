"""The shared GLM trainer (vertical SGD for generalised linear models), as SPMD code.

Per minibatch: every passive party k computes its intermediate result IR_k = X_k w_k and sends it
to the active party 0; the active party forms theta = X_0 w_0 + b + sum_k IR_k, the loss
derivative, and returns it; each party updates its own block. Methods change only the plug points
of :class:`GLMHooks` (noise on what is sent, what is returned, projection after the update).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from securevfl.methods.base import RunContext, fingerprint
from securevfl.models.glm import GLMLoss, Penalty, default_loss_for, make_loss, make_penalty
from securevfl.training.batching import minibatches

DEFAULT_GLM_LR = 4.0  # safe for logistic with ||x|| <= 1 (smoothness 1/4: stable below 8)


def default_lr(loss: GLMLoss) -> float:
    """1/beta_theta (the inverse smoothness of the loss with ||x|| <= 1), at most 4.

    Gradient descent is stable below 2/beta_theta; half of that leaves room for the penalty.
    Logistic: 4.0; least squares: 1.0.
    """
    if loss.beta_theta:
        return min(DEFAULT_GLM_LR, 1.0 / loss.beta_theta)
    return 0.5


class GLMHooks:
    """Plug points of the GLM trainer; the defaults give non-private VFL."""

    def passive_message(self, ctx: RunContext, k: int, ir: np.ndarray, step: int) -> np.ndarray:
        """What passive party ``k`` sends instead of its exact IR_k."""
        return ir

    def active_message(self, ctx: RunContext, deriv: np.ndarray, step: int) -> np.ndarray:
        """What the active party returns instead of its exact loss derivative."""
        return deriv

    def active_uses_exact(self) -> bool:
        """Whether the active party's own gradient uses the exact derivative (HDP-VFL does)."""
        return True

    def received_derivative(self, ctx: RunContext, k: int, deriv: np.ndarray) -> np.ndarray:
        """What passive party ``k`` does with the derivative it receives before using it."""
        return deriv

    def after_update(self, ctx: RunContext, k: int, w: np.ndarray) -> np.ndarray:
        """Post-process party ``k``'s weights after each step (e.g. norm clipping)."""
        return w

    def end_epoch(self, ctx: RunContext, epoch: int) -> None:
        """Called on every party after each epoch (e.g. to record the epoch's privacy events)."""

    def score_weights(self, ctx: RunContext, k: int, w: np.ndarray) -> np.ndarray:
        """The weights passive party ``k`` scores rows with (e.g. noisy ones)."""
        return w


@dataclass
class GLMState:
    """Weights held by the parties living in this process."""

    w: dict[int, np.ndarray]
    bias: float = 0.0
    losses: list[float] = field(default_factory=list)


def resolve_loss(ctx: RunContext) -> GLMLoss:
    return make_loss(ctx.spec.loss or default_loss_for(ctx.info.task))


def train_glm(
    ctx: RunContext,
    hooks: GLMHooks | None = None,
    *,
    fit_intercept: bool = True,
    penalty: Penalty | None = None,
) -> tuple[GLMState, float]:
    """Run vertical minibatch SGD; return the local state and the training wall time (s)."""
    hooks = hooks or GLMHooks()
    rt, spec, info = ctx.rt, ctx.spec, ctx.info
    loss = resolve_loss(ctx)
    lr = spec.lr if spec.lr is not None else default_lr(loss)
    penalty = penalty or make_penalty(spec.penalty, spec.lam)
    active = 0
    passives = [k for k in ctx.data_parties if k != active]
    state = GLMState(
        w={
            k: np.zeros(info.features_per_party[k])
            for k in rt.local_parties
            if k < info.data_parties
        }
    )
    y_enc = (
        rt.local(active, loss.encode_labels, ctx.views[active].y_train) if rt.here(active) else None
    )
    step = 0
    t0 = time.perf_counter()
    for epoch in range(spec.epochs):
        for idx in minibatches(info.n_train, spec.batch_size, seed=ctx.shared_seed, epoch=epoch):
            rt.mark_batch(step, idx)
            b = len(idx)
            sent = {k: rt.local(k, _passive_ir, ctx, hooks, state, k, idx, step) for k in passives}
            received = rt.gather(sent, dst=active)
            back = None
            exact = None
            if rt.here(active):
                theta = ctx.views[active].X_train[idx] @ state.w[active] + state.bias
                theta = theta + sum(received[k] for k in passives)
                exact = loss.derivative(theta, y_enc[idx])
                back = hooks.active_message(ctx, exact, step)
                state.losses.append(float(np.mean(loss.value(theta, y_enc[idx]))))
            back = rt.broadcast(back, src=active, dsts=passives)
            for k in state.w:
                if k == active:
                    d = exact if hooks.active_uses_exact() else back
                else:
                    d = hooks.received_derivative(ctx, k, back)
                X = ctx.views[k].X_train[idx]
                grad = X.T @ d / b + penalty.grad(state.w[k])
                w = penalty.prox(state.w[k] - lr * grad, lr)
                state.w[k] = hooks.after_update(ctx, k, w)
                if k == active and fit_intercept:
                    state.bias -= lr * float(np.mean(d))
            step += 1
        hooks.end_epoch(ctx, epoch)
    for k, w in state.w.items():
        rt.keep_model(k, w.copy())
    return state, time.perf_counter() - t0


def _passive_ir(
    ctx: RunContext, hooks: GLMHooks, state: GLMState, k: int, idx: np.ndarray, step: int
) -> np.ndarray:
    """Runs at passive party k: its IR_k for the minibatch, as the hooks transform it."""
    return hooks.passive_message(ctx, k, ctx.views[k].X_train[idx] @ state.w[k], step)


def predict_glm(
    ctx: RunContext, state: GLMState, hooks: GLMHooks | None = None, *, split: str = "test"
) -> np.ndarray | None:
    """Score a split: passive parties send X_k w_k, with the weights ``hooks.score_weights``
    gives (metered as phase 'eval'), to the active party."""
    hooks = hooks or GLMHooks()
    rt = ctx.rt
    loss = resolve_loss(ctx)
    active = 0
    passives = [k for k in ctx.data_parties if k != active]
    attr = "X_test" if split == "test" else "X_train"
    with rt.meter.in_phase("eval"):
        parts = {
            k: rt.local(
                k,
                lambda k=k: getattr(ctx.views[k], attr) @ hooks.score_weights(ctx, k, state.w[k]),
            )
            for k in passives
        }
        received = rt.gather(parts, dst=active)
    if not rt.here(active):
        return None
    theta = getattr(ctx.views[active], attr) @ state.w[active] + state.bias
    theta = theta + sum(received[k] for k in passives)
    return loss.predict(theta)


def glm_fingerprints(state: GLMState) -> dict[int, str]:
    """Per-party fingerprints of the local weights (the active party's includes the bias)."""
    return {
        k: fingerprint(w, np.array([state.bias]) if k == 0 else np.zeros(0))
        for k, w in state.w.items()
    }
