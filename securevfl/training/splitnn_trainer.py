"""The shared split-NN trainer (torch), as SPMD code.

Each data party k runs a bottom model on its columns and produces an embedding; the label holder
(party 0, or the server where a method has one) aggregates the embeddings by sum or by
concatenation, trains its top model, and returns the gradient w.r.t. the aggregate (sum: one
broadcast of the same gradient; concat: each party gets its own slice). Methods change only the
plug points of :class:`SplitNNHooks` (what a party sends, how messages are combined, what comes
back, how the test split is scored, what each stage released). :func:`fit_splitnn` runs the
whole loop: training, the eval plug point, scoring, per-epoch statistics and the ledger's events.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from securevfl.context import RunContext, fingerprint
from securevfl.errors import ConfigError, ProtocolError
from securevfl.model import checkpoint
from securevfl.model.checkpoint_privacy import ResumableHooks, private_resume
from securevfl.models.nets import seeded_init, top_mlp
from securevfl.results import RunStats
from securevfl.rng import derive_seed
from securevfl.runtime.expect import Expect
from securevfl.training.bottom_models import bottom_model
from securevfl.training.export import export_private, export_splitnn, try_export
from securevfl.training.loop import (
    Batch,
    EpochClock,
    Release,
    TrainRun,
    compose_releases,
    eval_batches,
    steps_per_epoch,
    train_batches,
)
from securevfl.training.optimizer import adam
from securevfl.training.private_bottom import BottomDP, output_gradient, private_step

if TYPE_CHECKING:  # a ledger exists only in a DP run: the accountant is imported by its maker
    from securevfl.privacy.accountant import PrivacyLedger

DEFAULT_MLP_LR = 0.01


class SplitNNHooks(ResumableHooks):
    """Plug points of the split-NN trainer; the defaults give non-private split learning.

    Before each batch, training or evaluation, ``begin_batch`` receives its public
    :class:`~securevfl.training.loop.Batch` (phase, epoch, index, rows; kept as ``self.batch``).
    Training, per minibatch (``step``: the global training step): each data party's bottom output
    goes through ``embed`` (differentiable) and ``party_message`` (what is sent); ``aggregate``
    combines the messages at the label holder, which runs its top model, calls ``observe`` and
    returns ``grad_message``; each party trains through ``local_loss``. After each epoch:
    ``end_epoch``, then the trainer composes ``epoch_releases`` into the run's ledger.

    Evaluation (the eval plug point): ``configure_evaluate`` says how the test split is scored:
    ``"private"`` runs it in batches through ``embed``, ``party_message`` and ``aggregate`` (phase
    ``eval``, ``self.batch.phase == "eval"``; ``step`` is then the number of training steps
    taken), ``"plain"`` sends plain embeddings to a plain sum/concat. Then the trainer composes
    ``eval_releases``.
    """

    resumable_as_is = True  # a checkpoint resumes the plain run (``checkpoint_privacy``)
    aggregation = "sum"  # "sum" or "concat"
    bounded_embeddings = False  # tanh on the bottom output (PBM needs a bound C)
    batch: Batch | None = None  # the current batch, set by ``begin_batch``

    def begin_batch(self, ctx: RunContext, batch: Batch) -> None:
        """Called on every party before each batch of training or evaluation."""
        self.batch = batch

    def embed(self, ctx: RunContext, k: int, emb: torch.Tensor, step: int) -> torch.Tensor:
        """A differentiable local transform of party ``k``'s bottom output before it is sent
        (clipping, rescaling); the bottom model is trained through it (default: identity)."""
        return emb

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        """What data party ``k`` sends for its embedding (default: the embedding itself)."""
        return emb

    def bound_rows(self, ctx: RunContext, k: int, h: torch.Tensor) -> torch.Tensor:
        """Party ``k``'s bottom output as bounded for release, row-wise and differentiable
        (the release-once schedule trains its local probe on it; default: as it is, e.g.
        tanh-bounded bottoms)."""
        return h

    def test_gain(self) -> float:
        """σ²_train / σ²_test of the noise in what the label holder receives (the release-once
        head rescales a test row's aggregate by it: module ``training.release_once``); 1.0
        where training and scoring release at the same noise (the default)."""
        return 1.0

    def saturation(self, ctx: RunContext, k: int) -> nn.Module | None:
        """The layer that pushes party ``k``'s bounded output to the edge of its release set,
        direction kept (``models.release_shapes``; the release-once schedule releases through
        it by default); None: released as trained (the default)."""
        return None

    def local_loss(
        self, ctx: RunContext, k: int, emb: torch.Tensor, grad: np.ndarray, step: int
    ) -> torch.Tensor | None:
        """An extra loss party ``k`` adds to its own training from its embedding and the gradient
        it received (regularisers, contrastive terms); None: none (the default)."""
        return None

    def aggregate(
        self, ctx: RunContext, messages: Mapping[int, Any], *, dst: int, step: int
    ) -> np.ndarray | None:
        """Combine the parties' messages at ``dst`` (default: gather, then sum or concat): one
        embedding row per row of the current batch (any count outside a batch: ``same_rows``)."""
        rows = None if self.batch is None else self.batch.size
        width = ctx.spec.embedding_dim
        got = ctx.rt.gather(messages, dst=dst, expect=Expect("embeddings", shape=(rows, width)))
        if got is None:
            return None
        same_rows(got, dst)
        parts = [np.asarray(got[k], dtype=np.float32) for k in sorted(got)]
        return np.sum(parts, axis=0) if self.aggregation == "sum" else np.concatenate(parts, axis=1)

    def grad_message(self, ctx: RunContext, grad: np.ndarray, step: int) -> np.ndarray:
        """What the label holder returns instead of the exact gradient w.r.t. the aggregate."""
        return grad

    def observe(self, ctx: RunContext, step: int, outputs: np.ndarray, y: np.ndarray) -> None:
        """Called at the label holder with each training batch's outputs."""

    def end_epoch(self, ctx: RunContext, epoch: int) -> None:
        """Called on every party after each epoch, before its releases are composed."""

    def epoch_releases(self, ctx: RunContext, epoch: int) -> Iterable[Release]:
        """The privacy events of what the parties released in ``epoch`` (default: none)."""
        return ()

    def bottom_update(self, ctx: RunContext, k: int) -> tuple[BottomDP, np.random.Generator] | None:
        """DP-SGD parameters and noise generator of party ``k``'s bottom update (see
        ``training.private_bottom``); None: the exact update (the default)."""
        return None

    def configure_evaluate(self, ctx: RunContext, state: SplitNNState) -> str:
        """How the test split is scored: ``"private"`` (through these hooks) or ``"plain"``."""
        return "plain"

    def eval_releases(self, ctx: RunContext, n_rows: int) -> Iterable[Release]:
        """The privacy events of scoring ``n_rows`` rows (default: none)."""
        return ()

    def scoring_release(self, ctx: RunContext) -> dict[str, Any] | None:
        """How a data party's message for a privately scored row is released, as data that
        ``securevfl.model.predict`` replays with fresh noise and accounts (``{"mechanism":
        "gaussian", "sigma", "sensitivity", "delta"}``); None: predict cannot replay this
        method's private path, so its model is not saved (default). Optional keys: ``clip``
        ({"mode": "hard"|"soft", "bound": C}: each row clipped to the C-ball before noise)."""
        return None

    def message_release(
        self, ctx: RunContext, k: int, release: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Party ``k``'s own release of a scored row (default: ``release``; a party-specific
        step such as a rescaling factor goes here); None: its message is not released."""
        return release

    def aggregate_scale(self, ctx: RunContext, width: int) -> np.ndarray | None:
        """The per-column factor the label holder applies to the aggregate before its head
        (``width`` columns; default None: none)."""
        return None


@dataclass
class SplitNNState:
    """Models held by the parties living in this process."""

    bottoms: dict[int, nn.Module]
    top: nn.Module | None
    losses: list[float] = field(default_factory=list)


def _out_dim(ctx: RunContext) -> int:
    if ctx.info.task == "regression":
        return 1
    return int(ctx.info.n_classes or 2)


def _task_loss(ctx: RunContext, logits: torch.Tensor, y: np.ndarray) -> torch.Tensor:
    if ctx.info.task == "regression":
        return nn.functional.mse_loss(logits[:, 0], torch.as_tensor(y, dtype=torch.float32))
    return nn.functional.cross_entropy(logits, torch.as_tensor(y, dtype=torch.long))


def same_rows(got: Mapping[int, Any], dst: int) -> None:
    """The parties' messages of one batch hold one row each per example: a sender whose row
    count differs from the receiver's (or, where it sends none, the first sender's) is named."""
    ref = got.get(dst)
    ref = next(iter(got.values())) if ref is None else ref
    for k, v in sorted(got.items()):
        if len(v) != len(ref):
            raise ProtocolError(
                f"party {dst} refused the message of party {k} at step 'embeddings': "
                f"{len(v)} rows where this batch has {len(ref)}"
            )


def build_models(ctx: RunContext, hooks: SplitNNHooks) -> SplitNNState:
    """Seeded bottom models for local data parties and the top model at the label holder."""
    spec, info, rt = ctx.spec, ctx.info, ctx.rt
    P, H = spec.embedding_dim, spec.hidden
    bottoms = {
        k: seeded_init(
            bottom_model(ctx, k, bounded=hooks.bounded_embeddings),
            derive_seed(ctx.shared_seed, purpose=f"init/bottom/{k}"),
        )
        for k in rt.local_parties
        if k < info.data_parties
    }
    top = None
    if rt.here(info.label_party):
        d_in = P if hooks.aggregation == "sum" else P * info.data_parties
        top = seeded_init(
            top_mlp(d_in, _out_dim(ctx), hidden=H), derive_seed(ctx.shared_seed, purpose="init/top")
        )
    return SplitNNState(bottoms=bottoms, top=top)


def train_splitnn(
    ctx: RunContext,
    hooks: SplitNNHooks | None = None,
    *,
    ledger: PrivacyLedger | None = None,
    stats: RunStats | None = None,
) -> tuple[SplitNNState, float]:
    """Train bottoms and top jointly with Adam; return local state and training wall time (s).

    Each epoch's ``hooks.epoch_releases`` go into ``ledger``; per-epoch statistics into
    ``stats`` (both optional).
    """
    hooks = hooks or SplitNNHooks()
    spec, info, rt = ctx.spec, ctx.info, ctx.rt
    lr = spec.lr if spec.lr is not None else DEFAULT_MLP_LR
    L = info.label_party
    P = spec.embedding_dim
    state = build_models(ctx, hooks)
    opts = {k: adam(m.parameters(), lr=lr) for k, m in state.bottoms.items()}
    top_opt = adam(state.top.parameters(), lr=lr) if state.top is not None else None
    senders = list(ctx.data_parties)
    clock = EpochClock(
        stats if stats is not None else RunStats(), classify=info.task != "regression"
    )
    step = 0
    t0 = time.perf_counter()
    ck = checkpoint.active()
    first, guard = 0, None
    if ck is not None:  # hooks that keep no state of theirs, or keep it (checkpoint_privacy)
        ck.check_method(hooks.checkpoint_refusal(ctx), spec.method)
        first, step = _resume(ck, ctx, state, opts, top_opt, clock.stats)
        parties = sorted({*state.bottoms, *([L] if state.top is not None else [])})
        guard = private_resume(ck, ctx, hooks, ledger, parties, clock.stats)
    for epoch in range(first, spec.epochs):
        if guard is not None:  # written before the epoch's first release
            guard.mark(f"epoch {epoch}")
        clock.start()
        for batch, idx in train_batches(ctx, epoch, step):
            hooks.begin_batch(ctx, batch)
            rt.mark_batch(step, idx)
            embs: dict[int, torch.Tensor] = {}
            xs: dict[int, torch.Tensor] = {}
            hs: dict[int, torch.Tensor] = {}
            # every data party has a key (None where it does not live): in a networked run all
            # processes must agree on the senders of a gather
            msgs: dict[int, Any] = dict.fromkeys(senders)
            for k in state.bottoms:
                xs[k] = torch.as_tensor(ctx.views[k].X_train[idx], dtype=torch.float32)
                hs[k] = state.bottoms[k](xs[k])
                embs[k] = hooks.embed(ctx, k, hs[k], step)
                msgs[k] = hooks.party_message(ctx, k, embs[k].detach().numpy(), step)
            agg = hooks.aggregate(ctx, msgs, dst=L, step=step)
            back = None
            if rt.here(L):
                h = torch.as_tensor(agg, dtype=torch.float32).requires_grad_(True)
                logits = state.top(h)
                y = ctx.views[L].y_train[idx]
                loss = _task_loss(ctx, logits, y)
                out = logits.detach().numpy()
                hooks.observe(ctx, step, out, y)
                top_opt.zero_grad()
                loss.backward()
                top_opt.step()
                state.losses.append(float(loss.detach()))
                clock.batch(state.losses[-1], out.argmax(axis=1), y)
                back = hooks.grad_message(ctx, h.grad.numpy(), step)
            expect = Expect("gradients", shape=(len(idx), P))
            if hooks.aggregation == "sum":
                dsts = [s for s in senders if s != L]
                got = rt.broadcast(back, src=L, dsts=dsts, expect=expect)
                grads = {k: got for k in state.bottoms}
            else:
                grads = {}
                for k in senders:
                    piece = back[:, k * P : (k + 1) * P] if rt.here(L) else None
                    got = rt.send(piece, src=L, dst=k, expect=expect)
                    if rt.here(k):
                        grads[k] = got
            for k, emb in embs.items():
                opts[k].zero_grad()
                g = torch.as_tensor(np.asarray(grads[k]), dtype=torch.float32)
                extra = hooks.local_loss(ctx, k, emb, np.asarray(grads[k]), step)
                private = hooks.bottom_update(ctx, k)
                if private is not None:  # DP-SGD on the bottom: its own Gaussian release
                    v = output_gradient(hs[k], emb, g, extra)
                    private_step(state.bottoms[k], opts[k], xs[k], v, dp=private[0], rng=private[1])
                    continue
                if extra is None:
                    emb.backward(g)
                else:  # d/d emb of <emb, g> is g: the same update plus the local term's
                    ((emb * g).sum() + extra).backward()
                opts[k].step()
            step += 1
        hooks.end_epoch(ctx, epoch)
        compose_releases(ledger, hooks.epoch_releases(ctx, epoch))
        clock.stop()
        if ck is not None and ck.every and (epoch + 1) % ck.every == 0 and epoch + 1 < spec.epochs:
            _checkpoint(ck, guard, ctx, epoch + 1, step, state, opts, top_opt, clock.stats)
    if guard is not None:  # scoring may release next (private scoring)
        guard.mark("eval")
    for k, m in state.bottoms.items():
        rt.keep_model(k, m)
    if state.top is not None:
        rt.keep_model(L, state.top)
    return state, time.perf_counter() - t0


def _checkpoint(
    ck: checkpoint.Checkpoints,
    guard: Any,
    ctx: RunContext,
    epoch: int,
    step: int,
    state: SplitNNState,
    opts: dict[int, Any],
    top_opt: Any,
    stats: RunStats,
) -> None:
    """Every local party's bottom (and the label holder's head) with their Adam state, and
    the hooks' state and the run's releases (``guard``: ``checkpoint_privacy``)."""
    L = ctx.info.label_party
    for k in sorted({*state.bottoms, *([L] if state.top is not None else [])}):
        arrays, extra = guard.state(k)
        extra.update(step=step, stats=checkpoint.epoch_stats(stats))
        if k in state.bottoms:
            arrays.update(checkpoint.torch_arrays("bottom.", state.bottoms[k], opts[k]))
        if k == L and state.top is not None:
            arrays.update(checkpoint.torch_arrays("head.", state.top, top_opt))
        ck.save(k, epoch, arrays, extra)


def _resume(
    ck: checkpoint.Checkpoints,
    ctx: RunContext,
    state: SplitNNState,
    opts: dict[int, Any],
    top_opt: Any,
    stats: RunStats,
) -> tuple[int, int]:
    """Load every local party's checkpoint; (first epoch to run, step); (0, 0) when not
    resuming."""
    L = ctx.info.label_party
    epochs, step = set(), 0
    for k in sorted({*state.bottoms, *([L] if state.top is not None else [])}):
        got = ck.load(k)
        if got is None:
            return 0, 0
        doc, arrays = got
        if k in state.bottoms:
            checkpoint.load_torch("bottom.", state.bottoms[k], opts[k], arrays)
        if k == L and state.top is not None:
            checkpoint.load_torch("head.", state.top, top_opt, arrays)
        epochs.add(int(doc["epoch"]))
        step = int(doc["step"])
        checkpoint.restore_stats(stats, doc)
    if len(epochs) != 1:
        raise ConfigError(f"the parties' checkpoints must be of one epoch, got {sorted(epochs)}")
    return epochs.pop(), step


def fit_splitnn(
    ctx: RunContext, hooks: SplitNNHooks | None = None, *, ledger: PrivacyLedger | None = None
) -> TrainRun:
    """The whole run: train, ask ``configure_evaluate`` how to score, score the test split
    (privately through the hooks, or plainly), compose every release into ``ledger``; the
    returned run builds the method's FitResult."""
    hooks = hooks or SplitNNHooks()
    stats = RunStats()
    state, train_s = train_splitnn(ctx, hooks, ledger=ledger, stats=stats)
    mode = hooks.configure_evaluate(ctx, state)
    if mode == "private":
        steps = ctx.spec.epochs * steps_per_epoch(ctx)
        scores = predict_private(ctx, state, hooks, step=steps)
    elif mode == "plain":
        scores = predict_splitnn(ctx, state, hooks)
    else:
        raise ValueError(f"configure_evaluate must return 'private' or 'plain', got {mode!r}")
    compose_releases(ledger, hooks.eval_releases(ctx, ctx.info.n_test))
    run = TrainRun(state, train_s, scores, splitnn_fingerprints(state), stats, eval_mode=mode)
    # plain: the parts alone reproduce the scores; private: only where predict can replay the
    # release (``scoring_release``), else TrainRun.result says why nothing is saved
    release = hooks.scoring_release(ctx) if mode == "private" else None
    if mode == "plain":
        run.model, run.model_refusal = try_export(
            export_splitnn, ctx, state, aggregation=hooks.aggregation
        )
    elif release is not None:
        width = 0 if state.top is None else _first_linear(state.top).in_features
        run.model, run.model_refusal = export_private(ctx, state, hooks, release, width=width)
    return run


def _first_linear(m: nn.Module) -> nn.Linear:
    return next(x for x in m.modules() if isinstance(x, nn.Linear))


def _scores(ctx: RunContext, out: torch.Tensor) -> np.ndarray:
    """The label holder's test scores from the top model's outputs."""
    if ctx.info.task == "regression":
        return out[:, 0].numpy().astype(float)
    return torch.softmax(out, dim=1).numpy().astype(float)


def predict_private(
    ctx: RunContext,
    state: SplitNNState,
    hooks: SplitNNHooks,
    *,
    step: int,
    split: str = "test",
    senders: list[int] | None = None,
) -> np.ndarray | None:
    """Scores of a split through the method's own path (``embed``, ``party_message``,
    ``aggregate``) in batches of the training batch size, phase 'eval': the label holder never
    sees what training would not have shown it. ``senders``: the data parties whose messages
    the label holder aggregates (default: all)."""
    rt, L = ctx.rt, ctx.info.label_party
    attr = "X_test" if split == "test" else "X_train"
    n = ctx.info.n_test if split == "test" else ctx.info.n_train
    outs = []
    with rt.meter.in_phase("eval"), torch.no_grad():
        for batch in eval_batches(n, ctx.spec.batch_size, step):
            hooks.begin_batch(ctx, batch)
            rows = slice(batch.start, batch.start + batch.size)
            msgs: dict[int, Any] = dict.fromkeys(ctx.data_parties if senders is None else senders)
            for k, m in state.bottoms.items():
                x = torch.as_tensor(getattr(ctx.views[k], attr)[rows], dtype=torch.float32)
                emb = hooks.embed(ctx, k, m(x), step)
                msgs[k] = hooks.party_message(ctx, k, emb.numpy(), step)
            agg = hooks.aggregate(ctx, msgs, dst=L, step=step)
            if rt.here(L):
                outs.append(state.top(torch.as_tensor(agg, dtype=torch.float32)))
    if not rt.here(L):
        return None
    return _scores(ctx, torch.cat(outs))


def predict_splitnn(
    ctx: RunContext, state: SplitNNState, hooks: SplitNNHooks | None = None, *, split: str = "test"
) -> np.ndarray | None:
    """Scores of a split at the label holder; embeddings travel plainly (phase 'eval')."""
    hooks = hooks or SplitNNHooks()
    plain = SplitNNHooks()
    plain.aggregation = hooks.aggregation
    rt, info = ctx.rt, ctx.info
    attr = "X_test" if split == "test" else "X_train"
    with rt.meter.in_phase("eval"), torch.no_grad():
        msgs: dict[int, Any] = dict.fromkeys(ctx.data_parties)
        for k, m in state.bottoms.items():
            msgs[k] = m(torch.as_tensor(getattr(ctx.views[k], attr), dtype=torch.float32)).numpy()
        agg = plain.aggregate(ctx, msgs, dst=info.label_party, step=0)  # one batch: the split
        if not rt.here(info.label_party):
            return None
        out = state.top(torch.as_tensor(agg, dtype=torch.float32))
    return _scores(ctx, out)


def splitnn_fingerprints(state: SplitNNState) -> dict[Any, str]:
    """Per-party fingerprints of local parameters (the label holder's includes the top model)."""
    out = {
        k: fingerprint(*[p.detach().numpy() for p in m.parameters()])
        for k, m in state.bottoms.items()
    }
    if state.top is not None:
        out["top"] = fingerprint(*[p.detach().numpy() for p in state.top.parameters()])
    return out
