"""The shared split-NN trainer (torch), as SPMD code.

Each data party k runs a bottom model on its columns and produces an embedding; the label holder
(party 0, or the server where a method has one) aggregates the embeddings by sum or by
concatenation, trains its top model, and returns the gradient w.r.t. the aggregate (sum: one
broadcast of the same gradient; concat: each party gets its own slice). Methods change only the
plug points of :class:`SplitNNHooks` (what a party sends, how messages are combined, what comes
back).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.methods.base import RunContext, fingerprint
from securevfl.models.nets import bottom_mlp, seeded_init, top_mlp
from securevfl.rng import derive_seed
from securevfl.training.batching import minibatches

DEFAULT_MLP_LR = 0.01


class SplitNNHooks:
    """Plug points of the split-NN trainer; the defaults give non-private split learning."""

    aggregation = "sum"  # "sum" or "concat"
    bounded_embeddings = False  # tanh on the bottom output (PBM needs a bound C)

    def embed(self, ctx: RunContext, k: int, emb: torch.Tensor, step: int) -> torch.Tensor:
        """A differentiable local transform of party ``k``'s bottom output before it is sent
        (clipping, rescaling); the bottom model is trained through it (default: identity)."""
        return emb

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        """What data party ``k`` sends for its embedding (default: the embedding itself)."""
        return emb

    def local_loss(
        self, ctx: RunContext, k: int, emb: torch.Tensor, grad: np.ndarray, step: int
    ) -> torch.Tensor | None:
        """An extra loss party ``k`` adds to its own training from its embedding and the gradient
        it received (regularisers, contrastive terms); None: none (the default)."""
        return None

    def aggregate(
        self, ctx: RunContext, messages: Mapping[int, Any], *, dst: int, step: int
    ) -> np.ndarray | None:
        """Combine the parties' messages at ``dst`` (default: gather, then sum or concat)."""
        got = ctx.rt.gather(messages, dst=dst)
        if got is None:
            return None
        parts = [np.asarray(got[k], dtype=np.float32) for k in sorted(got)]
        return np.sum(parts, axis=0) if self.aggregation == "sum" else np.concatenate(parts, axis=1)

    def grad_message(self, ctx: RunContext, grad: np.ndarray, step: int) -> np.ndarray:
        """What the label holder returns instead of the exact gradient w.r.t. the aggregate."""
        return grad

    def observe(self, ctx: RunContext, step: int, outputs: np.ndarray, y: np.ndarray) -> None:
        """Called at the label holder with each training batch's outputs (e.g. train accuracy)."""


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


def build_models(ctx: RunContext, hooks: SplitNNHooks) -> SplitNNState:
    """Seeded bottom models for local data parties and the top model at the label holder."""
    spec, info, rt = ctx.spec, ctx.info, ctx.rt
    P, H = spec.embedding_dim, spec.hidden
    bottoms = {
        k: seeded_init(
            bottom_mlp(info.features_per_party[k], P, hidden=H, bounded=hooks.bounded_embeddings),
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


def train_splitnn(ctx: RunContext, hooks: SplitNNHooks | None = None) -> tuple[SplitNNState, float]:
    """Train bottoms and top jointly with Adam; return local state and training wall time (s)."""
    hooks = hooks or SplitNNHooks()
    spec, info, rt = ctx.spec, ctx.info, ctx.rt
    lr = spec.lr if spec.lr is not None else DEFAULT_MLP_LR
    L = info.label_party
    P = spec.embedding_dim
    state = build_models(ctx, hooks)
    opts = {k: torch.optim.Adam(m.parameters(), lr=lr) for k, m in state.bottoms.items()}
    top_opt = torch.optim.Adam(state.top.parameters(), lr=lr) if state.top is not None else None
    senders = list(ctx.data_parties)
    step = 0
    t0 = time.perf_counter()
    for epoch in range(spec.epochs):
        for idx in minibatches(info.n_train, spec.batch_size, seed=ctx.shared_seed, epoch=epoch):
            rt.mark_batch(step, idx)
            embs: dict[int, torch.Tensor] = {}
            # every data party has a key (None where it does not live): in a networked run all
            # processes must agree on the senders of a gather
            msgs: dict[int, Any] = dict.fromkeys(senders)
            for k in state.bottoms:
                embs[k] = hooks.embed(
                    ctx,
                    k,
                    state.bottoms[k](
                        torch.as_tensor(ctx.views[k].X_train[idx], dtype=torch.float32)
                    ),
                    step,
                )
                msgs[k] = hooks.party_message(ctx, k, embs[k].detach().numpy(), step)
            agg = hooks.aggregate(ctx, msgs, dst=L, step=step)
            back = None
            if rt.here(L):
                h = torch.as_tensor(agg, dtype=torch.float32).requires_grad_(True)
                logits = state.top(h)
                loss = _task_loss(ctx, logits, ctx.views[L].y_train[idx])
                hooks.observe(ctx, step, logits.detach().numpy(), ctx.views[L].y_train[idx])
                top_opt.zero_grad()
                loss.backward()
                top_opt.step()
                state.losses.append(float(loss.detach()))
                back = hooks.grad_message(ctx, h.grad.numpy(), step)
            if hooks.aggregation == "sum":
                got = rt.broadcast(back, src=L, dsts=[s for s in senders if s != L])
                grads = {k: got for k in state.bottoms}
            else:
                grads = {}
                for k in senders:
                    piece = back[:, k * P : (k + 1) * P] if rt.here(L) else None
                    got = rt.send(piece, src=L, dst=k)
                    if rt.here(k):
                        grads[k] = got
            for k, emb in embs.items():
                opts[k].zero_grad()
                g = torch.as_tensor(np.asarray(grads[k]), dtype=torch.float32)
                extra = hooks.local_loss(ctx, k, emb, np.asarray(grads[k]), step)
                if extra is None:
                    emb.backward(g)
                else:  # d/d emb of <emb, g> is g: the same update plus the local term's
                    ((emb * g).sum() + extra).backward()
                opts[k].step()
            step += 1
    for k, m in state.bottoms.items():
        rt.keep_model(k, m)
    if state.top is not None:
        rt.keep_model(L, state.top)
    return state, time.perf_counter() - t0


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
        agg = plain.aggregate(ctx, msgs, dst=info.label_party, step=-1)
        if not rt.here(info.label_party):
            return None
        out = state.top(torch.as_tensor(agg, dtype=torch.float32))
    if info.task == "regression":
        return out[:, 0].numpy().astype(float)
    return torch.softmax(out, dim=1).numpy().astype(float)


def splitnn_fingerprints(state: SplitNNState) -> dict[Any, str]:
    """Per-party fingerprints of local parameters (the label holder's includes the top model)."""
    out = {
        k: fingerprint(*[p.detach().numpy() for p in m.parameters()])
        for k, m in state.bottoms.items()
    }
    if state.top is not None:
        out["top"] = fingerprint(*[p.detach().numpy() for p in state.top.parameters()])
    return out
