"""PBM-VFL (Tran, Castiglia, Patterson, Milanova); its baselines NPQ and LDP-VFL are in ``ldp_vfl``.

M data parties (0..M-1) each run a bottom model with tanh-bounded embeddings (C = 1); the server
(index M) holds the labels and a fusion model on the SUM of the embeddings (Eq. 1-3); the gradient
w.r.t. the sum goes back to every party (Algorithm 2). In ``pbm-vfl`` each coordinate is
quantized by PBM (Algorithm 1), the integer vectors are summed by secure aggregation
(``protocols.secagg``: X25519 keys in phase "setup", pair and self masks mod 2^r, r-bit packing,
HMAC-authenticated messages, Shamir-shared self-mask seeds so a round survives dropouts), the
server estimates the sum as C/(beta b) (q_hat - bM/2). Privacy: PLD of the sampler's exact pmf
(``pbm_accountant``). NPQ and LDP-VFL differ only in what a party sends.

Test-time scoring (``--eval private``, the default) runs through the same aggregation as
training, so the server never sees a plain embedding; ``--eval plain`` scores on plain
embeddings with the core's ``predict_splitnn`` (the model's accuracy without inference noise;
listed in the record's ``privacy.outside_guarantee``). ``--save`` keeps the private path's
release with each part; ``securevfl predict`` replays it through these hooks (``predict_pbm``).

Privacy units (neighbouring datasets differ by substitution of):

* ``party-row`` (the paper's "feature privacy", the headline ``privacy.epsilon``): one row of
  one data party's block; that party's embedding of the row may move anywhere in [-C, C]^P;
* ``sample`` ("sample privacy"): the row in every data party's block and its label. Not
  printed: in this split-learning schedule every data party receives its rows' exact
  label-dependent gradients, so the label is not protected (``privacy.units.label_unit``; the
  exposure is listed under ``outside_guarantee``).

Which releases count. With DP bottoms (``--bottom dp``, the default with ``--epsilon``;
``training.private_bottom``) each data party's bottom update is a Gaussian release (per-example
clip C_g, replace-one sensitivity 2·C_g), so later releases depend on other rows only through DP
models: a row's ε composes its own P·(E + 1) PBM releases (the +1: its scoring, composed
conservatively) and its E bottom updates, PBM's RDP and the Gaussian's at the same orders
(LDP-VFL: Gaussian DP, with a test row's one scoring release calibrated apart). With
``--bottom exact`` (or without ``--epsilon``) the rest of this paragraph applies. Per row, PBM-
VFL releases the P coordinates' secure sums once per epoch
for a training row and once for a test row under private scoring; LDP-VFL the same counts of
noisy embeddings. Counting only those (the seed paper's figures, kept in
``privacy.per_row_only``) is not a guarantee: the bottom models train on every row with exact
inputs, so every later release of every other row depends on a row once it was used. Each
release's worst-case pair does not depend on which rows it concerns (PBM: the dominating pair
holds for any inputs in [-C, C]; LDP: the clipped embedding moves by at most 2C per
coordinate), so the headline composes every release of a party's rows in the run: P·(E·n_train
+ n_test) PBM releases (RDP, dp_accounting's conversion) or Gaussian uses. That bound is large:
it is what the algorithm as run can claim.

``--epsilon E --delta D``: ``pbm-vfl`` keeps b and calibrates beta on the 2^-12 grid (the
sampler's own resolution) by bisection on the headline's accountant, so the headline epsilon is <= E
and within 2% of E; where one grid step of beta is too coarse for 2% it lowers b instead at the
next beta (``calibrate_beta``; the b and beta used are in ``privacy.sampler``); ``ldp-vfl``
calibrates its sigma (b and beta then play no part). Without ``--epsilon`` both take their
noise from --b and --beta as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.methods.dp_bottom_options import BOTTOM_OPTIONS, BottomPlan, bottom_plan
from securevfl.methods.pbm_hooks import BoundedSumHooks, PBMSecAggHooks
from securevfl.methods.pbm_release_once import calibrate_test_beta, pbm_release_once_report
from securevfl.methods.release_options import (
    ACTIVE_FEATURES,
    RELEASE_OPTIONS,
    accuracy_ceiling_extra,
    bottom_events,
    release_defaults,
    release_once,
    release_plan,
)
from securevfl.model.evaluation import average_precision
from securevfl.privacy.calibration_cache import progress
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.pbm import check_pbm_params
from securevfl.privacy.pbm_accountant import check_accountant_size
from securevfl.privacy.pbm_calibration import calibrate_beta, pbm_report, void_on_dropouts
from securevfl.privacy.units import label_unit
from securevfl.results import FitResult
from securevfl.training import fit_splitnn, row_uses
from securevfl.training.release_once import fit_release_once

DEFAULT_DELTA = 1e-5
PBM_OPTIONS = {
    # b: a run's cost grows faster than b (one epoch on breast, loaded 2-core machine: b = 128
    # 13 s, b = 512 128 s); beta below 2^-12 leaves no level on p's grid
    "b": Option(int, 64, "PBM trials per coordinate", ge=1, le=1024),
    "beta": Option(float, 0.25, "PBM beta", ge=2.0**-12, le=0.25),
    "eval": Option(
        str,
        "private",
        "test-time scoring through the private aggregation "
        "('private') or on plain embeddings ('plain')",
        choices=("private", "plain"),
    ),
}


class SumSplitNN(Method):
    """Shared shape of the three methods: split-NN, server with labels and fusion model (or,
    with ``--active-features``, the label holder as data party 0)."""

    models = ("mlp", "cnn")
    uses_server = True
    labels_at_server = True

    def has_server(self, spec: RunSpec) -> bool:
        """No server when the label holder holds columns: it is data party 0 then."""
        return not ("active_features" in self.options and spec.option("active_features", self))

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Release-once runs: larger DP-SGD batches, one scalar per row on binary tasks."""
        return release_defaults(cls, given) if "release_schedule" in cls.options else {}

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        if not self.has_server(spec):
            if not release_once(spec, self):
                raise ConfigError(
                    f"--active-features of {self.name!r} needs the release-once schedule "
                    "(--epsilon, --bottom dp), got --release-schedule "
                    f"{spec.option('release_schedule', self)}"
                )
        if spec.aggregation != "sum":
            raise ConfigError(
                f"aggregation for method {self.name!r} must be 'sum' (the server "
                f"sees only the sum of embeddings), got {spec.aggregation!r}"
            )

    def pbm_params(self, spec: RunSpec) -> tuple[int, float]:
        mode = spec.option("eval", self)
        if mode not in ("private", "plain"):
            raise ConfigError(f"eval must be 'private' or 'plain', got {mode!r}")
        return check_pbm_params(spec.option("b", self), spec.option("beta", self))

    def finish(
        self,
        ctx: RunContext,
        hooks: BoundedSumHooks,
        privacy: PrivacyReport | None,
        extra: dict[str, Any],
    ) -> FitResult:
        """Train and score on the split-NN trainer; add the AUPRC (the paper's phishing metric)."""
        run = fit_splitnn(ctx, hooks)
        if privacy is not None:  # each party gets its rows' exact label-dependent gradients
            privacy = label_unit(privacy, labels_protected=False)
        return self.score(ctx, run, privacy, extra)

    def score(
        self, ctx: RunContext, run: Any, privacy: PrivacyReport | None, extra: dict[str, Any]
    ) -> FitResult:
        """The FitResult of a finished run, with the AUPRC (the paper's phishing metric)."""
        if run.scores is not None and ctx.info.task == "binary":
            y = ctx.views[ctx.info.label_party].y_test
            extra["auprc"] = average_precision(y, np.asarray(run.scores)[:, 1])
        return run.result(privacy=privacy, extra=extra)


@register_method
class PBMVFL(SumSplitNN):
    name = "pbm-vfl"
    summary = "PBM-quantized embeddings summed by pairwise-mask secure aggregation; DP-SGD bottoms"
    family = "dp+mpc"
    options = {
        **PBM_OPTIONS,
        **BOTTOM_OPTIONS,
        **RELEASE_OPTIONS,
        "active_features": ACTIVE_FEATURES,
    }
    accepts_epsilon = True  # sets beta (and b); without it, the given (b, beta)

    def validate(self, spec: RunSpec) -> None:
        from protocols.secagg import MAX_BITS

        super().validate(spec)
        b = spec.option("b", self)
        if (b * spec.parties).bit_length() > MAX_BITS:
            raise ConfigError(
                f"b * parties must be < 2^{MAX_BITS} for secure aggregation, got {b * spec.parties}"
            )
        check_accountant_size(b, spec.parties)

    def fit(self, ctx: RunContext) -> FitResult:
        spec = ctx.spec
        b, beta = self.pbm_params(spec)
        M, P, E = ctx.info.data_parties, spec.embedding_dim, spec.epochs
        delta = spec.delta or DEFAULT_DELTA
        if release_once(spec, self, ctx.info.task):
            return self.fit_release_once(ctx, b, delta)
        plan = bottom_plan(spec, self, delta=delta)
        grads = None if plan.dp is None else plan.events(E)
        if spec.epsilon is not None:
            with progress(_calibrating(spec.epsilon, M)):
                b, beta = calibrate_beta(
                    float(spec.epsilon),
                    b=b,
                    n_parties=M,
                    dim=P,
                    uses=plan_uses(ctx, plan, private_eval(self, spec)),
                    delta=delta,
                    extra_events=grads or (),
                )
        with progress(f"pbm-vfl: accounting the run's epsilon for {M} parties"):
            report = pbm_report(
                b=b,
                beta=beta,
                n_parties=M,
                dim=P,
                epochs=E,
                delta=delta,
                parties=list(ctx.data_parties),
                n_rows=(ctx.info.n_train, ctx.info.n_test if private_eval(self, spec) else 0),
                outside_guarantee=outside(self, spec),
                target_epsilon=spec.epsilon,
                grad_events=grads,
            )
        hooks = PBMSecAggHooks(
            ctx, b=b, beta=beta, eval_mode=eval_mode(self, spec), plan=plan, delta=delta
        )
        hooks.key_agreement(ctx)
        result = self.finish(ctx, hooks, report, {"bits_per_value": hooks.bits})
        return self.secagg_extra(hooks, result)

    def secagg_extra(self, hooks: PBMSecAggHooks, result: FitResult) -> FitResult:
        """Secure aggregation's costs and dropouts (a dropout voids ε: ``void_on_dropouts``)."""
        if hooks.server_s:
            ms = np.array(hooks.server_s) * 1e3
            result.extra["secagg_server_ms"] = {
                "median": float(np.median(ms)),
                "max": float(ms.max()),
            }
        if hooks.server is not None:
            result.extra["secagg_dropouts"] = hooks.dropouts
            if hooks.dropouts and result.privacy is not None:
                result.privacy = void_on_dropouts(result.privacy, hooks.dropouts)
        if hooks.party_s:
            result.extra["pbm_party_ms_median"] = float(np.median(hooks.party_s) * 1e3)
        return result

    def fit_release_once(self, ctx: RunContext, b: int, delta: float) -> FitResult:
        """Release-once (``training.release_once``): a training row's P coordinates go through
        PBM and secure aggregation once, after its ``bottom_epochs`` DP-SGD releases; a test
        row's once at scoring. beta is calibrated on a training row's party-row ε (one use plus
        the gradient releases, at the same RDP orders); the record (``pbm_release_once``) has
        both units, the sample unit with the labels' randomized response composed in. The
        senders are the passive parties (every data party, or 1..K-1 with
        ``--active-features``) and the label holder unmasks their sum."""
        spec = ctx.spec
        senders, L = passive_parties(ctx), ctx.info.label_party
        M, P = len(senders), spec.embedding_dim
        plan = release_plan(spec, self, delta=delta, n_train=ctx.info.n_train)
        with progress(_calibrating(spec.epsilon, M)):
            b, beta = calibrate_beta(
                float(spec.epsilon),
                b=b,
                n_parties=M,
                dim=P,
                uses=1,
                delta=delta,
                extra_events=bottom_events(plan),
            )
            test_beta = calibrate_test_beta(
                float(spec.epsilon), b=b, n_parties=M, dim=P, delta=delta, floor=beta
            )
        report = pbm_release_once_report(
            ctx, plan, b=b, beta=beta, senders=senders, delta=delta, test_beta=test_beta
        )
        hooks = PBMSecAggHooks(
            ctx,
            b=b,
            beta=beta,
            eval_mode="private",
            plan=BottomPlan(None, 1),
            senders=senders,
            aggregator=L,
            eval_params=(b, test_beta),
            delta=delta,
        )
        hooks.key_agreement(ctx)
        run = fit_release_once(ctx, hooks, plan=plan)
        ceiling = accuracy_ceiling_extra(
            ctx, epsilon=_pbm_eps("sample", b, test_beta, M, P, delta), delta=delta
        )
        result = self.score(ctx, run, report, {"bits_per_value": hooks.bits, **ceiling})
        return self.secagg_extra(hooks, result)


def _pbm_eps(unit: str, b: int, beta: float, M: int, P: int, delta: float) -> float:
    """ε of a test row's one scoring use in ``unit`` (``sample``: all M parties' blocks, the
    basis of the accuracy ceiling's total-variation bound)."""
    from securevfl.privacy.pbm_accountant import pbm_epsilon

    return pbm_epsilon(unit, b=b, beta=beta, n_parties=M, dim=P, uses=1, delta=delta, kind="rdp")


def _calibrating(epsilon: float, M: int) -> str:
    return f"pbm-vfl: calibrating beta to epsilon {float(epsilon):g} for {M} parties"


def passive_parties(ctx: RunContext) -> list[int]:
    """The data parties whose rows leave them: all but the label holder."""
    return [k for k in ctx.data_parties if k != ctx.info.label_party]


def ceiling_extra(ctx: RunContext, report: PrivacyReport) -> dict[str, Any]:
    """The accuracy ceiling of a Gaussian release-once run (each passive party's test release
    at μ = Δ/σ_test)."""
    sens, sigma_t = report.extra["sensitivity"], report.extra["sigma_test"]
    mus = [sens / sigma_t] * len(passive_parties(ctx))
    return accuracy_ceiling_extra(ctx, mus=mus, delta=report.delta)


def plan_uses(ctx: RunContext, plan: BottomPlan, private: bool) -> int:
    """Uses of a row the accountant counts: its own (DP bottoms: E, +1 scored privately;
    conservative) or every release of the party's rows (exact bottoms)."""
    if plan.dp is not None:
        return ctx.spec.epochs + (1 if private else 0)
    return row_uses(ctx, private_eval=private)


def private_eval(method: Method, spec: RunSpec) -> bool:
    """Whether the test split is scored through the private aggregation."""
    return "eval" in method.options and spec.option("eval", method) == "private"


def eval_mode(method: Method, spec: RunSpec) -> str:
    """How the trainer scores the test split for this method and spec."""
    return "private" if private_eval(method, spec) else "plain"


def outside(method: Method, spec: RunSpec) -> list[str]:
    """What the run releases that its per-row epsilon does not cover."""
    out = []
    if not private_eval(method, spec):
        out.append("test-time scoring on plain embeddings (--eval plain): the server sees them")
    return out
