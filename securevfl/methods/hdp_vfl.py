"""HDP-VFL: Gaussian-perturbed intermediate results for vertical GLMs (Algorithm 1 of the paper),
with the passive parties' received derivative clipped so that the printed ε holds.

Every passive party sends Sec[IR_B] = X_B w_B + N(0, σ_B² I); the active party returns
Sec[IR_A] = ∂ℓ/∂θ + N(0, σ_A² I) and uses the exact derivative for its own gradient; every
passive party clips the noisy derivative it receives to [-c, c] (``derivative_clip``, default
L/10 for the loss's L) — the departure from the paper that makes its Lemma 3 hold (derivation in
``privacy/hdp_sensitivity.py``); every party clips its weight block to norm k after the
(penalised) update. Test scores are computed with noisy passive weights (``eval=private``: one
more Gaussian release per passive party, accounted; ``score_share`` of its budget) unless
``eval=plain`` is asked for (then the record voids ε).

Privacy unit ``party-row``: one row of one party's block (the active party's: its columns and
label). Each party's stream is composed epoch by epoch in a ``PrivacyLedger`` as the epochs end;
σ_A, σ_B and σ_w are calibrated to the requested (ε, δ) for each party's releases (stream, plus
the noisy scoring weights of a passive party), and the record reports the exact ε of the σ used
(per party; the headline is the largest). Theorem 2 (joint DP on the weights): a weight vector of
party j != i depends on party i's data only through party i's noisy stream, so the joint-DP
guarantee of the other
parties' weights w.r.t. party i's data is party i's stream guarantee.

Defaults (what ``securevfl run hdp-vfl --dataset D --epsilon E`` runs; every value the user
gives wins): each party centres its numeric columns on their training mean (``--center``; off:
``--no-center``), one full batch per epoch (``--batch-size`` 10,000,000 = b >= n, so T = e steps:
Lemma 3/4's bounds grow with the number of steps), δ = 1e-5, and ``intercept auto`` = none on
centred features (Algorithm 1 exactly), clipped on uncentred ones. Measured (3 seeds, breast,
K = 2, e = 10): at ε = 10 0.628 -> 0.894 accuracy (non-private vfl 0.909), at ε = 1 0.575 ->
0.879; uncentred, the clipped bias and the free bias both predict the majority class (0.628).
These are public choices (they depend on no row). With ``--epsilon`` the centring means are
released by each party under the budget (Laplace, 10% of ε; ``privacy.centring``, composed into
the printed ε; docs/privacy-boundaries.md), so the measured figures above predate it.

Intercept (option ``intercept``): Algorithm 1 has none, but min-max scaled features that are not
centred need a bias to learn. ``auto`` (default): none when centred, else clipped. ``clipped``
(= true): the bias is a weight on a constant feature 1 at the active party, clipped with w_A;
``free``: the bias is its own parameter of the active party, updated with the exact derivative
and never clipped; ``none`` (= false) runs Algorithm 1 exactly. Both bias variants use row norm
c = sqrt(2) on the active side.

Threshold (option ``threshold``): ``trained`` predicts sign(x·w + b) as fitted; ``deconvolved``
lets the active party refit the decision threshold from the noisy scores it already received and
its own labels (``deconvolved_threshold``): post-processing, no extra release.

Final fit (option ``final_fit``, default ``refit``): after training, the label holder refits its
own weights, its bias and one factor α_k per passive party on its training rows, with the noisy
messages s~_k it received in the last epoch as the passive columns (``models.active_refit``);
test rows are scored X_0 w_0 + b + Σ_k α_k · X_k,test w~_k. Post-processing of the passive
releases; the label holder's own rows are covered by its derivative stream, which the refit does
not touch, and the refitted values never leave it. Why: with σ_B ≈ 4.8 per row on IRs of size
≤ 1 (phishing, ε = 8) the trained combination (0.860, seeds 0-2) fell below the label holder
alone (0.880); the refit gets 0.890 (α ≈ 0: the block's training messages are too noisy to be
worth weighting). ``trained`` keeps Algorithm 1's weights (and is what ``threshold=deconvolved``
refits its threshold from).

Tuning (``tune``): 5-fold CV inside the training split, every fold run private (scored through the
private path, all events composed). The chosen (epochs, clip_norm) is computed from the active
party's exact labels and sent to the passive parties outside any mechanism, so a tuned run
reports no ε (``privacy.epsilon`` null, the reason in ``outside_guarantee``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import securevfl.models.glm_family  # noqa: F401  (registers svm, poisson, gamma, l1, elastic-net)
from securevfl.context import Option, RunContext, RunSpec, parse_bool
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.methods.hdp_hooks import HDPHooks, plan_streams, train_hdp
from securevfl.model import checkpoint
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.hdp_plan import DEFAULT_SCORE_SHARE, hdp_report, parse_derivative_clip
from securevfl.privacy.mechanisms import CALIBRATIONS
from securevfl.privacy.tee_ledger import TeeLedger
from securevfl.results import FitResult
from securevfl.training import kfold_tune
from securevfl.training.glm_adapters import parse_intercept, with_bounded_loss

__all__ = ["HDPVFL", "HDPHooks", "plan_streams", "train_hdp"]

DEFAULT_DELTA = 1e-5
FULL_BATCH = 10_000_000  # the batch_size option's maximum: any b >= n is one batch per epoch

# the paper's tuning grid (Section 6.2: e in [5, 15], k in [0.1, 1]; Fig. 2 uses these values)
TUNE_EPOCHS = (5, 10, 15)
TUNE_CLIP = (0.1, 0.5, 1.0)
TUNE_FOLDS = 5
THRESHOLDS = ("trained", "deconvolved")
EVALS = ("private", "plain")
FINAL_FITS = ("refit", "trained")


def _parse_hdp_intercept(value: Any) -> str:
    """'auto' or one of parse_intercept's values."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return parse_intercept(value)


_parse_hdp_intercept.kind = "one of auto, clipped, free, none (or true/false)"  # type: ignore[attr-defined]


def resolve_intercept(value: Any, centred: bool) -> str:
    """``auto``: no bias on centred features (Algorithm 1), a clipped one on uncentred ones."""
    value = _parse_hdp_intercept(value)
    if value == "auto":
        return "none" if centred else "clipped"
    return value


@register_method
class HDPVFL(Method):
    name = "hdp-vfl"
    summary = "HDP-VFL: Gaussian noise on intermediate results of vertical GLMs (JDP, Alg. 1)"
    family = "dp"
    models = ("glm",)
    requires_epsilon = True
    options = {
        "calibration": Option(
            str,
            "analytic",
            "noise calibration: analytic (exact, Balle & Wang 2018) or classic (the paper's "
            "formula, valid for eps<1; the record reports the true eps of the sigma used)",
            choices=CALIBRATIONS,
        ),
        "clip_norm": Option(float, 1.0, "weight-norm bound k of each party's block", gt=0, le=1e6),
        "derivative_clip": Option(
            parse_derivative_clip,
            "auto",
            "range [-c, c] the passive parties clip the received noisy derivative to (what "
            "makes the passive stream's bound hold); auto: the loss's L/10 (logistic 0.1)",
            le=1e6,
        ),
        "eval": Option(
            str,
            "private",
            "test scoring: private (each passive party scores with its weights plus Gaussian "
            "noise, one more accounted release) or plain (exact weights; voids the passive "
            "parties' guarantee)",
            choices=EVALS,
        ),
        "score_share": Option(
            float,
            DEFAULT_SCORE_SHARE,
            "eval private: share of a passive party's budget (Gaussian-DP mu^2) spent on its "
            "noisy scoring weights, the rest on its training stream",
            gt=0,
            lt=1,
        ),
        "intercept": Option(
            _parse_hdp_intercept,
            "auto",
            "bias at the active party: auto (none on centred features, else clipped), clipped "
            "(true; a constant column clipped with w_A), free (its own unclipped "
            "parameter); both use row norm sqrt(2) in the bounds; none (false): "
            "Algorithm 1 exactly",
        ),
        "threshold": Option(
            str,
            "trained",
            "decision threshold: trained (the bias as fitted) or "
            "deconvolved (the active party corrects its threshold for the known "
            "noise in its received theta; logistic only; post-processing)",
            choices=THRESHOLDS,
        ),
        "final_fit": Option(
            str,
            "refit",
            "the label holder's final model: refit (it refits its own weights, bias and one "
            "factor per passive party on its training rows and the noisy messages it received: "
            "post-processing; a useless noisy block gets factor ~0) or trained (Algorithm 1's "
            "weights as trained; also what threshold=deconvolved refits from)",
            choices=FINAL_FITS,
        ),
        "tune": Option(
            parse_bool,
            False,
            "5-fold CV on the training split over epochs "
            f"{list(TUNE_EPOCHS)} x clip_norm {list(TUNE_CLIP)} (overrides both; the choice "
            "is not private, so a tuned run reports no epsilon)",
        ),
    }

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Centred columns, one full batch per epoch, δ = 1e-5 (module docstring: measured)."""
        return {"center": True, "batch_size": FULL_BATCH, "delta": DEFAULT_DELTA}

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        if spec.penalty not in ("l2", "none", "l1", "elastic-net"):
            raise ConfigError(
                f"penalty for hdp-vfl must be l2, l1, elastic-net or none, got {spec.penalty!r}"
            )

    def fit(self, ctx: RunContext) -> FitResult:
        ctx = with_bounded_loss(ctx)
        if ctx.spec.delta is None:  # a RunSpec built directly (build_spec sets the default)
            ctx = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, delta=DEFAULT_DELTA))
        spec = ctx.spec
        run_opts: dict[str, Any] = {
            "calibration": spec.option("calibration", self),
            "derivative_clip": parse_derivative_clip(spec.option("derivative_clip", self)),
            "score_share": float(spec.option("score_share", self)),
            "intercept": resolve_intercept(spec.option("intercept", self), spec.center),
            "threshold": spec.option("threshold", self),
            "final_fit": spec.option("final_fit", self),
        }
        scoring = spec.option("eval", self)
        setting = {"epochs": spec.epochs, "clip_norm": float(spec.option("clip_norm", self))}
        delta = float(spec.delta)
        ledger = PrivacyLedger("party-row")
        extra: dict[str, Any] = {}
        outside: list[str] = []
        tuned = parse_bool(spec.option("tune", self))
        if tuned and checkpoint.active() is not None:
            raise ConfigError(
                "--checkpoint-every/--resume do not apply to hdp-vfl with tune=true: its "
                "cross-validation trains many models, a checkpoint keeps one"
            )
        if tuned:
            setting, table = self.tune(ctx, ledger, run_opts)
            extra["tuning"] = {
                "chosen_epochs": setting["epochs"],
                "chosen_clip_norm": setting["clip_norm"],
                "cv": table,
                "runs": len(TUNE_EPOCHS) * len(TUNE_CLIP) * TUNE_FOLDS,
            }
            outside.append(
                "tuning: the chosen (epochs, clip_norm), computed from the active party's exact "
                "labels, is sent to the passive parties outside any mechanism"
            )
        final = PrivacyLedger("party-row")
        void = bool(outside)  # only the tuning choice so far: it breaks the guarantee
        run, hooks = train_hdp(
            ctx,
            TeeLedger(ledger, final),
            epochs=setting["epochs"],
            clip=setting["clip_norm"],
            tag="final",
            scoring=scoring,
            **run_opts,
        )
        if scoring == "plain":
            outside.append(
                "eval=plain: test scores X_k,test w_k are sent in the clear; w_k is computed "
                "from party k's exact rows, so the passive parties' guarantee does not hold"
            )
        else:
            outside.append(
                "test rows: their scores X_k,test w~_k reach the active party (computed with "
                "DP weights: they reveal the test rows, which are not training data)"
            )
        facts = hooks.plan.facts
        priv_extra: dict[str, Any] = {"stream": facts}
        if tuned:
            priv_extra["epsilon_final_run_only"] = final.epsilon(delta)
        report = hdp_report(
            ledger,
            hooks.plan,
            delta=delta,
            epsilon=float(spec.epsilon),
            parties=ctx.info.data_parties,
            calibration=run_opts["calibration"],
            outside=outside,
            void=void or scoring == "plain",
            extra=priv_extra,
        )
        extra["sigma_a"], extra["sigma_b"] = facts["sigma_a"], facts["sigma_b"]
        return run.result(privacy=report, extra=extra)

    def tune(
        self, ctx: RunContext, ledger: PrivacyLedger, run_opts: dict[str, Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The paper's tuning: 5-fold CV on the training split over epochs x clip_norm, every
        fold a private run scored through the private path, all its releases in ``ledger``."""

        def fold(sub: RunContext, s: dict[str, Any], f: int) -> np.ndarray | None:
            e, k = s["epochs"], s["clip_norm"]
            tag = f"cv/{e}/{k}/{f}"
            return train_hdp(sub, ledger, epochs=e, clip=k, tag=tag, **run_opts)[0].scores

        grid = [{"epochs": e, "clip_norm": k} for e in TUNE_EPOCHS for k in TUNE_CLIP]
        return kfold_tune(ctx, grid, fold, folds=TUNE_FOLDS, purpose="hdp/cv")
