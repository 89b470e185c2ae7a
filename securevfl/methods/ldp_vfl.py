"""PBM-VFL's baselines on the same split-NN shape (see ``pbm_vfl``):

* ``npq``: Algorithm 2 without PBM and secure aggregation (plain embeddings, plain sum);
* ``ldp-vfl``: every party adds N(0, 2M/(b beta^2)) to each coordinate, no secure aggregation.

The privacy units and the count of releases are PBM-VFL's (``pbm_vfl``'s docstring).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.context import RunContext
from securevfl.errors import ConfigError
from securevfl.methods.base import register_method
from securevfl.methods.dp_bottom_options import BOTTOM_OPTIONS, BottomPlan, bottom_plan
from securevfl.methods.pbm_hooks import BOUND, BoundedSumHooks
from securevfl.methods.pbm_vfl import (
    DEFAULT_DELTA,
    PBM_OPTIONS,
    SumSplitNN,
    ceiling_extra,
    eval_mode,
    outside,
    private_eval,
)
from securevfl.methods.release_options import (
    ACTIVE_FEATURES,
    RELEASE_OPTIONS,
    gaussian_release_report,
    release_once,
    release_plan,
)
from securevfl.model.checkpoint_privacy import CountedNormals
from securevfl.privacy.accountant import Accountant, PrivacyLedger, calibrate
from securevfl.privacy.dp_bottom import test_noise_multiplier, with_test_rows
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.pbm import ldp_sigma
from securevfl.privacy.pbm_accountant import ldp_event
from securevfl.privacy.units import label_unit
from securevfl.results import FitResult
from securevfl.training import EVAL, fit_splitnn, row_uses
from securevfl.training.release_once import fit_release_once


class LDPHooks(BoundedSumHooks):
    """LDP-VFL: Gaussian noise of variance 2M/(b beta^2) on every coordinate of every embedding."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        sigma: float,
        eval_mode: str,
        plan: BottomPlan,
        sigma_test: float | None = None,
        delta: float | None = None,
    ) -> None:
        super().__init__(ctx, eval_mode=eval_mode, plan=plan)
        self.sigma = sigma
        self.sigma_test = sigma if sigma_test is None else sigma_test
        self.delta = delta
        # counted draws: a checkpoint keeps each generator's position, never its key
        self.rngs = {
            k: CountedNormals(ctx.noise_rng(k, "ldp-vfl"))
            for k in ctx.rt.local_parties
            if k < ctx.info.data_parties
        }
        self.bottom_rngs = {k: CountedNormals(r) for k, r in self.bottom_rngs.items()}

    def checkpoint_refusal(self, ctx: RunContext) -> str | None:
        return None  # its state is the two draw counts below (and the trainer's models)

    def checkpoint_state(self, ctx: RunContext, k: int) -> tuple[dict, dict]:
        if k not in self.rngs:
            return {}, {}
        return {}, {"noise_draws": self.rngs[k].drawn, "bottom_draws": self.bottom_rngs[k].drawn}

    def restore_checkpoint(
        self, ctx: RunContext, k: int, arrays: dict, counts: dict, replay: bool
    ) -> None:
        if replay and k in self.rngs:  # noise from --seed: continue where the run stopped
            self.rngs[k].skip(int(counts["noise_draws"]))
            self.bottom_rngs[k].skip(int(counts["bottom_draws"]))

    def test_gain(self) -> float:
        """σ²_train / σ²_test (a test row's one release gets the whole target)."""
        return float((self.sigma / self.sigma_test) ** 2)

    def scoring_release(self, ctx: RunContext) -> dict[str, Any] | None:
        """A scored row: N(0, sigma_test^2) on each of its P tanh-bounded coordinates, the
        L2 sensitivity of one party's embedding 2·C·sqrt(P) (what the test rows' ledger uses)."""
        if self.delta is None:
            return None
        sens = 2.0 * BOUND * ctx.spec.embedding_dim**0.5
        return {
            "mechanism": "gaussian",
            "sigma": float(self.sigma_test),
            "sensitivity": float(sens),
            "delta": float(self.delta),
        }

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        sigma = (
            self.sigma_test if self.batch is not None and self.batch.phase == EVAL else self.sigma
        )
        return (emb + self.rngs[k].normal(0.0, sigma, size=emb.shape)).astype(np.float32)


@register_method
class NPQ(SumSplitNN):
    name = "npq"
    summary = "PBM-VFL's baseline: Algorithm 2 without PBM or secure aggregation (no privacy)"
    family = "plain"

    def fit(self, ctx: RunContext) -> FitResult:
        return self.finish(ctx, BoundedSumHooks(ctx), None, {})


@register_method
class LDPVFL(SumSplitNN):
    name = "ldp-vfl"
    summary = (
        "PBM-VFL's baseline: Gaussian noise per embedding coordinate, no secagg; DP-SGD bottoms"
    )
    family = "dp"
    options = {
        **PBM_OPTIONS,
        **BOTTOM_OPTIONS,
        **RELEASE_OPTIONS,
        "active_features": ACTIVE_FEATURES,
    }
    accepts_epsilon = True  # sets the noise; without it, the noise of (b, beta)

    def fit(self, ctx: RunContext) -> FitResult:
        spec = ctx.spec
        b, beta = self.pbm_params(spec)
        M, P, E = ctx.info.data_parties, spec.embedding_dim, spec.epochs
        delta = spec.delta or DEFAULT_DELTA
        if release_once(spec, self, ctx.info.task):
            return self.fit_release_once(ctx, delta)

        plan = bottom_plan(spec, self, delta=delta)
        private = private_eval(self, spec)
        # DP bottoms: a training row's E uses (test rows apart); exact bottoms: every release of
        # a party's rows counts (module docstring of pbm_vfl)
        uses = E if plan.dp is not None else row_uses(ctx, private_eval=private)

        def eps_of(unit: str, sigma: float, uses: int = uses, grads: int = E) -> float:
            ev = ldp_event(unit, sigma=sigma, n_parties=M, dim=P, uses=uses, bound=BOUND)
            acc = Accountant().compose(ev)
            for grad in plan.events(grads):  # a sample moves every party's bottom update
                acc.compose(grad, M if unit == "sample" else 1)
            return acc.get_epsilon(delta)

        if spec.epsilon is None:
            sigma = ldp_sigma(b=b, beta=beta, n_parties=M)
        else:
            sigma, eps = calibrate(
                lambda s: eps_of("party-row", s),
                float(spec.epsilon),
                lo=1e-4,
                hi=1e6,
                what="sigma",
            )
            if eps < 0.98 * float(spec.epsilon):
                raise ConfigError(
                    f"epsilon {spec.epsilon:g} cannot be met within 2%: sigma 1e-4 gives {eps:.4g}"
                )
        sigma_test = sigma
        if plan.dp is not None and private:  # a test row's one release gets the whole target
            sens = 2.0 * BOUND * P**0.5
            sigma_test = sens * test_noise_multiplier(float(spec.epsilon), delta)

        def report_of(epochs_again: int, scorings_again: int) -> PrivacyReport:
            """The record's privacy; a resume's stages released twice (``checkpoint_privacy``)
            add their uses: an epoch a use of every training row (DP bottoms: one per row and
            a gradient release), a private scoring a use of every test row."""
            n_uses = uses + epochs_again * (1 if plan.dp is not None else ctx.info.n_train)
            if plan.dp is None and private:
                n_uses += scorings_again * ctx.info.n_test
            grads = E + epochs_again
            ledger, test = PrivacyLedger("party-row"), PrivacyLedger("party-row")
            for k in ctx.data_parties:
                ev = ldp_event("party-row", sigma=sigma, n_parties=M, dim=P, uses=n_uses)
                ledger.compose(k, ev)
                for grad in plan.events(grads):
                    ledger.compose(k, grad)
                if plan.dp is not None and private:
                    test.compose(
                        k,
                        ldp_event(
                            "party-row",
                            sigma=sigma_test,
                            n_parties=M,
                            dim=P,
                            uses=1 + scorings_again,
                        ),
                    )
            report = ledger.report(
                delta,
                target_epsilon=spec.epsilon,
                outside_guarantee=outside(self, spec),
                extra={
                    "by_unit": {
                        "party-row": eps_of("party-row", sigma, n_uses, grads),
                        "sample": eps_of("sample", sigma, n_uses, grads),
                    },
                    "per_row_only": None if plan.dp is not None else eps_of("party-row", sigma, E),
                    "sigma": sigma,
                    "sigma_test": sigma_test,
                    "bottom": "exact" if plan.dp is None else "dp",
                    "bottom_noise_multiplier": None
                    if plan.dp is None
                    else plan.dp.noise_multiplier,
                    "releases_per_row": {"train": P * E, "test": P if private else 0},
                },
            )
            return (
                with_test_rows(report, test, delta) if plan.dp is not None and private else report
            )

        hooks = LDPHooks(
            ctx,
            sigma=sigma,
            eval_mode=eval_mode(self, spec),
            plan=plan,
            sigma_test=sigma_test,
            delta=delta,
        )
        run = fit_splitnn(ctx, hooks)
        resumed = hooks.resumed or {}
        twice = bool(resumed.get("counted_twice"))
        report = report_of(
            resumed.get("epochs_re_released", 0) if twice else 0,
            resumed.get("scorings_re_released", 0) if twice else 0,
        )
        if resumed:
            report.extra["resumed"] = resumed
        privacy = label_unit(report, labels_protected=False)
        return self.score(ctx, run, privacy, {"sigma": sigma})

    def fit_release_once(self, ctx: RunContext, delta: float) -> FitResult:
        """Release-once (``training.release_once``): a training row's one Gaussian release
        (Δ = 2C√P over its P tanh-bounded coordinates) and its ``bottom_epochs`` DP-SGD
        releases, composed exactly (Gaussian DP) and calibrated to the target; a test row's
        one release gets the whole target on its own (disjoint rows)."""
        plan = release_plan(ctx.spec, self, delta=delta, n_train=ctx.info.n_train)
        sens = 2.0 * BOUND * ctx.spec.embedding_dim**0.5
        report, sigma, sigma_test = gaussian_release_report(
            ctx, plan, sensitivity=sens, delta=delta
        )
        hooks = LDPHooks(
            ctx,
            sigma=sigma,
            eval_mode="private",
            plan=BottomPlan(None, 1),
            sigma_test=sigma_test,
            delta=delta,
        )
        run = fit_release_once(ctx, hooks, plan=plan)
        return self.score(ctx, run, report, {"sigma": sigma, **ceiling_extra(ctx, report)})
