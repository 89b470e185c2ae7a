"""VFL-AFE (Flexible DP VFL with Adaptive Feature Embeddings): clipped, rescaled, noisy embeddings.

Parties: K >= 2 passive parties (0..K-1, features and a bottom model each) and the active party
(index K: labels and the head model; it holds no features). With ``--active-features`` the
active party is data party 0 (labels, the head, its own bottom on its own columns, exactly
trained, its embedding enters the head without clip or noise: nothing of it leaves the party)
and parties 1..K-1 (K >= 2 under release-once, K >= 3 for the split variants) are the passive
ones; only their releases are accounted (none of the label holder's budget is spent on its own
columns: they are never released). Per step
each passive party k embeds its minibatch, clips each row to norm C (Eq. 2), optionally
rescales (R, Eqs. 3-5, with the KL term of Eq. 6 in its local loss), optionally adds the
contrastive loss on pseudo-labels from fuzzy c-means of the gradients it gets back (D, Eqs.
7-8), and sends the embedding plus N(0, σ² I). ``--variant``: vanilla (clip + noise), r, d,
full (R + D).

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

**Three choices that make R and D help rather than hurt (measured, adult and fashion).**
(1) ``--rescale-gradient identity`` (default): the released value is Eq. 4's rescaled row,
but the bottom's update treats the rescaling as the identity (straight-through). Through the
factor, a bottom whose outputs barely spread at the start (adult: std 0.012 of C) gets s up
to S_MAX, its rows all land on the same side of the ball within a few steps, and the hard clip
leaves it no gradient: r and full sat at the majority class even at ε = 30 (vanilla 0.82).
The rows released are the same function of row i and the DP factor, so nothing in the
accounting changes. (2) The label holder divides each received passive block by its public
spread bound sqrt(σ² + C²/P) before its head (``--input-scaling``, post-processing): at ε = 1
the noise is ~10C wide and a head fed raw blocks lost even its own columns (adult, seed 2:
majority class, AUC 0.50). (3) With DP bottoms, D compares row i only with the released rows
of its own R pairings (``models.afe_losses.paired_contrastive_loss``), not with every kept row:
against all rows, each row of a pseudo-class is pulled toward the same noisy class mean and
that mean's noise enters every row's gradient alike.

**Head epochs (``--head-epochs``).** After training the label holder trains its head for more
epochs on the noisy embeddings it received in the last epoch (``training.head_refit``):
post-processing of releases already accounted, no new event. (Measured on adult, it did not
help: the kept embeddings come from the bottoms as they were during that epoch.)

**Soft clip (``--clip-mode soft``, our choice).** Eq. 2's hard clip gives a row outside the ball
no gradient along itself; C·tanh(||h||/C)·h/||h|| keeps every row inside the ball too, so the
2C bound and the accounting are unchanged (``privacy.afe.soft_clip_rows``).

**What accuracy is possible.** With a featureless label holder a test row is scored from its K
Gaussian releases alone; ``privacy.ceiling`` bounds the accuracy of any classifier of them
(the record's ``extra.accuracy_ceiling``): on adult at ε = 1 it is the majority share.

**Exact bottoms (``--bottom exact``).** The bottom trains on exact rows, so every later release
of every row may depend on a row once it was used: the ledger composes every release of a
party's rows (all n_train embeddings and all batch statistics of each epoch, all n_test test
embeddings), each within its worst-case sensitivity whatever the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.context import RunContext, RunSpec, parse_bool
from securevfl.errors import ConfigError
from securevfl.methods.afe_hooks import AFEHooks, accuracy_ceiling_of
from securevfl.methods.afe_options import OPTIONS, afe_release_once, check_options
from securevfl.methods.base import Method, register_method
from securevfl.methods.dp_bottom_options import BottomPlan, bottom_plan
from securevfl.methods.release_options import (
    accuracy_ceiling_extra,
    gaussian_release_report,
    release_defaults,
    release_plan,
)
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.afe import plan_noise, z_of
from securevfl.privacy.dp_bottom import test_noise_multiplier, with_test_rows
from securevfl.privacy.events import gaussian_event
from securevfl.privacy.units import label_unit
from securevfl.results import FitResult
from securevfl.training import fit_splitnn, n_batches
from securevfl.training.release_once import fit_release_once

DEFAULT_DELTA = 1e-5


@register_method
class AFEVFL(Method):
    name = "afe-vfl"
    summary = "VFL-AFE: clipped, rescaled, contrastively adjusted noisy embeddings; DP-SGD bottoms"
    family = "dp"
    models = ("mlp", "cnn")
    requires_epsilon = True
    uses_server = True
    labels_at_server = True
    options = OPTIONS

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Release-once runs: larger DP-SGD batches, one scalar per row on binary tasks."""
        if given.get("variant") in ("r", "d", "full"):
            return {}
        return release_defaults(cls, given)

    def has_server(self, spec: RunSpec) -> bool:
        """No server when the label holder holds features: it is data party 0 then."""
        return not parse_bool(spec.option("active_features", self))

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        active = parse_bool(spec.option("active_features", self))
        # the split schedule's variants contrast >= 2 passive parties; release-once needs one
        # (the label holder with its own columns plus one partner: K = 2)
        passive = 1 if active and afe_release_once(spec, self) else 2
        if spec.parties < passive + active:
            raise ConfigError(
                f"parties for 'afe-vfl' must be >= {passive + active} (>= {passive} passive"
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
        if afe_release_once(ctx.spec, self, ctx.info.task):
            return self.fit_release_once(ctx, cfg, delta)
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
        hooks = AFEHooks(ctx, z_e=z_e, z_s=z_s, z_t=z_t, plan=plan, delta=delta, **cfg)
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
            # a resume under the CSPRNG re-scored the test rows: each scoring is a release
            again = (hooks.resumed or {}).get("counted_twice") and hooks.resumed[
                "scorings_re_released"
            ]
            for k in hooks.passive:
                ev = gaussian_event(sigma=hooks.sigma_test, sensitivity=2 * hooks.C)
                test.compose(k, ev, 1 + int(again or 0))
            report = with_test_rows(report, test, delta)
        # passive parties get their rows' exact label-dependent gradients: no sample unit
        report = label_unit(report, labels_protected=False)
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
        extra["accuracy_ceiling"] = accuracy_ceiling_of(ctx, hooks)
        return run.result(privacy=report, extra=extra)

    def fit_release_once(self, ctx: RunContext, cfg: dict[str, Any], delta: float) -> FitResult:
        """Release-once (``training.release_once``) with the vanilla mechanism: each passive
        party's row clipped to the C-ball (Eq. 2) plus N(0, σ² I), once per training row and
        once per test row; Δ = 2C (``release_options.gaussian_release_report``)."""
        plan = release_plan(ctx.spec, self, delta=delta, n_train=ctx.info.n_train)
        C = float(cfg["clip"])
        report, sigma, sigma_test = gaussian_release_report(
            ctx, plan, sensitivity=2 * C, delta=delta
        )
        hooks = AFEHooks(
            ctx,
            **{
                **cfg,
                "z_e": sigma / (2 * C),
                "z_s": 0.0,
                "z_t": sigma_test / (2 * C),
                "plan": BottomPlan(None, 1),
            },
            delta=delta,
        )
        run = fit_release_once(ctx, hooks, plan=plan)
        mus = [2 * C / sigma_test] * len(hooks.passive)
        extra: dict[str, Any] = {
            "variant": cfg["variant"],
            "sigma": sigma,
            **accuracy_ceiling_extra(ctx, mus=mus, delta=delta),
        }
        return run.result(privacy=report, extra=extra)
