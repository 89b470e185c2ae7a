"""Release once: each training row crosses a party boundary one time, then the head learns.

The split-learning schedule of the per-row DP methods (afe-vfl, ldp-vfl, pbm-vfl, vafl-dp)
releases every training row's embedding once per epoch, and the bottoms train through those
releases; a budget split over E epochs leaves each release at μ/√(2E) and nothing learns at
ε <= 8 (diagnosis: docs/per-row-release.md). This schedule spends the budget where it buys
accuracy:

1. **Labels** (label holder -> data parties, once): randomized response at ``label_epsilon``
   over the classes (keep with probability e^ε/(e^ε + c - 1), else a uniform other class),
   one draw per row sent to every data party (one draw: parties that pool their copies learn
   no more). The label of a row is thus ε_y-DP against the data parties.
2. **Bottoms** (each data party, locally): its bottom model plus a local probe (one linear
   layer, discarded) is trained on its own columns against the noisy labels by DP-SGD
   (``training.private_bottom``: per-example clip C_g over bottom and probe, noise σ_g·C_g;
   shuffled disjoint batches, one Gaussian release of sensitivity 2·C_g per row and epoch,
   no amplification claimed). The probe sees the bottom's output as it will be released
   (``hooks.bound_rows``: tanh or the C-ball), so the bottom learns to put its norm on the label.
3. **Release** (one pass): every training row's embedding goes out once through the method's
   own mechanism (``hooks.embed``, ``party_message``, ``aggregate``: Gaussian, PBM + secure
   aggregation, ...), phase "train", epoch 0.
4. **Head** (label holder): an MLP on [its own columns (if any), the released rows], trained
   for ``epochs`` epochs on what it received: post-processing, no new event.
5. **Scoring**: each test row is released once through the same mechanism (phase "eval"),
   at less noise than a training row's (it gets the whole target). The head weighs a release
   as it learnt on training rows, where the noise variance was σ²_train; a release's evidence
   about the label (its log-likelihood ratio, for a saturated release ±C plus Gaussian noise:
   2C·r/σ²) grows as 1/σ², so a test row's aggregate is multiplied by σ²_train/σ²_test
   (``hooks.test_gain``) before the head: the same scale of evidence as in training.
   Post-processing with public σ's, no new event.

Per party-row, a training row costs ``bottom_epochs`` gradient releases and one embedding
release; a test row one embedding release; the rows are disjoint, so ε is the larger of the
two (``privacy.dp_bottom.with_test_rows``). The sample unit adds every data party's releases
of the row and the label's randomized response. The label holder's own columns never leave it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.context import RunContext
from securevfl.errors import ConfigError
from securevfl.model import checkpoint
from securevfl.models.nets import seeded_init, top_mlp
from securevfl.results import RunStats
from securevfl.rng import derive_seed
from securevfl.runtime.expect import Expect
from securevfl.training.batching import minibatches
from securevfl.training.loop import TRAIN, Batch, EpochClock, TrainRun
from securevfl.training.optimizer import adam
from securevfl.training.own_model import OWN_MODELS, own_inputs
from securevfl.training.private_bottom import BottomDP, private_step
from securevfl.training.splitnn_trainer import (
    DEFAULT_MLP_LR,
    SplitNNHooks,
    SplitNNState,
    build_models,
    predict_private,
    splitnn_fingerprints,
)


@dataclass(frozen=True)
class ReleaseOncePlan:
    """The schedule's settings: the bottoms' DP-SGD and epochs, the labels' ε."""

    bottom: BottomDP
    bottom_epochs: int
    bottom_lr: float
    label_epsilon: float
    bottom_batch: int
    saturate: bool = True
    own_model: str = "columns"  # the label holder's own model in the head (``own_model``)


def keep_probability(epsilon: float, n_classes: int) -> float:
    """P(randomized response keeps the true class) = e^ε / (e^ε + c - 1)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"label_epsilon must be a finite number > 0, got {epsilon}")
    if n_classes < 2:
        raise ConfigError(f"n_classes must be >= 2 for randomized response, got {n_classes}")
    return 1.0 / (1.0 + (n_classes - 1) * math.exp(-epsilon))


def randomized_response(
    y: np.ndarray, *, n_classes: int, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """ε-DP labels: each kept with ``keep_probability``, else a uniform *other* class."""
    y = np.asarray(y, dtype=np.int64)
    keep = rng.random(len(y)) < keep_probability(epsilon, n_classes)
    other = (y + rng.integers(1, n_classes, size=len(y))) % n_classes
    return np.where(keep, y, other).astype(np.int64)


REFUSAL = (
    "the release-once schedule (label randomized response, DP-SGD bottoms, one release, head "
    "epochs) is not checkpointed; --release-schedule split is"
)
PROBE_SCALE = 4.0  # logits = PROBE_SCALE·(r @ A): a row at the bound can be confident


def probe_directions(P: int, n_classes: int, seed: int) -> torch.Tensor:
    """The public class directions A (P x c) every party's probe shares.

    Shared, not learned per party: with sum aggregation (ldp-vfl, pbm-vfl) the label holder
    adds the parties' embeddings, so their class directions must agree. Two classes on one
    coordinate: (-1, +1). Otherwise unit-norm columns of a seeded Gaussian matrix."""
    if P == 1 and n_classes == 2:
        return torch.tensor([[-1.0, 1.0]])
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn(P, n_classes, generator=gen)
    return A / A.norm(dim=0, keepdim=True)


class _Probe(nn.Module):
    """A data party's bottom, its release bound, and the shared public probe (a trained bias
    per class: the label holder's class shares are not public)."""

    def __init__(self, bottom: nn.Module, bound: Any, A: torch.Tensor) -> None:
        super().__init__()
        self.bottom, self.bound = bottom, bound
        self.register_buffer("A", PROBE_SCALE * A)
        self.bias = nn.Parameter(torch.zeros(A.shape[1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bound(self.bottom(x)) @ self.A + self.bias


def train_bottom(
    ctx: RunContext,
    k: int,
    bottom: nn.Module,
    hooks: SplitNNHooks,
    labels: np.ndarray,
    plan: ReleaseOncePlan,
    rng: np.random.Generator,
) -> None:
    """DP-SGD of party ``k``'s bottom (and its probe's bias) on its columns and ``labels``."""
    n_out = int(ctx.info.n_classes or 2)
    A = probe_directions(
        ctx.spec.embedding_dim, n_out, derive_seed(ctx.shared_seed, purpose="probe")
    )
    model = _Probe(bottom, lambda h: hooks.bound_rows(ctx, k, h), A)
    opt = adam(model.parameters(), lr=plan.bottom_lr)
    X = ctx.views[k].X_train
    n = len(X)
    for epoch in range(plan.bottom_epochs):
        for idx in minibatches(n, plan.bottom_batch, seed=ctx.shared_seed, epoch=1000 + epoch):
            x = torch.as_tensor(X[idx], dtype=torch.float32)
            logits = model(x).detach().requires_grad_(True)
            loss = nn.functional.cross_entropy(logits, torch.as_tensor(labels[idx]))
            (v,) = torch.autograd.grad(loss, logits)
            private_step(model, opt, x, v, dp=plan.bottom, rng=rng)


def release_rows(ctx: RunContext, state: SplitNNState, hooks: SplitNNHooks) -> np.ndarray | None:
    """One pass over the training rows through the method's mechanism; the released
    aggregate at the label holder in training-row order (None elsewhere)."""
    rt, L, n = ctx.rt, ctx.info.label_party, ctx.info.n_train
    senders = [k for k in ctx.data_parties if k != L]
    bs = max(1, min(ctx.spec.batch_size, n))
    out = []
    with torch.no_grad():
        for i, start in enumerate(range(0, n, bs)):
            size = min(bs, n - start)
            batch = Batch(TRAIN, 0, i, i, start, size, n)
            hooks.begin_batch(ctx, batch)
            rt.mark_batch(i, np.arange(start, start + size))
            msgs: dict[int, Any] = dict.fromkeys(senders)
            for k in senders:
                if k in state.bottoms:
                    x = torch.as_tensor(ctx.views[k].X_train[start : start + size])
                    emb = hooks.embed(ctx, k, state.bottoms[k](x.float()), i)
                    msgs[k] = hooks.party_message(ctx, k, emb.numpy(), i)
            agg = hooks.aggregate(ctx, msgs, dst=L, step=i)
            if rt.here(L):
                out.append(np.asarray(agg, dtype=np.float32))
    return np.concatenate(out) if rt.here(L) else None


class _Head(nn.Module):
    """The label holder's head on [its own columns, the released rows] (standardised by
    statistics of what it holds: post-processing)."""

    def __init__(self, own: np.ndarray, released: np.ndarray, n_out: int, hidden: int) -> None:
        super().__init__()
        Z = np.concatenate([own, released], axis=1)
        self.register_buffer("mean", torch.as_tensor(Z.mean(axis=0), dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(Z.std(axis=0) + 1e-6, dtype=torch.float32))
        self.d_own = own.shape[1]
        self.net = top_mlp(Z.shape[1], n_out, hidden=hidden)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net((z - self.mean) / self.scale)


HOLDOUT = 0.2  # share of the training rows the head holds out to choose its epoch


def train_head(
    ctx: RunContext, own: np.ndarray, released: np.ndarray, stats: RunStats
) -> tuple[nn.Module, float]:
    """Adam on the label holder's stored inputs for up to ``epochs`` epochs, keeping the epoch
    with the lowest loss on a held-out fifth of the training rows; where no epoch beats the
    class shares alone there, the head answers the class shares (a head that learnt noise
    would do worse than the majority class). All of it is post-processing of the releases
    and the label holder's own labels and columns. Returns the head and its held-out loss."""
    spec, info = ctx.spec, ctx.info
    n_out = int(info.n_classes or 2)
    head = _Head(own, released, n_out, spec.hidden)
    seeded_init(head.net, derive_seed(ctx.shared_seed, purpose="init/top"))
    lr = spec.lr if spec.lr is not None else DEFAULT_MLP_LR
    opt = adam(head.net.parameters(), lr=lr)
    Z = torch.as_tensor(np.concatenate([own, released], axis=1), dtype=torch.float32)
    y = np.asarray(ctx.views[info.label_party].y_train, dtype=np.int64)
    order = ctx.shared_rng("head/holdout").permutation(len(Z))
    cut = int(round(len(Z) * (1 - HOLDOUT))) if len(Z) >= 10 else len(Z)
    fit, hold = order[:cut], order[cut:]
    shares = np.bincount(y[fit], minlength=n_out) + 1.0
    prior = torch.as_tensor(np.log(shares / shares.sum()), dtype=torch.float32)
    yt = torch.as_tensor(y)

    def held_loss() -> float:
        if len(hold) == 0:
            return -float("inf")
        with torch.no_grad():
            return float(nn.functional.cross_entropy(head(Z[hold]), yt[hold]))

    best = (
        float(nn.functional.cross_entropy(prior.expand(len(hold), -1), yt[hold]))
        if len(hold)
        else float("inf")
    )
    best_state = None  # None: the class shares beat every epoch so far
    clock = EpochClock(stats, classify=True)
    for epoch in range(spec.epochs):
        clock.start()
        for idx in minibatches(len(fit), spec.batch_size, seed=ctx.shared_seed, epoch=epoch):
            rows = fit[idx]
            logits = head(Z[rows])
            loss = nn.functional.cross_entropy(logits, yt[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.batch(float(loss.detach()), logits.detach().numpy().argmax(axis=1), y[rows])
        clock.stop()
        now = held_loss()
        if now < best:
            best = now
            best_state = {k: v.clone() for k, v in head.net.state_dict().items()}
    if best_state is None:  # answer the class shares: zero weights, the log shares as bias
        with torch.no_grad():
            for m in head.net.modules():
                if isinstance(m, nn.Linear):
                    m.weight.zero_()
                    m.bias.zero_()
            head.net[-1].bias.copy_(prior)
        stats.warnings.append(
            "the head did not beat the class shares on held-out training rows: it answers "
            "the majority class (the releases carry too little signal at this epsilon)"
        )
    else:
        head.net.load_state_dict(best_state)
    return head, best


class _HeadOnAggregate(nn.Module):
    """The head as ``predict_private`` calls it: on the aggregate, with the label holder's own
    columns of the rows being scored prepended (set per call by the trainer)."""

    def __init__(self, head: _Head) -> None:
        super().__init__()
        self.head = head
        self.own: np.ndarray | None = None
        self.at = 0

    def forward(self, agg: torch.Tensor) -> torch.Tensor:
        b = agg.shape[0]
        own = self.own[self.at : self.at + b] if self.own is not None else np.zeros((b, 0))
        self.at += b
        return self.head(torch.cat([torch.as_tensor(own, dtype=torch.float32), agg], dim=1))


def _fold_test_gain(head: _Head, gain: float) -> None:
    """Scale a test aggregate by ``gain`` (step 5 of the module docstring) inside the head's
    standardisation of the aggregate's columns, (g·z - m)/s = (z - m/g)/(s/g): the training
    rows are done with, and scoring here and in ``predict`` then run the same arithmetic."""
    with torch.no_grad():
        head.mean[head.d_own :] /= gain
        head.scale[head.d_own :] /= gain


def _best_head(
    ctx: RunContext, plan: ReleaseOncePlan, released: np.ndarray, stats: RunStats
) -> tuple[_Head, np.ndarray, np.ndarray, str]:
    """The head on the label holder's own inputs (``training.own_model``); under ``auto``
    one head per own model, the one with the lower held-out loss kept (training rows only)."""
    candidates = list(OWN_MODELS[:2]) if plan.own_model == "auto" else [plan.own_model]
    if ctx.info.label_party >= ctx.info.data_parties:
        candidates = ["columns"]  # no columns of its own: nothing to choose
    best = None
    for own_model in candidates:
        own_train, own_test = own_inputs(ctx, own_model)
        head, loss = train_head(ctx, own_train, released, RunStats() if best else stats)
        if best is None or loss < best[1]:
            best = (head, loss, own_train, own_test, own_model)
    head, _, own_train, own_test, own_model = best
    return head, own_train, own_test, own_model


def fit_release_once(ctx: RunContext, hooks: SplitNNHooks, *, plan: ReleaseOncePlan) -> TrainRun:
    """The whole schedule (module docstring); ``hooks`` give the method's release mechanism.
    The method accounts the releases from ``plan`` (one per row and party, plus the bottoms'
    ``bottom_epochs`` gradient releases); the returned run builds its FitResult."""
    rt, info = ctx.rt, ctx.info
    L = info.label_party
    if info.task == "regression":
        raise ConfigError(
            "schedule 'release-once' trains bottoms against labels by class: it needs a "
            f"classification task, got {info.task!r} (use --release-schedule split)"
        )
    if checkpoint.active() is not None:  # refused before any release
        checkpoint.active().check_method(REFUSAL, ctx.spec.method)
    if ctx.audit is not None:  # securevfl audit only: it draws further releases from hooks
        ctx.audit.saw(ctx, hooks, plan=plan)
    state = build_models(ctx, hooks)
    own_bottom = state.bottoms.pop(L, None)  # the label holder's columns go to its head as they are
    del own_bottom
    senders = [k for k in ctx.data_parties if k != L]
    stats = RunStats()
    t0 = time.perf_counter()
    labels = None
    if rt.here(L):
        labels = randomized_response(
            ctx.views[L].y_train,
            n_classes=int(info.n_classes or 2),
            epsilon=plan.label_epsilon,
            rng=ctx.noise_rng(L, "labels"),
        ).astype(np.int8)
    with rt.meter.in_phase("labels"):
        classes = int(info.n_classes or 2)
        expect = Expect("labels", dtype="iu", shape=(info.n_train,), lo=0, hi=classes - 1)
        got = rt.broadcast(labels, src=L, dsts=senders, expect=expect)
    for k in state.bottoms:
        rng = ctx.noise_rng(k, "release-once/bottom")
        train_bottom(ctx, k, state.bottoms[k], hooks, np.asarray(got, dtype=np.int64), plan, rng)
    if plan.saturate:  # what is released: the trained bottom, then its saturation layer
        for k in list(state.bottoms):
            edge = hooks.saturation(ctx, k)
            if edge is not None:
                state.bottoms[k] = nn.Sequential(state.bottoms[k], edge)
    t_bottom = time.perf_counter() - t0
    released = release_rows(ctx, state, hooks)
    t_release = time.perf_counter() - t0 - t_bottom
    scores = None
    own_test, own_model = None, None
    if rt.here(L):
        head, _, own_test, own_model = _best_head(ctx, plan, released, stats)
        _fold_test_gain(head, hooks.test_gain())
        state.top = _HeadOnAggregate(head)
    train_s = time.perf_counter() - t0
    if state.top is not None:
        state.top.own = own_test
    scores = predict_private(ctx, state, hooks, step=0, senders=senders)
    for k, m in state.bottoms.items():
        rt.keep_model(k, m)
    if state.top is not None:
        rt.keep_model(L, state.top)
    stats.phases_s = {
        "bottoms": t_bottom,
        "release": t_release,
        "head": train_s - t_bottom - t_release,
    }
    run = TrainRun(state, train_s, scores, splitnn_fingerprints(state), stats, eval_mode="private")
    release = hooks.scoring_release(ctx)
    if own_model is not None:
        run.extra["own_model"] = own_model  # the label holder's pick (``_best_head``)
    holder_columns = info.label_party < info.data_parties  # public: every process knows it
    if holder_columns and plan.own_model != "columns":  # all processes refuse alike
        run.model_refusal = (
            f"--own-model {plan.own_model}: the label holder's own trees are not saved yet "
            "(--own-model columns saves)"
        )
    elif release is not None:  # predict replays the release with fresh noise (and accounts it)
        run.model, run.model_refusal = _export(ctx, state, hooks, release)
    return run


def _export(
    ctx: RunContext, state: SplitNNState, hooks: SplitNNHooks, release: dict[str, Any]
) -> tuple[dict | None, str | None]:
    """The saved parts: each passive bottom (its message released as ``release`` says) and the
    label holder's head on [its own columns, the aggregate], standardised as it was trained."""
    from securevfl.training.export import export_private

    head, head_input, width = None, None, 0
    if state.top is not None:
        inner = state.top.head
        head = inner.net
        width = int(inner.mean.shape[0]) - inner.d_own  # the aggregate's columns
        head_input = {
            "own_columns": True,  # the label holder's own prepared columns come first
            "standardise": True,  # the test gain is folded in (``_fold_test_gain``)
            "arrays": {"head_mean": inner.mean.numpy(), "head_scale": inner.scale.numpy()},
        }
    return export_private(ctx, state, hooks, release, width=width, head=head, head_input=head_input)
