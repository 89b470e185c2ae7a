"""VFL-AFE (Flexible DP VFL with Adaptive Feature Embeddings): clipped, rescaled, noisy embeddings.

Parties: K >= 2 passive parties (0..K-1, features and a bottom model each) and the active party
(index K: labels and the head model; it holds no features here). Per step each passive party k
embeds its minibatch, clips each row to norm C (Eq. 2), optionally rescales (R, Eqs. 3-5, with
the KL term of Eq. 6 in its local loss), optionally adds the contrastive loss on pseudo-labels
from fuzzy c-means of the gradients it gets back (D, Eqs. 7-8), and sends the embedding plus
N(0, σ² I). ``--variant``: vanilla (clip + noise), r, d, full (R + D).

**Privacy (unit party-row: one row of one passive party's block).** A released row lies in the
C-ball, so it moves by at most 2C when its row changes, and (given the rescaling factor) no other
row's release moves. The factor is computed only from Gaussian DP releases of the batch's
distance statistics (``securevfl.privacy.afe``: sensitivity √21/b) and their moving average
(post-processing); the paper's batch-dependent factor, which moves every row of the batch, is
not used. No δ' (Theorem 3.6): the 2C bound holds surely.

**DP bottoms (``--bottom dp``, the default).** Each passive party trains its bottom model by
DP-SGD (``training.private_bottom``: per-example gradients clipped to C_g, Gaussian noise
σ_g·C_g, replace-one sensitivity 2·C_g). Row i's per-example gradient must depend on row i and
released values only: (a) clip and rescale act row-wise given the DP-released factor; (b) the
received gradient is computed by the active party from released embeddings (post-processing);
(c) D's contrastive loss compares row i's embedding with the other rows' *released* noisy
embeddings of this step (constants: by adaptive composition the earlier output, the noisy
batch, is fixed when the gradient release is analysed), over pseudo-labels from FCM on the
received gradients (post-processing) — so row j's change moves row i's term not at all; (d) the
KL term (Eq. 6) depends on the moments of all the batch's distances, so it is used with exact
bottoms only (``--lam-kl`` needs ``--bottom exact``). Then every later release depends on other
rows only through DP releases, and per epoch a training row costs one Gaussian embedding
release (Δ = 2C, noise σ), for R one statistics release (noise multiplier z_s) of its batch,
and one bottom update (noise multiplier σ_g/2), composed over epochs exactly (Gaussian DP).
A test row's only release is its scoring (clip, the final factor, noise σ_t): training and
test rows are disjoint, so the headline is the larger of the two ε, and σ_t alone is calibrated
to ``--epsilon``. σ_g takes ``--grad-share`` of the target's μ², σ and z_s the rest
(``--stats-share`` of it to the statistics), calibrated so the accountant's ε is <= ``--epsilon``.

**Exact bottoms (``--bottom exact``).** The bottom trains on exact rows, so every later release
of every row may depend on a row once it was used: the ledger composes every release of a
party's rows (all n_train embeddings and all batch statistics of each epoch, all n_test test
embeddings), each within its worst-case sensitivity whatever the model.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from securevfl.context import RunContext, RunSpec, parse_bool
from securevfl.errors import ConfigError
from securevfl.methods.afe_options import OPTIONS, check_options
from securevfl.methods.base import Method, register_method
from securevfl.methods.dp_bottom_options import BottomPlan, bottom_plan
from securevfl.models.afe_losses import contrastive_loss, negentropy, pair_distances
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.ceiling import accuracy_ceiling, composed_mu
from securevfl.privacy.afe import (
    RescaleState,
    batch_stats,
    CLIPS,
    pairings,
    plan_noise,
    release_stats,
    rescale,
    stats_of,
    z_of,
)
from securevfl.privacy.dp_bottom import test_noise_multiplier, with_test_rows
from securevfl.privacy.events import gaussian_event
from securevfl.results import FitResult
from securevfl.rng import derive_seed
from securevfl.training import TRAIN, Release, SplitNNHooks, fit_splitnn, n_batches
from securevfl.training.fcm import pseudo_labels
from securevfl.training.head_refit import ReleasedBatches, refit_head
from securevfl.training.splitnn_trainer import DEFAULT_MLP_LR
from securevfl.training.private_bottom import BottomDP

DEFAULT_DELTA = 1e-5


class AFEHooks(SplitNNHooks):
    """The passive parties' clip / rescale / noise, local losses, and the ledger's events."""

    bounded_embeddings = False

    def __init__(self, ctx: RunContext, **cfg: Any) -> None:
        self.aggregation = ctx.spec.aggregation
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
        self.rngs = {k: ctx.noise_rng(k, "afe/embedding") for k in local}
        self.stats_rngs = {k: ctx.noise_rng(k, "afe/stats") for k in local}
        self.bottom_rngs = {k: ctx.noise_rng(k, "afe/bottom") for k in local}
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
        out = rescale(u, factor=st.factor, bound=self.C, clip=self.cfg["clip_mode"])
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

    def aggregate(self, ctx: RunContext, messages: Any, *, dst: int, step: int) -> Any:
        """The default gather; the label holder keeps the last epoch's for the head epochs."""
        agg = super().aggregate(ctx, messages, dst=dst, step=step)
        if agg is not None and self.cfg["head_epochs"] > 0 and self.batch.phase == TRAIN:
            if self._last_epoch(ctx):
                self.kept.add_input(agg)
        return agg

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
            cl = contrastive_loss(
                u, torch.as_tensor(labels), torch.as_tensor(keep), bound=self.C, partners=partners
            )
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


@register_method
class AFEVFL(Method):
    name = "afe-vfl"
    summary = "VFL-AFE: clipped, rescaled, contrastively adjusted noisy embeddings; DP-SGD bottoms"
    family = "dp"
    models = ("mlp",)
    requires_epsilon = True
    uses_server = True
    labels_at_server = True
    options = OPTIONS

    def has_server(self, spec: RunSpec) -> bool:
        """No server when the label holder holds features: it is data party 0 then."""
        return not parse_bool(spec.option("active_features", self))

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        active = parse_bool(spec.option("active_features", self))
        if spec.parties < 2 + active:
            raise ConfigError(
                f"parties for 'afe-vfl' must be >= {2 + active} (>= 2 passive"
                f"{' plus the active party' if active else ''}), got {spec.parties}"
            )
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
        plan = bottom_plan(ctx.spec, self, delta=delta)
        z_e, z_s, planned = plan_noise(
            epsilon=float(ctx.spec.epsilon),
            delta=delta,
            epochs=E,
            rescaling=rescaling,
            share=cfg["stats_share"],
            rows=(ctx.info.n_train, ctx.info.n_test),
            batches=n_batches(ctx.info.n_train, ctx.spec.batch_size),
            per_row=plan.dp is not None,
            extra_events=plan.events(E),
        )
        # DP bottom: a test row's one scoring release gets the whole target (parallel to training)
        z_t = z_e if plan.dp is None else test_noise_multiplier(float(ctx.spec.epsilon), delta)
        ledger = PrivacyLedger("party-row")
        hooks = AFEHooks(ctx, z_e=z_e, z_s=z_s, z_t=z_t, plan=plan, **cfg)
        run = fit_splitnn(ctx, hooks, ledger=ledger)
        steps = E * hooks.n_batches
        outside: list[str] = []
        report = ledger.report(
            delta,
            outside_guarantee=outside,
            target_epsilon=float(ctx.spec.epsilon),
            per_party_extra={
                k: {"sigma": hooks.sigma, "sensitivity": 2 * hooks.C} for k in hooks.passive
            },
            extra={
                "noise_multiplier_embedding": z_e,
                "noise_multiplier_stats": z_s if rescaling else None,
                "noise_multiplier_test": z_t,
                "stats_sensitivity": "sqrt(21)/b (unit-ball units)",
                "delta_prime": 0.0,
                "bottom": cfg["bottom"],
                "bottom_noise_multiplier": None if plan.dp is None else plan.dp.noise_multiplier,
                "bottom_clip": None if plan.dp is None else plan.dp.clip,
                "amplification": "none (shuffled disjoint batches)",
                "planned_epsilon": planned,
            },
        )
        if plan.dp is not None:
            test = PrivacyLedger("party-row")
            for k in hooks.passive:
                test.compose(k, gaussian_event(sigma=hooks.sigma_test, sensitivity=2 * hooks.C))
            report = with_test_rows(report, test, delta)
        extra: dict[str, Any] = {"variant": cfg["variant"], "sigma": hooks.sigma}
        step_ms = {key: 1e3 * v / steps for key, v in hooks.ms.items()}
        step_ms["total"] = 1e3 * run.train_s / steps
        step_ms["vfl"] = step_ms["total"] - sum(step_ms[key] for key in hooks.ms)
        run.stats.step_ms = step_ms
        if hooks.scalers:
            extra["rescale_factor"] = {str(k): s.factor for k, s in hooks.scalers.items()}
        if hooks.fcm_kept:
            extra["fcm_kept_fraction"] = float(np.mean(hooks.fcm_kept))
        if hooks.norms:
            extra["embedding_fill"] = float(np.mean(hooks.norms))
        extra["head_s"] = hooks.head_s
        extra["accuracy_ceiling"] = _ceiling(ctx, hooks)
        return run.result(privacy=report, extra=extra)


def _ceiling(ctx: RunContext, hooks: AFEHooks) -> float | None:
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
