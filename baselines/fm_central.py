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
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, fingerprint, parse_bool
from securevfl.methods.base import Method, register_method
from securevfl.methods.fm_options import clip_l1, parse_l1_bound, resolve_l1_bound
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
):
    """FM on pooled box-bounded data; returns (w, scale, Δ_f, privacy ledger).

    ``l1_bound``: every row's L1 norm is at most this (None: d, the box's corner).

    ``unit_noise`` = (upper-triangular Lap(1) matrix, Lap(1) vector, Lap(1) scalar) replaces the
    draws of ``rng`` (Claim 1 test: the same draws as a VFL run).
    """
    d = X.shape[1]
    sens = block_sensitivities(task, [float(d if l1_bound is None else l1_bound)])
    scale = sens[(0, 0)] / epsilon
    # the objective's polynomial coefficients: constant, first-order (linear) and second-order
    _, linear, U = single_coefficients(task, X, label_vector(task, y))
    if unit_noise is None:
        unit_noise = (laplace_upper(rng, d, 1.0), rng.laplace(0.0, 1.0, d), rng.laplace(0.0, 1.0))
    E_U, E_l, _ = unit_noise
    w = solve_noisy_quadratic(linear + scale * E_l, U + scale * E_U, scale=scale, ridge=ridge)
    return w, scale, sens[(0, 0)], fm_ledger(sens, {(0, 0): scale})


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
        ),
    }

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """fm-vfl's: its centralized twin runs on the same data."""
        return fm_common_defaults(given)

    def fit(self, ctx: RunContext) -> FitResult:
        if not ctx.rt.here(0):
            return FitResult(None, 0.0)
        task = fm_task(ctx.info.task)
        X, y, Xt, _ = ctx.pooled()
        s = math.sqrt(ctx.info.row_norm_bound_sq)  # back to the paper's range |x_a| <= 1
        X, Xt = np.clip(X * s, -1, 1), np.clip(Xt * s, -1, 1)
        intercept = bool(ctx.spec.option("intercept", self))
        B = resolve_l1_bound(ctx.spec.option("l1_bound", self), X.shape[1], intercept)
        X, Xt = clip_l1(X, B - intercept), clip_l1(Xt, B - intercept)
        if intercept:
            X = np.hstack([np.ones((len(X), 1)), X])
            Xt = np.hstack([np.ones((len(Xt), 1)), Xt])
        t0 = time.perf_counter()
        w, scale, delta_f, ledger = central_fm(
            task,
            X,
            y,
            epsilon=ctx.spec.epsilon,
            rng=ctx.noise_rng(0, "fm"),
            ridge=resolve_ridge(ctx.spec.option("ridge", self), ctx.info.n_train),
            l1_bound=B,
        )
        train_s = time.perf_counter() - t0
        z = Xt @ w
        scores = 1.0 / (1.0 + np.exp(-z)) if task == "logistic" else z
        privacy = ledger.report(
            0.0,
            target_epsilon=ctx.spec.epsilon,
            extra={"delta_f": delta_f, "d": X.shape[1], "scale": scale, "l1_bound": B},
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
                    input_l1=B - intercept,
                    intercept=bool(ctx.spec.option("intercept", self)),
                )
            },
        )
