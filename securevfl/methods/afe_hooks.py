"""VFL-AFE's split-NN hooks: the passive parties' clip / rescale / noise, their local losses,
the label holder's head epochs, and the privacy events of what each stage released (the
argument is in ``securevfl.methods.afe_vfl``'s docstring)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.context import RunContext
from securevfl.methods.afe_checkpoint import AFECheckpoint
from securevfl.methods.dp_bottom_options import BottomPlan
from securevfl.model.checkpoint_privacy import CountedNormals
from securevfl.models.afe_losses import (
    contrastive_loss,
    negentropy,
    pair_distances,
    paired_contrastive_loss,
)
from securevfl.models.release_shapes import Sphere
from securevfl.privacy.afe import (
    CLIPS,
    RescaleState,
    batch_stats,
    pairings,
    release_stats,
    released_rows,
    stats_of,
)
from securevfl.privacy.ceiling import accuracy_ceiling, composed_mu
from securevfl.privacy.events import gaussian_event
from securevfl.rng import derive_seed
from securevfl.training import TRAIN, Release, SplitNNHooks, n_batches
from securevfl.training.fcm import pseudo_labels
from securevfl.training.head_refit import ReleasedBatches, refit_head
from securevfl.training.private_bottom import BottomDP
from securevfl.training.splitnn_trainer import DEFAULT_MLP_LR


class AFEHooks(AFECheckpoint, SplitNNHooks):
    """The passive parties' clip / rescale / noise, local losses, and the ledger's events."""

    bounded_embeddings = False

    def __init__(self, ctx: RunContext, *, delta: float | None = None, **cfg: Any) -> None:
        self.aggregation = ctx.spec.aggregation
        self.delta = delta  # the run's δ: a scored row's release is accounted at it (predict)
        self.cfg = cfg
        self.C = cfg["clip"]
        self.sigma = cfg["z_e"] * 2 * self.C
        self.sigma_test = cfg["z_t"] * 2 * self.C
        self.rescaling = cfg["variant"] in ("r", "full")
        self.adjusting = cfg["variant"] in ("d", "full")
        self.plan: BottomPlan = cfg["plan"]
        # the KL term couples every row of the batch (moments of all distances): exact bottoms only
        self.kl = self.rescaling and cfg["lam_kl"] > 0 and self.plan.dp is None
        self.n_batches = n_batches(ctx.info.n_train, ctx.spec.batch_size)
        self.L = ctx.info.label_party
        # the passive parties: every data party but the label holder (when it holds features)
        self.passive = [k for k in ctx.data_parties if k != self.L]
        local = [k for k in ctx.rt.local_parties if k in self.passive]
        self.kept = ReleasedBatches()  # the last epoch's received embeddings (head epochs)
        self.norms: list[float] = []  # mean ||r_i|| / C of the last epoch's training rows
        # counted draws: a checkpoint keeps each generator's position (``afe_checkpoint``)
        self.rngs = {k: CountedNormals(ctx.noise_rng(k, "afe/embedding")) for k in local}
        self.stats_rngs = {k: CountedNormals(ctx.noise_rng(k, "afe/stats")) for k in local}
        self.bottom_rngs = {k: CountedNormals(ctx.noise_rng(k, "afe/bottom")) for k in local}
        self.released: dict[int, np.ndarray] = {}
        self.scalers = {
            k: RescaleState(ctx.spec.embedding_dim, confidence=cfg["confidence"]) for k in local
        }
        self.clipped: dict[int, torch.Tensor] = {}
        self.dists: dict[int, torch.Tensor] = {}
        self.pairs: dict[int, torch.Tensor] = {}
        self.ms = {"noise": 0.0, "R": 0.0, "D": 0.0}
        self.fcm_kept: list[float] = []
        self.head_s = 0.0

    def _perms(self, ctx: RunContext, b: int) -> torch.Tensor:
        """The run's fixed pairings for batch size b (public, data-independent; cached)."""
        if b not in self.pairs:
            seed = derive_seed(ctx.shared_seed, purpose=f"afe/pairs/{b}")
            self.pairs[b] = torch.as_tensor(pairings(b, seed=seed))
        return self.pairs[b]

    def _last_epoch(self, ctx: RunContext) -> bool:
        return self.batch is not None and self.batch.epoch == ctx.spec.epochs - 1

    def bound_rows(self, ctx: RunContext, k: int, h: torch.Tensor) -> torch.Tensor:
        """Rows clipped to the C-ball, as released (release-once trains its probe on them)."""
        return CLIPS[self.cfg["clip_mode"]](h, self.C)

    def test_gain(self) -> float:
        """σ²_train / σ²_test (a test row's one release gets the whole target)."""
        return float((self.sigma / self.sigma_test) ** 2)

    def saturation(self, ctx: RunContext, k: int) -> nn.Module:
        """Rows on the C-sphere (then clipped as released: a no-op for the hard clip)."""
        return Sphere(self.C)

    def embed(self, ctx: RunContext, k: int, emb: torch.Tensor, step: int) -> torch.Tensor:
        if k == self.L:  # the label holder's own columns: nothing leaves it, no clip or noise
            return emb
        u = CLIPS[self.cfg["clip_mode"]](emb, self.C)
        training = self.batch is not None and self.batch.phase == TRAIN
        if training:
            self.clipped[k] = u  # the contrastive term of local_loss uses it
        if not self.rescaling:
            self._record_norms(ctx, u, training)
            return u
        t0 = time.perf_counter()
        st = self.scalers[k]
        if training and len(u) > 1:  # the batch's statistics, one Gaussian release
            perms = self._perms(ctx, len(u))
            v = u.detach().numpy().astype(np.float64) / self.C
            if self.kl and step % self.cfg["kl_every"] == 0:
                dist = pair_distances(u, perms)  # once: the statistics and the KL term share it
                self.dists[k] = dist
                w = stats_of(v, float(dist.detach().mean()) / self.C)
            else:
                w = batch_stats(v, perms.numpy())
            w, s = release_stats(w, b=len(u), z=self.cfg["z_s"], rng=self.stats_rngs[k])
            st.update(w, b=len(u), sigma=s)
        out = released_rows(
            u,
            factor=st.factor,
            bound=self.C,
            clip=self.cfg["clip_mode"],
            gradient=self.cfg["rescale_gradient"],
        )
        if training:  # per-step costs are of training steps only
            self.ms["R"] += time.perf_counter() - t0
        self._record_norms(ctx, out, training)
        return out

    def _record_norms(self, ctx: RunContext, out: torch.Tensor, training: bool) -> None:
        """How much of the C-ball the sent rows fill (R's purpose: the SNR), last epoch."""
        if training and self._last_epoch(ctx):
            self.norms.append(float(out.detach().norm(dim=1).mean()) / self.C)

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        if k == self.L:
            return emb
        t0 = time.perf_counter()
        sigma = self.sigma if self.batch is None or self.batch.phase == TRAIN else self.sigma_test
        out = (emb + self.rngs[k].normal(0.0, sigma, size=emb.shape)).astype(np.float32)
        if self.batch is not None and self.batch.phase == TRAIN:
            self.ms["noise"] += time.perf_counter() - t0
            self.released[k] = out  # the DP bottom's contrastive partners
        return out

    def scoring_release(self, ctx: RunContext) -> dict[str, Any] | None:
        """A scored row (``securevfl.model.predict`` replays it): clipped to the C-ball as released,
        (R) rescaled by the party's final factor and clipped again, plus N(0, σ_t²) per
        coordinate; Δ = 2C, as the test rows' ledger."""
        if self.delta is None:
            return None
        return {
            "mechanism": "gaussian",
            "sigma": float(self.sigma_test),
            "sensitivity": float(2 * self.C),
            "delta": float(self.delta),
            "clip": {"mode": self.cfg["clip_mode"], "bound": float(self.C)},
            **({"rescaled": True} if self.rescaling else {}),
        }

    def message_release(
        self, ctx: RunContext, k: int, release: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The label holder's own bottom is not released; R: each party's final DP factor."""
        if k == self.L:
            return None
        if not self.rescaling:
            return release
        return {**release, "rescale": float(self.scalers[k].factor)}

    def aggregate_scale(self, ctx: RunContext, width: int) -> np.ndarray | None:
        """``--input-scaling``: the factor ``aggregate`` applies (``block_scale``)."""
        return self._input_scale(ctx, width) if self.cfg["input_scaling"] else None

    def _input_scale(self, ctx: RunContext, width: int) -> np.ndarray:
        return block_scale(
            width,
            dim=ctx.spec.embedding_dim,
            passive=self.passive,
            spread=float(np.sqrt(self.sigma**2 + self.C**2 / ctx.spec.embedding_dim)),
            summed=self.aggregation == "sum",
            holder_sends=self.L in ctx.data_parties,
        )

    def aggregate(self, ctx: RunContext, messages: Any, *, dst: int, step: int) -> Any:
        """The default gather, each passive block scaled (``_input_scale``); the label holder
        keeps the last epoch's for the head epochs."""
        agg = super().aggregate(ctx, messages, dst=dst, step=step)
        if agg is not None and self.cfg["input_scaling"]:
            agg = (agg * self._input_scale(ctx, agg.shape[1])).astype(np.float32)
        if agg is not None and self.cfg["head_epochs"] > 0 and self.batch.phase == TRAIN:
            if self._last_epoch(ctx):
                self.kept.add_input(agg)
        return agg

    def grad_message(self, ctx: RunContext, grad: np.ndarray, step: int) -> np.ndarray:
        """The gradient w.r.t. each party's message (the chain rule through the scaling)."""
        if not self.cfg["input_scaling"]:
            return grad
        return (grad * self._input_scale(ctx, grad.shape[1])).astype(np.float32)

    def observe(self, ctx: RunContext, step: int, outputs: np.ndarray, y: np.ndarray) -> None:
        if self.cfg["head_epochs"] > 0 and self._last_epoch(ctx):
            self.kept.add_labels(y)

    def local_loss(
        self, ctx: RunContext, k: int, emb: torch.Tensor, grad: np.ndarray, step: int
    ) -> torch.Tensor | None:
        if k == self.L:
            return None
        u, extra = self.clipped.pop(k), None
        released = self.released.pop(k, None)
        partners = None
        if self.plan.dp is not None:  # row i against the released rows: see the module docstring
            u, partners = emb, torch.as_tensor(released)
        if self.kl and k in self.dists:
            t0 = time.perf_counter()
            extra = self.cfg["lam_kl"] * negentropy(self.dists.pop(k))
            self.ms["R"] += time.perf_counter() - t0
        if self.adjusting and self.cfg["lam_cl"] > 0 and len(grad) > 1:
            t0 = time.perf_counter()
            c = min(int(ctx.info.n_classes or 2), len(grad))
            labels, keep = pseudo_labels(grad, c, threshold=self.cfg["fcm_threshold"])
            self.fcm_kept.append(float(keep.mean()))
            lab, kp = torch.as_tensor(labels), torch.as_tensor(keep)
            if partners is not None:
                cl = paired_contrastive_loss(
                    u, lab, kp, bound=self.C, partners=partners, perms=self._perms(ctx, len(u))
                )
            else:
                cl = contrastive_loss(u, lab, kp, bound=self.C, partners=partners)
            extra = self.cfg["lam_cl"] * cl if extra is None else extra + self.cfg["lam_cl"] * cl
            self.ms["D"] += time.perf_counter() - t0
        return extra

    def bottom_update(self, ctx: RunContext, k: int) -> tuple[BottomDP, np.random.Generator] | None:
        if self.plan.dp is None or k == self.L:  # the label holder trains on its own rows
            return None
        return self.plan.dp, self.bottom_rngs[k]

    def epoch_releases(self, ctx: RunContext, epoch: int) -> list[Release]:
        """The epoch's releases of one row (DP bottom: its embedding, its batch's statistics,
        its bottom update) or, for exact bottoms, every row's embedding and every batch's
        statistics of each passive party (each may depend on any row: all count)."""
        per_row = self.plan.dp is not None
        emb = gaussian_event(
            sigma=self.sigma, sensitivity=2 * self.C, count=1 if per_row else ctx.info.n_train
        )
        out = []
        for k in self.passive:
            out.append((k, emb))
            if self.rescaling:  # the batch statistics (z_s is 0 without rescaling)
                z_s, count = self.cfg["z_s"], 1 if per_row else self.n_batches
                out.append((k, gaussian_event(sigma=z_s, sensitivity=1.0, count=count)))
            out.extend((k, ev) for ev in self.plan.events())
        return out

    def configure_evaluate(self, ctx: RunContext, state: Any) -> str:
        """Head epochs on the kept embeddings (post-processing), then test rows go through the
        training path (clip, the final factor, noise)."""
        if state.top is not None and self.cfg["head_epochs"] > 0:
            t0 = time.perf_counter()
            state.top.train()
            refit_head(
                state.top,
                self.kept,
                epochs=self.cfg["head_epochs"],
                batch_size=ctx.spec.batch_size,
                lr=ctx.spec.lr if ctx.spec.lr is not None else DEFAULT_MLP_LR,
                regression=ctx.info.task == "regression",
                rng=ctx.shared_rng("afe/head-epochs"),
            )
            self.head_s = time.perf_counter() - t0
            self.kept.clear()
        return "private"

    def eval_releases(self, ctx: RunContext, n_rows: int) -> list[Release]:
        """Exact bottoms: one more embedding release of every test row per passive party (DP
        bottoms: none here, a test row's one release is accounted apart, see ``fit``)."""
        if self.plan.dp is not None:
            return []
        event = gaussian_event(sigma=self.sigma, sensitivity=2 * self.C, count=n_rows)
        return [(k, event) for k in self.passive]


def block_scale(
    width: int,
    *,
    dim: int,
    passive: list[int],
    spread: float,
    summed: bool,
    holder_sends: bool,
) -> np.ndarray:
    """Per-column factor the label holder applies to the aggregate before its head: each
    passive party's block is divided by its training rows' public per-coordinate spread bound
    s = sqrt(σ² + C²/P); the label holder's own block (active features) is kept. Why: at small
    ε the noise is many C wide and a head fed raw blocks is swamped (measured on adult, ε = 1:
    the label holder's own columns went unused). Post-processing: nothing is released. The
    gradient returned is scaled alike (the chain rule, ``grad_message``). Summed blocks are
    scaled together, and not at all when the label holder's own block is in the sum."""
    if summed:
        return np.full(width, 1.0 if holder_sends else 1.0 / spread)
    scale = np.ones(width)
    for k in passive:
        scale[k * dim : (k + 1) * dim] = 1.0 / spread
    return scale


def accuracy_ceiling_of(ctx: RunContext, hooks: AFEHooks) -> float | None:
    """The accuracy no classifier of the test rows' releases can exceed
    (``privacy.ceiling``), at the label holder; None when it holds features of its own (its
    columns are not released) or for regression."""
    L = ctx.info.label_party
    if L in ctx.data_parties or ctx.info.task == "regression" or not ctx.rt.here(L):
        return None
    y = np.asarray(ctx.views[L].y_test)
    priors = np.bincount(y, minlength=int(ctx.info.n_classes or 2)) / len(y)
    mu = composed_mu([2 * hooks.C / hooks.sigma_test] * len(hooks.passive))
    return accuracy_ceiling(mu, priors.tolist())
