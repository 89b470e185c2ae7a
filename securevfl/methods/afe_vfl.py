"""VFL-AFE (Flexible DP VFL with Adaptive Feature Embeddings): clipped, rescaled, noisy embeddings.

Parties: K >= 2 passive parties (0..K-1, features and a bottom model each) and the active party
(index K: labels and the head model; it holds no features here). Per step each passive party k
embeds its minibatch, clips each row to norm C (Eq. 2), optionally rescales (R, Eqs. 3-5, with
the KL term of Eq. 6 in its local loss), optionally adds the contrastive loss on pseudo-labels
from fuzzy c-means of the gradients it gets back (D, Eqs. 7-8), and sends the embedding plus
N(0, σ² I). ``--variant``: vanilla (clip + noise), r, d, full (R + D).

**Privacy (unit party-row: one row of one passive party's block).** A released row lies in the
C-ball, so it moves by at most 2C when its row changes, and (given the rescaling factor) no other
row's release moves. The factor is computed only from Gaussian DP
releases of the batch's distance statistics (``securevfl.privacy.afe``: sensitivity √21/b) and
their moving average (post-processing); the paper's batch-dependent factor, which moves every
row of the batch, is not used. Per epoch a row is in one batch (batches of an epoch are
disjoint), each release is one Gaussian release of Δ = 2C (noise σ) and, for R, each batch's
statistics one of noise multiplier z_s; all compose exactly (Gaussian DP, see below for why
every release counts). Test-time scoring runs through the same noisy path
(the final factor, no new statistics); it is composed into the ledger as one more
embedding release (conservative: test rows are not training rows). σ and z_s are calibrated so
that the accountant's ε is at most ``--epsilon`` (``--stats-share`` of the Gaussian-DP budget μ²
goes to the statistics). No δ' (Theorem 3.6): the 2C bound holds surely.

The gradients a passive party receives are functions of the released noisy embeddings and the
active party's data: D (FCM on them) is post-processing for the passive party's privacy. The
bottom model f_k trains on party k's exact rows (its backward pass uses x_i), so every later
release of every row may depend on a row once it was used: the ledger therefore composes every
release of a party's rows (all n_train embeddings and all batch statistics of each epoch, all
n_test test embeddings), each within its worst-case sensitivity whatever the model — a bound
for the algorithm as run (the per-row count of the paper is not one).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from securevfl.context import RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.methods.afe_options import OPTIONS, check_options
from securevfl.methods.base import Method, register_method
from securevfl.models.afe_losses import contrastive_loss, negentropy, pair_distances
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.afe import (
    RescaleState,
    batch_stats,
    clip_rows,
    pairings,
    plan_noise,
    release_stats,
    rescale,
    stats_of,
    z_of,
)
from securevfl.privacy.events import gaussian_event
from securevfl.results import FitResult
from securevfl.rng import derive_seed
from securevfl.training import TRAIN, Release, SplitNNHooks, fit_splitnn, n_batches
from securevfl.training.fcm import pseudo_labels

DEFAULT_DELTA = 1e-5


class AFEHooks(SplitNNHooks):
    """The passive parties' clip / rescale / noise, local losses, and the ledger's events."""

    bounded_embeddings = False

    def __init__(self, ctx: RunContext, **cfg: Any) -> None:
        self.aggregation = ctx.spec.aggregation
        self.cfg = cfg
        self.C = cfg["clip"]
        self.sigma = cfg["z_e"] * 2 * self.C
        self.rescaling = cfg["variant"] in ("r", "full")
        self.adjusting = cfg["variant"] in ("d", "full")
        self.n_batches = n_batches(ctx.info.n_train, ctx.spec.batch_size)
        local = [k for k in ctx.rt.local_parties if k < ctx.info.data_parties]
        self.rngs = {k: ctx.noise_rng(k, "afe/embedding") for k in local}
        self.stats_rngs = {k: ctx.noise_rng(k, "afe/stats") for k in local}
        self.scalers = {
            k: RescaleState(ctx.spec.embedding_dim, confidence=cfg["confidence"]) for k in local
        }
        self.clipped: dict[int, torch.Tensor] = {}
        self.dists: dict[int, torch.Tensor] = {}
        self.pairs: dict[int, torch.Tensor] = {}
        self.ms = {"noise": 0.0, "R": 0.0, "D": 0.0}
        self.kept: list[float] = []

    def _perms(self, ctx: RunContext, b: int) -> torch.Tensor:
        """The run's fixed pairings for batch size b (public, data-independent; cached)."""
        if b not in self.pairs:
            seed = derive_seed(ctx.shared_seed, purpose=f"afe/pairs/{b}")
            self.pairs[b] = torch.as_tensor(pairings(b, seed=seed))
        return self.pairs[b]

    def embed(self, ctx: RunContext, k: int, emb: torch.Tensor, step: int) -> torch.Tensor:
        u = clip_rows(emb, self.C)
        training = self.batch is not None and self.batch.phase == TRAIN
        if training:
            self.clipped[k] = u  # the contrastive term of local_loss uses it
        if not self.rescaling:
            return u
        t0 = time.perf_counter()
        st = self.scalers[k]
        if training and len(u) > 1:  # the batch's statistics, one Gaussian release
            perms = self._perms(ctx, len(u))
            v = u.detach().numpy().astype(np.float64) / self.C
            if self.cfg["lam_kl"] > 0 and step % self.cfg["kl_every"] == 0:
                dist = pair_distances(u, perms)  # once: the statistics and the KL term share it
                self.dists[k] = dist
                w = stats_of(v, float(dist.detach().mean()) / self.C)
            else:
                w = batch_stats(v, perms.numpy())
            w, s = release_stats(w, b=len(u), z=self.cfg["z_s"], rng=self.stats_rngs[k])
            st.update(w, b=len(u), sigma=s)
        out = rescale(u, factor=st.factor, bound=self.C)
        if training:  # per-step costs are of training steps only
            self.ms["R"] += time.perf_counter() - t0
        return out

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        t0 = time.perf_counter()
        out = (emb + self.rngs[k].normal(0.0, self.sigma, size=emb.shape)).astype(np.float32)
        if self.batch is not None and self.batch.phase == TRAIN:
            self.ms["noise"] += time.perf_counter() - t0
        return out

    def local_loss(
        self, ctx: RunContext, k: int, emb: torch.Tensor, grad: np.ndarray, step: int
    ) -> torch.Tensor | None:
        u, extra = self.clipped.pop(k), None
        if self.rescaling and self.cfg["lam_kl"] > 0 and k in self.dists:
            t0 = time.perf_counter()
            extra = self.cfg["lam_kl"] * negentropy(self.dists.pop(k))
            self.ms["R"] += time.perf_counter() - t0
        if self.adjusting and self.cfg["lam_cl"] > 0 and len(grad) > 1:
            t0 = time.perf_counter()
            c = min(int(ctx.info.n_classes or 2), len(grad))
            labels, keep = pseudo_labels(grad, c, threshold=self.cfg["fcm_threshold"])
            self.kept.append(float(keep.mean()))
            cl = contrastive_loss(u, torch.as_tensor(labels), torch.as_tensor(keep), bound=self.C)
            extra = self.cfg["lam_cl"] * cl if extra is None else extra + self.cfg["lam_cl"] * cl
            self.ms["D"] += time.perf_counter() - t0
        return extra

    def epoch_releases(self, ctx: RunContext, epoch: int) -> list[Release]:
        """The epoch's releases: every row's embedding and every batch's statistics of each
        passive party (each may depend on any row through the bottom model: all count)."""
        emb = gaussian_event(sigma=self.sigma, sensitivity=2 * self.C, count=ctx.info.n_train)
        out = []
        for k in ctx.data_parties:
            out.append((k, emb))
            if self.rescaling:  # the batch statistics (z_s is 0 without rescaling)
                z_s = self.cfg["z_s"]
                out.append((k, gaussian_event(sigma=z_s, sensitivity=1.0, count=self.n_batches)))
        return out

    def configure_evaluate(self, ctx: RunContext, state: Any) -> str:
        """Test rows go through the training path (clip, the final factor, noise)."""
        return "private"

    def eval_releases(self, ctx: RunContext, n_rows: int) -> list[Release]:
        """One more embedding release of every test row per passive party."""
        event = gaussian_event(sigma=self.sigma, sensitivity=2 * self.C, count=n_rows)
        return [(k, event) for k in ctx.data_parties]


@register_method
class AFEVFL(Method):
    name = "afe-vfl"
    summary = "VFL-AFE: clipped, adaptively rescaled, contrastively adjusted noisy embeddings"
    family = "dp"
    models = ("mlp",)
    requires_epsilon = True
    uses_server = True
    labels_at_server = True
    options = OPTIONS

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        if spec.parties < 2:
            raise ConfigError(f"parties (passive) for 'afe-vfl' must be >= 2, got {spec.parties}")
        z_of(float(spec.option("confidence", self)))

    def fit(self, ctx: RunContext) -> FitResult:
        cfg = check_options(ctx.spec, self)
        if cfg["variant"] in ("d", "full") and ctx.info.task == "regression":
            raise ConfigError(
                f"variant {cfg['variant']!r} clusters gradients into classes: it needs a "
                f"classification task, got {ctx.info.task!r}"
            )
        E, delta = ctx.spec.epochs, float(ctx.spec.delta or DEFAULT_DELTA)
        rescaling = cfg["variant"] in ("r", "full")
        z_e, z_s, planned = plan_noise(
            epsilon=float(ctx.spec.epsilon),
            delta=delta,
            epochs=E,
            rescaling=rescaling,
            share=cfg["stats_share"],
            rows=(ctx.info.n_train, ctx.info.n_test),
            batches=n_batches(ctx.info.n_train, ctx.spec.batch_size),
        )
        ledger = PrivacyLedger("party-row")
        hooks = AFEHooks(ctx, z_e=z_e, z_s=z_s, **cfg)
        run = fit_splitnn(ctx, hooks, ledger=ledger)
        steps = E * hooks.n_batches
        outside: list[str] = []
        report = ledger.report(
            delta,
            outside_guarantee=outside,
            target_epsilon=float(ctx.spec.epsilon),
            per_party_extra={
                k: {"sigma": hooks.sigma, "sensitivity": 2 * hooks.C} for k in ctx.data_parties
            },
            extra={
                "noise_multiplier_embedding": z_e,
                "noise_multiplier_stats": z_s if rescaling else None,
                "stats_sensitivity": "sqrt(21)/b (unit-ball units)",
                "delta_prime": 0.0,
                "planned_epsilon": planned,
            },
        )
        extra: dict[str, Any] = {"variant": cfg["variant"], "sigma": hooks.sigma}
        step_ms = {key: 1e3 * v / steps for key, v in hooks.ms.items()}
        step_ms["total"] = 1e3 * run.train_s / steps
        step_ms["vfl"] = step_ms["total"] - sum(step_ms[key] for key in hooks.ms)
        run.stats.step_ms = step_ms
        if hooks.scalers:
            extra["rescale_factor"] = {str(k): s.factor for k, s in hooks.scalers.items()}
        if hooks.kept:
            extra["fcm_kept_fraction"] = float(np.mean(hooks.kept))
        return run.result(privacy=report, extra=extra)
