"""Split-NN with a server: compressed messages, sync/async rounds, first- or zeroth-order clients.

Parties: clients 0..K-1 (features, a bottom model each) and the server K (labels, top model).
Per round (``securevfl.training.rounds``) each sending client uploads C_up(h_k) for the round's
rows; the server completes the batch (async: the other clients' latest embeddings from its table),
computes what each active client gets back with its top model *before* it steps (so every reply
of a round is taken at one server model: the authors' code steps first, mixing two models), then
trains its top model by first order. What goes back to an active client k (``client_grad``):

* ``foo``: C_down(∂L/∂h_k), a b x d_h gradient (split learning, Compressed-VFL, VAFL);
* ``zo-output`` (VFL-CZOFO): C_down(δ), the loss differences along q directions at h_k that the
  client and the server both draw from a generator derived from the run's shared seed for that
  client (so the directions never cross the wire; they are public randomness, not a secret of
  the pair); the client forms Avg-RandGradEst and backpropagates it through its model;
* ``zo-model`` (ZOO-VFL): the client uploads h_k and its outputs at q perturbed copies of its
  weights (its own private directions); the server returns δ; the client steps on the estimate.

Every message is the ``protocols.compress`` bytes (optionally range-coded), so the meter counts
packed bits, not floats; uplink rows may go as differences from their last visit (row_reference).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from protocols.compress import ROUNDINGS, decode, encode
from securevfl.context import RunContext
from securevfl.rng import derive_seed
from securevfl.runtime.expect import Expect
from securevfl.training.optimizer import adam
from securevfl.training.rounds import Round, curve_marks, plan_rounds
from securevfl.training.row_reference import RowReferences
from securevfl.training.splitnn_trainer import DEFAULT_MLP_LR, SplitNNHooks, build_models
from securevfl.training.zeroth_order import (
    add_to_parameters,
    flat_parameters,
    sample_directions,
    zo_estimate,
)

CLIENT_GRADS = ("foo", "zo-output", "zo-model")


@dataclass(frozen=True)
class CascadeConfig:
    """How a run moves: see the module docstring."""

    client_grad: str = "foo"
    schedule: str = "sync"
    q: int = 1
    mu: float = 1e-3
    direction: str = "sphere"
    per_sample: bool = False
    uplink_bits: int = 32
    downlink_bits: int = 32
    topk: float = 1.0  # share of entries kept on both links (1.0: no sparsification)
    stochastic_rounding: str = "none"  # links (none/up/down/both) rounding stochastically
    clip_range: str = "none"  # links quantising on mean ± c_b std instead of min/max
    entropy_coding: str = "none"  # links whose quantiser codes are range-coded (lossless)
    uplink_delta_bits: int = 0  # > 0: a row's difference from its last decoded value
    max_staleness: int = 0
    curve_points: int = 0  # test-accuracy measurements during training (instrument, unmetered)


class CascadeHooks:
    """What private variants change: the client's embedding before it is encoded; what the server
    sees arrive (to account releases as they happen) and each ZO reply (for measurement)."""

    def release(self, ctx: RunContext, k: int, h: np.ndarray, step: int) -> np.ndarray:
        """The embedding rows client k releases (default: as computed)."""
        return h

    def scoring_release(self, ctx: RunContext) -> dict[str, Any] | None:
        """How ``release`` acts on a scored row, as data predict replays (the split-NN hooks'
        ``scoring_release``); None: not replayable (a hook that changes ``release`` then
        saves no model)."""
        return None

    def on_upload(self, k: int, rows: int, step: int) -> None:
        """At the server: client k's message with ``rows`` embedding rows arrived."""

    def on_zo_reply(self, k: int, estimate: np.ndarray, true_grad: np.ndarray, step: int) -> None:
        """The estimate client k will form from this reply, beside the exact gradient."""


@dataclass
class CascadeStats:
    rounds: int = 0
    replies: dict[int, int] = field(default_factory=dict)
    staleness: list[int] = field(default_factory=list)
    refreshes: int = 0
    curve: list[dict[str, float]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def _losses(ctx: RunContext, logits: torch.Tensor, y: np.ndarray) -> torch.Tensor:
    """Per-row task losses (the batch loss is their mean)."""
    if ctx.info.task == "regression":
        t = torch.as_tensor(y, dtype=torch.float32)
        return nn.functional.mse_loss(logits[:, 0], t, reduction="none")
    t = torch.as_tensor(y, dtype=torch.long)
    return nn.functional.cross_entropy(logits, t, reduction="none")


class CascadeTrainer:
    """One run's models, generators and table; :meth:`train` runs the plan."""

    def __init__(self, ctx: RunContext, cfg: CascadeConfig, hooks: CascadeHooks | None = None):
        self.ctx, self.cfg, self.hooks = ctx, cfg, hooks or CascadeHooks()
        spec, info = ctx.spec, ctx.info
        self.K, self.S = info.data_parties, info.label_party
        shape = SplitNNHooks()
        shape.aggregation = spec.aggregation
        self.state = build_models(ctx, shape)
        lr = spec.lr if spec.lr is not None else DEFAULT_MLP_LR
        self.opts = {k: adam(m.parameters(), lr=lr) for k, m in self.state.bottoms.items()}
        top = self.state.top
        self.top_opt = adam(top.parameters(), lr=lr) if top is not None else None
        self.plan = plan_rounds(
            info.n_train,
            spec.batch_size,
            spec.epochs,
            self.K,
            schedule=cfg.schedule,
            seed=ctx.shared_seed,
            max_staleness=cfg.max_staleness,
        )

        # ZO-output directions: one generator per client, one copy at the client, one at the server
        pair = [derive_seed(ctx.shared_seed, purpose=f"zo/dirs/{k}") for k in range(self.K)]
        self.client_dirs = {k: np.random.default_rng(pair[k]) for k in self.state.bottoms}
        at_server = range(self.K) if top is not None else ()
        self.server_dirs = {k: np.random.default_rng(pair[k]) for k in at_server}
        self.model_dirs = {k: ctx.noise_rng(k, "zo/model-dirs") for k in self.state.bottoms}
        # stochastic rounding: each party's own generator (its rounding is no one else's business)
        self.quant_rngs = {k: ctx.noise_rng(k, "quantise") for k in ctx.rt.local_parties}
        self.curve_rng = np.random.default_rng(0)  # the instrument must not move training's draws
        self.table: dict[int, np.ndarray] = {}
        db = cfg.uplink_delta_bits  # one copy of the per-row references at each end of the uplink
        self.refs = [RowReferences(info.n_train, cfg.uplink_bits, db) for _ in "cs"] if db else None
        self.stats = CascadeStats(replies=dict.fromkeys(range(self.K), 0))

    # --- messages ------------------------------------------------------------------------------
    def _rows(self, step: str, rows: int, lead: tuple[int, ...] = ()) -> Expect:
        """A packed message of ``rows`` embedding-width rows (``lead``: stacked copies)."""
        return Expect(step, kind="packed", shape=(*lead, rows, self.ctx.spec.embedding_dim))

    def _upload_expect(self, r: Round) -> dict[int, Expect]:
        """What the server accepts from each sender of round ``r`` (the plan is public)."""
        b, q = len(r.idx), self.cfg.q
        stacked = self.cfg.client_grad == "zo-model"
        return {
            k: self._rows("embeddings", b, (1 + q,) if stacked and k in r.active else ())
            for k in r.senders
        }

    def _reply_expect(self, rows: int) -> Expect:
        """What an active client accepts back: a gradient of its rows or q loss differences
        (per row where ``per_sample``)."""
        cfg = self.cfg
        if cfg.client_grad == "foo":
            return self._rows("gradients", rows)
        per_row = cfg.per_sample and cfg.client_grad == "zo-output"
        return Expect(
            "loss differences", kind="packed", shape=(cfg.q, rows) if per_row else (cfg.q,)
        )

    def _enc(self, x: np.ndarray, bits: int, party: int, rng=None) -> bytes:
        """``party``'s message (clients: the uplink's quantiser, the server: the downlink's);
        ``rng``: the curve instrument's own (its messages skip the lossless entropy stage)."""
        cfg, n = self.cfg, int(np.prod(x.shape))
        k = None if cfg.topk >= 1.0 else max(1, int(np.ceil(cfg.topk * n)))
        on = ("down" if party == self.S else "up", "both")
        sr, coded = cfg.stochastic_rounding in on, cfg.entropy_coding in on and rng is None
        how = {"clip": cfg.clip_range in on, "rng": rng or self.quant_rngs.get(party)}
        return encode(x, bits=bits, topk=k, rounding=ROUNDINGS[sr], entropy=coded, **how)

    def _x(self, k: int, idx: np.ndarray | None, split: str = "train") -> torch.Tensor:
        X = getattr(self.ctx.views[k], f"X_{split}")
        return torch.as_tensor(X if idx is None else X[idx], dtype=torch.float32)

    def _combine(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return (
            torch.stack(parts).sum(0) if self.ctx.spec.aggregation == "sum" else torch.cat(parts, 1)
        )

    def _upload(
        self, k: int, idx: np.ndarray | None, step: int, *, active: bool = False
    ) -> tuple[bytes, Any]:
        """Client k's message for rows ``idx`` and what it keeps to use the reply."""
        model = self.state.bottoms[k]
        h = model(self._x(k, idx))
        rows = self.hooks.release(self.ctx, k, h.detach().numpy().astype(np.float64), step)
        if self.refs and idx is not None:  # not zo-model (check_cascade)
            return self.refs[0].send(k, idx, rows, lambda x, bits: self._enc(x, bits, k)), h
        if self.cfg.client_grad != "zo-model" or not active:
            return self._enc(rows, self.cfg.uplink_bits, k), h
        params = list(model.parameters())
        w = flat_parameters(params)
        dirs = sample_directions(self.model_dirs[k], self.cfg.direction, (self.cfg.q, w.size))
        outs = [rows]
        with torch.no_grad():
            for v in dirs:
                add_to_parameters(params, self.cfg.mu * v)
                hv = model(self._x(k, idx)).numpy().astype(np.float64)
                outs.append(self.hooks.release(self.ctx, k, hv, step))
                add_to_parameters(params, -self.cfg.mu * v)
        return self._enc(np.stack(outs), self.cfg.uplink_bits, k), dirs

    # --- the server ----------------------------------------------------------------------------
    def _replies(self, r: Round, got: dict[int, Any], step: int) -> dict[int, bytes]:
        cfg, idx = self.cfg, r.idx
        rx = self.refs[1].receive if self.refs else lambda k, idx, msg: decode(msg)
        fresh = {k: rx(k, idx, got[k]) for k in r.senders}
        for k in r.senders:
            self.hooks.on_upload(k, len(idx), step)
        stacked = cfg.client_grad == "zo-model"  # an active client's [h, h(w + μ v_1), ...]
        base = {k: fresh[k][0] if stacked and k in r.active else fresh[k] for k in fresh}
        for k in range(self.K):
            if k in base and k in self.table:
                self.table[k][idx] = base[k]
            elif k not in base:
                base[k] = self.table[k][idx]
        parts = [torch.as_tensor(base[k], dtype=torch.float32).requires_grad_(k in r.active)
                 for k in range(self.K)]  # fmt: skip
        y = self.ctx.views[self.S].y_train[idx]
        per_row = _losses(self.ctx, self.state.top(self._combine(parts)), y)
        loss = per_row.mean()
        self.top_opt.zero_grad()
        loss.backward()  # the top model's gradient and ∂L/∂h_k, all at the pre-step model
        out: dict[int, bytes] = {}
        for k in r.active:
            g = parts[k].grad.numpy().astype(np.float64)
            if cfg.client_grad == "foo":
                out[k] = self._enc(g, cfg.downlink_bits, self.S)
                continue
            with torch.no_grad():
                if cfg.client_grad == "zo-output":
                    dirs = sample_directions(
                        self.server_dirs[k], cfg.direction, (cfg.q, *base[k].shape)
                    )
                    moved = base[k][None] + cfg.mu * dirs
                else:
                    dirs, moved = None, fresh[k][1:]
                deltas = self._deltas(parts, k, moved, per_row.detach(), y)
            out[k] = self._enc(deltas, cfg.downlink_bits, self.S)
            if dirs is not None:
                est = zo_estimate(decode(out[k]), dirs, mu=cfg.mu, direction=cfg.direction)
                self.hooks.on_zo_reply(k, est * len(idx), g * len(idx), step)  # per-row scale
        self.top_opt.step()
        self.stats.losses.append(float(loss.detach()))
        return out

    def _deltas(self, parts, k: int, moved: np.ndarray, base_rows, y) -> np.ndarray:
        """Loss differences with client k's embedding replaced by each of ``moved`` (q, b, d)."""
        q, b = moved.shape[0], moved.shape[1]
        stacked = [p.detach().repeat(q, 1) for p in parts]
        stacked[k] = torch.as_tensor(moved.reshape(q * b, -1), dtype=torch.float32)
        rows = _losses(self.ctx, self.state.top(self._combine(stacked)), np.tile(y, q))
        # per row first: the float32 losses cancel more accurately than their means
        diff = (rows.reshape(q, b) - base_rows[None]).numpy().astype(np.float64) / b
        per_sample = self.cfg.per_sample and self.cfg.client_grad == "zo-output"
        return diff if per_sample else diff.sum(axis=1)

    # --- a client using its reply --------------------------------------------------------------
    def _apply(self, k: int, kept: Any, reply: bytes, idx: np.ndarray) -> None:
        cfg, opt = self.cfg, self.opts[k]
        opt.zero_grad()
        back = decode(reply)
        if cfg.client_grad == "foo":
            self.ctx.rt.keep_local(k, "embedding-gradient", back)
            kept.backward(torch.as_tensor(back, dtype=torch.float32))
        elif cfg.client_grad == "zo-output":
            dirs = sample_directions(self.client_dirs[k], cfg.direction, (cfg.q, *kept.shape))
            est = zo_estimate(back, dirs, mu=cfg.mu, direction=cfg.direction)
            self.ctx.rt.keep_local(k, "embedding-gradient", est)  # what a label attack scores
            kept.backward(torch.as_tensor(est, dtype=torch.float32))
        else:
            est = zo_estimate(back, kept, mu=cfg.mu, direction=cfg.direction)
            params = list(self.state.bottoms[k].parameters())
            off = 0
            for p in params:
                n = p.numel()
                p.grad = torch.as_tensor(est[off : off + n].reshape(p.shape), dtype=p.dtype)
                off += n
        opt.step()

    # --- the loop ------------------------------------------------------------------------------
    def train(self) -> float:
        rt, S = self.ctx.rt, self.S
        t0 = time.perf_counter()
        if self.cfg.schedule == "async":
            self._fill_table()
        marks = curve_marks(len(self.plan), self.cfg.curve_points)
        for step, r in enumerate(self.plan):
            rt.mark_batch(step, r.idx)
            msgs: dict[int, Any] = dict.fromkeys(r.senders)
            kept: dict[int, Any] = {}
            for k in r.senders:
                if rt.here(k):
                    msgs[k], kept[k] = self._upload(k, r.idx, step, active=k in r.active)
            got = rt.gather(msgs, dst=S, expect=self._upload_expect(r))
            replies = self._replies(r, got, step) if rt.here(S) else {}
            reply = self._reply_expect(len(r.idx))
            for k in r.active:
                back = rt.send(replies.get(k), src=S, dst=k, expect=reply)
                if rt.here(k):
                    self._apply(k, kept[k], back, r.idx)
                self.stats.replies[k] += 1
            self.stats.rounds += 1
            self.stats.staleness.append(r.staleness)
            self.stats.refreshes += len(r.refresh)
            if step + 1 in marks:
                self._curve_point(step + 1)
        for k, m in self.state.bottoms.items():
            rt.keep_model(k, m)  # in k's view only (model completion reads it)
        return time.perf_counter() - t0

    def _fill_table(self) -> None:
        """Async: every client uploads all its training rows once (phase ``setup``)."""
        rt, S = self.ctx.rt, self.S
        with rt.meter.in_phase("setup"), torch.no_grad():
            msgs: dict[int, Any] = dict.fromkeys(range(self.K))
            for k in self.state.bottoms:
                msgs[k] = self._upload(k, None, -1)[0]
            got = rt.gather(msgs, dst=S, expect=self._rows("embeddings", self.ctx.info.n_train))
        if rt.here(S):
            self.table = {k: decode(got[k]) for k in range(self.K)}
            for k in range(self.K):
                self.hooks.on_upload(k, len(self.table[k]), -1)

    def _curve_point(self, rounds: int) -> None:
        """Test accuracy now (an instrument: unmetered control plane, not a protocol release)."""
        rt, S = self.ctx.rt, self.S
        embs = {}
        for k, m in self.state.bottoms.items():
            with torch.no_grad():
                h = m(self._x(k, None, "test")).numpy()
            embs[k] = decode(self._enc(h, self.cfg.uplink_bits, k, self.curve_rng))
        mine = {"embs": embs, "train_bytes": rt.meter.phases["train"].bytes_total}
        got = rt.collect(mine, dst=S)
        if not rt.here(S):
            return
        uniq = list({id(v): v for v in got.values()}.values())
        parts, sent = {}, 0
        for v in uniq:
            parts.update(v["embs"])
            sent += v["train_bytes"]
        with torch.no_grad():
            agg = self._combine(
                [torch.as_tensor(parts[k], dtype=torch.float32) for k in range(self.K)]
            )
            out = self.state.top(agg).numpy()
        y = self.ctx.views[S].y_test
        regression = self.ctx.info.task == "regression"
        acc = float("nan") if regression else float((out.argmax(1) == y).mean())
        self.stats.curve.append({"rounds": rounds, "train_bytes": sent, "accuracy": acc})

    def uplink(self) -> dict[str, Any]:
        """How a client's scoring message is compressed (``securevfl.model.predict`` replays it)."""
        cfg, on = self.cfg, ("up", "both")
        return {
            "bits": int(cfg.uplink_bits),
            "topk": float(cfg.topk),
            "stochastic": cfg.stochastic_rounding in on,
            "clip": cfg.clip_range in on,
            "entropy": cfg.entropy_coding in on,
        }

    def export(self) -> tuple[dict | None, str | None]:
        """The saved parts (bottoms with the uplink's compression and the hooks' release, the
        server's head), or why not: a release that predict cannot replay."""
        from securevfl.training.export import export_splitnn, try_export

        release = self.hooks.scoring_release(self.ctx)
        if type(self.hooks).release is not CascadeHooks.release and release is None:
            return None, "its clients' release is not one that predict replays"
        parts, why = try_export(
            export_splitnn,
            self.ctx,
            self.state,
            aggregation=self.ctx.spec.aggregation,
            release=release,
        )
        for k, part in (parts or {}).items():
            if k < self.K:
                part.meta["uplink"] = self.uplink()
        return parts, why

    def predict(self) -> np.ndarray | None:
        """Test scores at the server through the uplink (clients' releases, phase ``eval``)."""
        rt, S, info = self.ctx.rt, self.S, self.ctx.info
        with rt.meter.in_phase("eval"), torch.no_grad():
            msgs: dict[int, Any] = dict.fromkeys(range(self.K))
            for k, m in self.state.bottoms.items():
                rows = self.hooks.release(self.ctx, k, m(self._x(k, None, "test")).numpy(), -1)
                msgs[k] = self._enc(rows.astype(np.float64), self.cfg.uplink_bits, k)
            got = rt.gather(msgs, dst=S, expect=self._rows("embeddings", info.n_test))
            if not rt.here(S):
                return None
            parts = [torch.as_tensor(decode(got[k]), dtype=torch.float32) for k in range(self.K)]
            for k in range(self.K):
                self.hooks.on_upload(k, len(parts[k]), -1)
            out = self.state.top(self._combine(parts))
        scores = out[:, 0] if info.task == "regression" else torch.softmax(out, dim=1)
        return scores.numpy().astype(float)
