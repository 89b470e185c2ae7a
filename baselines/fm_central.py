"""Centralized functional mechanism (Zhang et al. 2012; FM-VFL with K = 1): the reference of
Claim 1. One party holds all columns (pooled) and the labels, perturbs every distinct monomial's
coefficient with Lap(Δ_f/ε), Δ_f from Lemma 1 with B the rows' L1 bound, and solves like
``fm-vfl``.

**The L1 bound (issue 25, the sign flips).** The paper takes B = d, the L1 norm of a row of the
box [-1, 1]^d at its corner, so Δ_f = B + B²/4 (logistic) grows as d². Real rows sit far inside
the box: centred, the median row's L1 norm is 5.1 of d = 31 on breast, 10.5 of 24 on phishing,
7.5 of 42 on adult. At ε = 1 on breast the Laplace scale Δ_f/ε = 271 drowns every coefficient
and the fit's direction is a coin flip (seed 0: accuracy 0.23, AUC 0.13, below the majority
0.628). ``--l1-bound auto`` (the default) scales each row's features so their L1 norm is at most
2 sqrt(d_features) (the intercept's 1 added; a per-row map applied to test rows alike, no data
dependence), and Lemma 1 is used with that B: Δ_f 271 -> 48 on breast. ``--l1-bound box`` is the
paper's B = d (no clipping; the fm-vfl twin of Claim 1).

**The mechanism (issue 25).** Like fm-vfl, the default is the Gaussian functional mechanism
(``securevfl.privacy.fm_gaussian``: rows scaled to L2 norm <= ``--l2-bound`` times sqrt(K),
the bound of fm-vfl's K blocks at ``--l2-bound`` each, so the pooled twin has the same R; every
coefficient plus N(0, σ²)); ``--mechanism laplace`` keeps Lemma 1 with the L1 bound above.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec, fingerprint, parse_bool
from securevfl.methods.base import Method, register_method
from securevfl.methods.fm_noise import centring_facts, centring_of, fm_delta
from securevfl.methods.fm_options import (
    L2_BOUND_OPTION,
    MECHANISM_OPTION,
    clip_l1,
    parse_l1_bound,
    resolve_l1_bound,
)
from securevfl.methods.fm_vfl import (
    RIDGE_OPTION,
    fm_common_defaults,
    fm_task,
    label_vector,
    laplace_upper,
    resolve_ridge,
    single_coefficients,
    solve_noisy_quadratic,
)
from securevfl.privacy.events import PureDpEvent
from securevfl.privacy.fm_gaussian import (
    clip_l2,
    gaussian_ledger,
    gaussian_sigma,
    ridge_scale,
    row_l2_bound,
)
from securevfl.privacy.functional import block_sensitivities, fm_ledger
from securevfl.results import FitResult
from securevfl.training.export import pooled_linear


def central_fm(
    task: str,
    X: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: float,
    rng: np.random.Generator | None,
    ridge: float = 1.0,
    unit_noise: tuple[np.ndarray, np.ndarray, float] | None = None,
    l1_bound: float | None = None,
    l2_bound: float | None = None,
    delta: float | None = None,
    parties: int = 1,
    centring_epsilon: float = 0.0,
):
    """FM on pooled box-bounded data; returns (w, scale, Δ_f, privacy ledger).

    ``l1_bound``: every row's L1 norm is at most this (None: d, the box's corner). ``l2_bound``
    (with ``delta``): the Gaussian mechanism for rows of L2 norm <= it instead; ``scale`` is then
    σ and Δ_f the L2 sensitivity; ``centring_epsilon`` > 0: the ``parties`` pure releases of the
    column means composed into the same ledger (σ sized for both).

    ``unit_noise`` = (upper-triangular Lap(1) matrix, Lap(1) vector, Lap(1) scalar) replaces the
    draws of ``rng`` (Claim 1 test: the same draws as a VFL run).
    """
    d = X.shape[1]
    gauss = l2_bound is not None
    if gauss:
        scale, sens2 = gaussian_sigma(
            task,
            l2_bound,
            epsilon=epsilon,
            delta=delta,
            parties=parties,
            centring_epsilon=centring_epsilon,
        )
        ledger = gaussian_ledger(sens2, scale, 1, 0.0)
        if centring_epsilon > 0:  # the sample unit: all K parties' means, one accountant
            ledger.compose(None, PureDpEvent(centring_epsilon), parties)
            ledger.compose(0, PureDpEvent(centring_epsilon), parties, sample=False)
    else:
        sens = block_sensitivities(task, [float(d if l1_bound is None else l1_bound)])
        scale, sens2 = sens[(0, 0)] / epsilon, sens[(0, 0)]
        ledger = fm_ledger(sens, {(0, 0): scale})
    # the objective's polynomial coefficients: constant, first-order (linear) and second-order
    _, linear, U = single_coefficients(task, X, label_vector(task, y))
    if unit_noise is None and gauss:
        unit_noise = (np.triu(rng.normal(0.0, 1.0, (d, d))), rng.normal(0.0, 1.0, d), 0.0)
    elif unit_noise is None:
        unit_noise = (laplace_upper(rng, d, 1.0), rng.laplace(0.0, 1.0, d), rng.laplace(0.0, 1.0))
    E_U, E_l, _ = unit_noise
    w = solve_noisy_quadratic(
        linear + scale * E_l, U + scale * E_U, scale=ridge_scale(gauss, scale), ridge=ridge
    )
    return w, scale, sens2, ledger


@register_method
class CentralFM(Method):
    name = "fm-central"
    summary = "centralized functional mechanism (K = 1, pooled data): FM-VFL's Claim 1 reference"
    family = "dp"
    privacy_unit = "sample"
    models = ("glm",)
    requires_epsilon = True
    pooled_data = True
    options = {
        "intercept": Option(
            parse_bool,
            True,
            "a constant-1 feature (counted in d)",
        ),
        "ridge": RIDGE_OPTION,
        "l1_bound": Option(
            parse_l1_bound,
            "auto",
            "L1 bound B of a row (intercept included) in Lemma 1: rows are scaled to it; auto: "
            "1 + 2 sqrt(d), box: 1 + d, the paper's (no scaling)",
            when=("mechanism", ("laplace",)),
        ),
        "mechanism": MECHANISM_OPTION,
        "l2_bound": L2_BOUND_OPTION,
    }

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """fm-vfl's: its centralized twin runs on the same data."""
        return fm_common_defaults(given)

    def composes_centring(self, spec: RunSpec) -> bool:
        """The Gaussian composes the means' releases in its own PLD ledger (tight)."""
        return spec.option("mechanism", self) == "gaussian"

    def fit(self, ctx: RunContext) -> FitResult:
        if not ctx.rt.here(0):
            return FitResult(None, 0.0)
        task = fm_task(ctx.info.task)
        X, y, Xt, _ = ctx.pooled()
        s = math.sqrt(ctx.info.row_norm_bound_sq)  # back to the paper's range |x_a| <= 1
        X, Xt = np.clip(X * s, -1, 1), np.clip(Xt * s, -1, 1)
        intercept = bool(ctx.spec.option("intercept", self))
        mechanism = ctx.spec.option("mechanism", self)
        if mechanism == "gaussian":  # fm-vfl's K blocks at R_k each: the same whole-row R
            B = None
            R_rows = float(ctx.spec.option("l2_bound", self)) * math.sqrt(ctx.spec.parties)
            X, Xt = clip_l2(X, R_rows), clip_l2(Xt, R_rows)
            R = row_l2_bound([R_rows], intercept)
            norm = {"input_l2": R_rows}
        else:
            R = None
            B = resolve_l1_bound(ctx.spec.option("l1_bound", self), X.shape[1], intercept)
            X, Xt = clip_l1(X, B - intercept), clip_l1(Xt, B - intercept)
            norm = {"input_l1": B - intercept}
        if intercept:
            X = np.hstack([np.ones((len(X), 1)), X])
            Xt = np.hstack([np.ones((len(Xt), 1)), Xt])
        t0 = time.perf_counter()
        eps_c = centring_of(self, ctx.spec, ctx.spec.parties) if R is not None else 0.0
        w, scale, delta_f, ledger = central_fm(
            task,
            X,
            y,
            epsilon=ctx.spec.epsilon,
            rng=ctx.noise_rng(0, "fm"),
            ridge=resolve_ridge(ctx.spec.option("ridge", self), ctx.info.n_train, mechanism),
            l1_bound=B,
            l2_bound=R,
            delta=fm_delta(ctx.spec),
            parties=ctx.spec.parties,
            centring_epsilon=eps_c,
        )
        train_s = time.perf_counter() - t0
        z = Xt @ w
        scores = 1.0 / (1.0 + np.exp(-z)) if task == "logistic" else z
        facts = {"l1_bound": B} if R is None else {"l2_bound": R}
        if eps_c > 0:
            facts["centring"] = centring_facts(self, ctx.spec, eps_c)
        privacy = ledger.report(
            0.0 if R is None else fm_delta(ctx.spec),
            target_epsilon=ctx.spec.epsilon,
            extra={"mechanism": mechanism, "delta_f": delta_f, "d": X.shape[1], "scale": scale}
            | facts,
        )
        return FitResult(
            scores,
            train_s,
            privacy=privacy,
            fingerprints={0: fingerprint(w)},
            extra={"d": X.shape[1]},
            model={
                0: pooled_linear(
                    w,
                    np.zeros(1),
                    link="sigmoid" if task == "logistic" else "identity",
                    input_scale=s,
                    input_clip=1.0,
                    **norm,
                    intercept=bool(ctx.spec.option("intercept", self)),
                )
            },
        )
