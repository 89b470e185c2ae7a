"""The shared GLM trainer (vertical SGD for generalised linear models), as SPMD code.

Per minibatch: every passive party k computes its intermediate result IR_k = X_k w_k and sends it
to the active party 0; the active party forms theta = X_0 w_0 + b + sum_k IR_k, the loss
derivative, and returns it; each party updates its own block. Methods change only the plug points
of :class:`GLMHooks` (noise on what is sent, what is returned, projection after the update,
how the test split is scored, what each stage released). :func:`fit_glm` runs the whole loop:
training, the eval plug point, scoring, per-epoch statistics and the ledger's events.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from securevfl.context import RunContext, fingerprint
from securevfl.errors import ConfigError
from securevfl.model import checkpoint
from securevfl.model.checkpoint_privacy import ResumableHooks, private_resume
from securevfl.models.glm import GLMLoss, Penalty, default_loss_for, make_loss, make_penalty
from securevfl.results import RunStats
from securevfl.runtime.expect import Expect
from securevfl.training.batching import n_batches
from securevfl.training.export import export_glm
from securevfl.training.glm_rows import compact_labels, derivatives_and_loss, positive
from securevfl.training.loop import EpochClock, Release, TrainRun, compose_releases, train_batches

if TYPE_CHECKING:  # a ledger exists only in a DP run: the accountant is imported by its maker
    from securevfl.privacy.accountant import PrivacyLedger

DEFAULT_GLM_LR = 4.0  # safe for logistic with ||x|| <= 1 (smoothness 1/4: stable below 8)


def default_lr(loss: GLMLoss) -> float:
    """1/beta_theta (the inverse smoothness of the loss with ||x|| <= 1), at most 4.

    Gradient descent is stable below 2/beta_theta; half of that leaves room for the penalty.
    Logistic: 4.0; least squares: 1.0.
    """
    if loss.beta_theta:
        return min(DEFAULT_GLM_LR, 1.0 / loss.beta_theta)
    return 0.5


class GLMHooks(ResumableHooks):
    """Plug points of the GLM trainer; the defaults give non-private VFL.

    Training, per minibatch (``step`` counts training steps over all epochs): each passive party
    sends ``passive_message`` of its IR; the active party returns ``active_message`` of the loss
    derivative (and uses the exact one itself if ``active_uses_exact``); each passive party
    applies ``received_derivative``; every party post-processes its weights with
    ``after_update``. After each epoch: ``end_epoch`` (any bookkeeping), then the trainer composes
    ``epoch_releases`` into the run's ledger.

    Evaluation (the eval plug point, after training): ``configure_evaluate`` may adjust the
    state (e.g. refit the decision threshold from what the active party already holds); the
    passive parties then score with ``score_weights`` (phase ``eval``), and the trainer composes
    ``eval_releases``.
    """

    resumable_as_is = True  # a checkpoint resumes the plain run (``checkpoint_privacy``)

    def passive_message(self, ctx: RunContext, k: int, ir: np.ndarray, step: int) -> np.ndarray:
        """What passive party ``k`` sends instead of its exact IR_k."""
        return ir

    def active_message(self, ctx: RunContext, deriv: np.ndarray, step: int) -> np.ndarray:
        """What the active party returns instead of its exact loss derivative."""
        return deriv

    def message_expect(self, ctx: RunContext, step_name: str, rows: int) -> Expect | None:
        """What the receiver of this trainer's messages accepts (``step_name``: "intermediate
        results", "derivatives" or "scores"): by default one finite float per row; hooks that send
        other things (ciphertexts) return their own rule, or None where their scheme checks."""
        return Expect(step=step_name, shape=(rows,))

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
        """Called on every party after each epoch, before its releases are composed."""

    def epoch_releases(self, ctx: RunContext, epoch: int) -> Iterable[Release]:
        """The privacy events of what the parties released in ``epoch`` (default: none)."""
        return ()

    def saw_received(
        self, ctx: RunContext, idx: np.ndarray, received: dict[int, np.ndarray], epoch: int
    ) -> None:
        """At the active party: the passive messages of rows ``idx`` it received in ``epoch``
        (HDP-VFL keeps the last ones for its label holder's refit; default: nothing)."""

    def configure_evaluate(self, ctx: RunContext, state: GLMState) -> None:
        """Called on every party between training and scoring; may adjust ``state``."""

    def score_weights(self, ctx: RunContext, k: int, w: np.ndarray) -> np.ndarray:
        """The weights passive party ``k`` scores rows with (e.g. noisy ones)."""
        return w

    def eval_releases(self, ctx: RunContext, n_rows: int) -> Iterable[Release]:
        """The privacy events of scoring ``n_rows`` rows (default: none)."""
        return ()

    def waiting(
        self, ctx: RunContext, k: int, idx: np.ndarray, step: int, own=None, y=None
    ) -> None:
        """Local party ``k`` is about to wait for minibatch ``idx``'s message: the active party
        for the passive ones (``own`` = X_0 w_0 + b, ``y`` its encoded labels), a passive party
        for the reply. Work that needs no message can run here, off the critical path (HE-VFL
        encodes its plaintexts; default: nothing)."""

    def batches_per_epoch(self, ctx: RunContext, n: int) -> int:
        """How many of an epoch's ``n`` minibatches run (HE-VFL times a few and extrapolates)."""
        return n

    def combine(
        self,
        ctx: RunContext,
        loss: GLMLoss,
        own: np.ndarray,
        received: list,
        y: np.ndarray,
        step: int,
    ) -> tuple[object, object, float | None]:
        """At the active party: (its own derivative, the message to the passives, mean loss).

        ``own`` is X_0 w_0 + b for the minibatch, ``received`` the passive messages. The default
        sums plain IRs; HE-VFL sums ciphertexts and returns an encrypted residual (no loss).
        """
        exact, value = derivatives_and_loss(loss, own, received, y)  # in row chunks
        return exact, self.active_message(ctx, exact, step), value

    def gradients(
        self, ctx: RunContext, idx: np.ndarray, derivs: dict[int, object], step: int
    ) -> dict[int, tuple[np.ndarray, float]]:
        """Per local data party: (loss gradient of its weights, of the bias) from its derivative.

        Every process calls this once per step, so a protocol that needs a third party (HE-VFL's
        key holder) can run here; the default is local: X_k^T d / b and mean(d).
        """
        b = len(idx)
        return {
            k: (ctx.engine(k).rmatvec(ctx.views[k].X_train, d, idx) / b, float(np.mean(d)))
            for k, d in derivs.items()
        }


@dataclass
class GLMState:
    """Weights held by the parties living in this process."""

    w: dict[int, np.ndarray]
    bias: float = 0.0
    losses: list[float] = field(default_factory=list)
    # party -> the weights it last scored rows with (``hooks.score_weights``): what --save keeps
    scored: dict[int, np.ndarray] = field(default_factory=dict)
    # passive party -> the factor the label holder multiplies its message by (HDP-VFL's refit)
    passive_scale: dict[int, float] = field(default_factory=dict)


def resolve_loss(ctx: RunContext) -> GLMLoss:
    return make_loss(ctx.spec.loss or default_loss_for(ctx.info.task))


def train_glm(
    ctx: RunContext,
    hooks: GLMHooks | None = None,
    *,
    fit_intercept: bool = True,
    penalty: Penalty | None = None,
    ledger: PrivacyLedger | None = None,
    stats: RunStats | None = None,
) -> tuple[GLMState, float]:
    """Run vertical minibatch SGD; return the local state and the training wall time (s).

    Each epoch's ``hooks.epoch_releases`` go into ``ledger``; per-epoch statistics into
    ``stats`` (both optional).
    """
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
        compact_labels(rt.local(active, loss.encode_labels, ctx.views[active].y_train))
        if rt.here(active)
        else None
    )
    clock = EpochClock(stats if stats is not None else RunStats(), classify=info.task == "binary")
    step = 0
    t0 = time.perf_counter()
    n_run = hooks.batches_per_epoch(ctx, n_batches(info.n_train, spec.batch_size))
    ck = checkpoint.active()
    first, guard = 0, None
    if ck is not None:
        ck.check_method(hooks.checkpoint_refusal(ctx), spec.method)
        first, step = _resume(ck, state, clock.stats)
        guard = private_resume(ck, ctx, hooks, ledger, list(state.w), clock.stats)
    for epoch in range(first, spec.epochs):
        if guard is not None:  # written before the epoch's first release
            guard.mark(f"epoch {epoch}")
        clock.start()
        for batch, idx in train_batches(ctx, epoch, step):
            if batch.index >= n_run:
                break
            rt.mark_batch(step, idx)
            sent = {k: rt.local(k, _passive_ir, ctx, hooks, state, k, idx, step) for k in passives}
            own = y_batch = None
            if rt.here(active):
                own = ctx.engine(active).matvec(ctx.views[active].X_train, state.w[active], idx)
                own += state.bias  # in place (matvec's result is new): one n-vector, not two
                y_batch = y_enc[idx]
                hooks.waiting(ctx, active, idx, step, own, y_batch)
            expect = hooks.message_expect(ctx, "intermediate results", len(idx))
            received = rt.gather(sent, dst=active, expect=expect)
            for k in passives:
                if rt.here(k):
                    hooks.waiting(ctx, k, idx, step)
            back = None
            exact = None
            if rt.here(active):
                hooks.saw_received(ctx, idx, {k: received[k] for k in passives}, epoch)
                parts = [received[k] for k in passives]
                exact, back, value = hooks.combine(ctx, loss, own, parts, y_batch, step)
                if value is not None:  # a loss the label holder can see (not under HE)
                    state.losses.append(value)
                    clock.batch(value, positive(own, parts), ctx.views[active].y_train[idx] == 1)
                del parts
            own = y_batch = received = None  # n-vectors each at a full batch: not kept past use
            expect = hooks.message_expect(ctx, "derivatives", len(idx))
            back = rt.broadcast(back, src=active, dsts=passives, expect=expect)
            derivs = {}
            for k in state.w:
                if k == active:
                    derivs[k] = exact if hooks.active_uses_exact() else back
                else:
                    derivs[k] = hooks.received_derivative(ctx, k, back)
            back = exact = None
            grads = hooks.gradients(ctx, idx, derivs, step)
            derivs = None
            for k in state.w:
                g_w, g_b = grads[k]
                grad = g_w + penalty.grad(state.w[k])
                w = penalty.prox(state.w[k] - lr * grad, lr)
                state.w[k] = hooks.after_update(ctx, k, w)
                if k == active and fit_intercept:
                    state.bias -= lr * g_b
            step += 1
        hooks.end_epoch(ctx, epoch)
        compose_releases(ledger, hooks.epoch_releases(ctx, epoch))
        clock.stop()
        if ck is not None and ck.every and (epoch + 1) % ck.every == 0 and epoch + 1 < spec.epochs:
            for k, w in state.w.items():
                arrays, extra = guard.state(k)
                extra.update(step=step, bias=state.bias, stats=checkpoint.epoch_stats(clock.stats))
                ck.save(k, epoch + 1, {"w": w, **arrays}, extra)
    if guard is not None:  # scoring may release next (noisy weights)
        guard.mark("eval")
    for k, w in state.w.items():
        rt.keep_model(k, w.copy())
    return state, time.perf_counter() - t0


def _resume(ck: checkpoint.Checkpoints, state: GLMState, stats: RunStats) -> tuple[int, int]:
    """Load every local party's checkpoint into ``state``; (first epoch to run, step)."""
    epochs = set()
    step = 0
    for k in state.w:
        got = ck.load(k)
        if got is None:
            return 0, 0
        doc, arrays = got
        if arrays["w"].shape != state.w[k].shape:
            raise ConfigError(
                f"checkpoint of party {k} must hold {state.w[k].shape[0]} weights, got "
                f"{arrays['w'].shape}"
            )
        state.w[k] = arrays["w"].astype(np.float64)
        if k == 0:
            state.bias = float(doc["bias"])
        epochs.add(int(doc["epoch"]))
        step = int(doc["step"])
        checkpoint.restore_stats(stats, doc)
    if len(epochs) != 1:
        raise ConfigError(f"the parties' checkpoints must be of one epoch, got {sorted(epochs)}")
    return epochs.pop(), step


def fit_glm(
    ctx: RunContext,
    hooks: GLMHooks | None = None,
    *,
    fit_intercept: bool = True,
    penalty: Penalty | None = None,
    ledger: PrivacyLedger | None = None,
) -> TrainRun:
    """The whole run: train, ``configure_evaluate``, score the test split through the hooks,
    compose every release into ``ledger``; the returned run builds the method's FitResult."""
    hooks = hooks or GLMHooks()
    if ctx.audit is not None:  # securevfl audit only: it draws further releases from hooks
        ctx.audit.saw(ctx, hooks)
    stats = RunStats()
    state, train_s = train_glm(
        ctx, hooks, fit_intercept=fit_intercept, penalty=penalty, ledger=ledger, stats=stats
    )
    hooks.configure_evaluate(ctx, state)
    scores = predict_glm(ctx, state, hooks)
    compose_releases(ledger, hooks.eval_releases(ctx, ctx.info.n_test))
    run = TrainRun(state, train_s, scores, glm_fingerprints(state), stats, eval_mode="hooks")
    run.model = export_glm(ctx, state, scored=state.scored, loss_name=resolve_loss(ctx).name)
    return run


def _passive_ir(
    ctx: RunContext, hooks: GLMHooks, state: GLMState, k: int, idx: np.ndarray, step: int
) -> np.ndarray:
    """Runs at passive party k: its IR_k for the minibatch, as the hooks transform it."""
    ir = ctx.engine(k).matvec(ctx.views[k].X_train, state.w[k], idx)
    return hooks.passive_message(ctx, k, ir, step)


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
                lambda k=k: ctx.engine(k).matvec(
                    getattr(ctx.views[k], attr), _scoring_weights(ctx, hooks, state, k)
                ),
            )
            for k in passives
        }
        # the receiver's own rows of the split (a views hook may have re-split them)
        rows = len(getattr(ctx.views[active], attr)) if rt.here(active) else 0
        received = rt.gather(parts, dst=active, expect=hooks.message_expect(ctx, "scores", rows))
    if not rt.here(active):
        return None
    theta = ctx.engine(active).matvec(getattr(ctx.views[active], attr), state.w[active])
    theta = theta + state.bias
    theta = theta + sum(state.passive_scale.get(k, 1.0) * received[k] for k in passives)
    return loss.predict(theta)


def _scoring_weights(ctx: RunContext, hooks: GLMHooks, state: GLMState, k: int) -> np.ndarray:
    """Passive party k's scoring weights, kept in ``state.scored`` (the part --save writes)."""
    state.scored[k] = hooks.score_weights(ctx, k, state.w[k])
    return state.scored[k]


def glm_fingerprints(state: GLMState) -> dict[int, str]:
    """Per-party fingerprints of the local weights (the active party's includes the bias)."""
    return {
        k: fingerprint(w, np.array([state.bias]) if k == 0 else np.zeros(0))
        for k, w in state.w.items()
    }
