"""The active party alone, on its own columns: what VFL must beat to be worth it.

``--model gbdt``: scikit-learn's HistGradientBoosting on its columns (``models.trees``).
``--model best``: the label holder's best model alone, the floor a collaboration must beat:
GLM, MLP and boosted trees each fitted on four fifths of its training rows, the one with the
best metric on the remaining fifth (never the test rows) refitted on every training row. The
record's ``extra.floor_choice`` names the pick and each candidate's validation score.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from baselines.vfl import fit_plain
from securevfl.context import PartyView, RunContext, RunSpec
from securevfl.methods.base import Method, register_method
from securevfl.models.tree_arrays import trees_to_arrays
from securevfl.models.trees import fit_trees, tree_scores
from securevfl.results import FitResult, ModelPart
from securevfl.runtime import InProcessRuntime

CANDIDATES = ("glm", "mlp", "gbdt")
VALIDATION_SHARE = 0.2
TREES_REFUSAL = (
    "boosted trees on pooled columns (centralized --model gbdt) and multiclass boosted trees do "
    "not save a model yet"
)


@register_method
class LocalOnly(Method):
    name = "local"
    summary = (
        "active party only: trains on party 0's columns, no communication (--model best: its "
        "best of glm, mlp and gbdt, chosen on a validation fifth of its training rows)"
    )
    family = "plain"
    models = ("glm", "mlp", "cnn", "gbdt", "best")
    label_party_only = True

    def fit(self, ctx: RunContext) -> FitResult:
        if not ctx.rt.here(0):
            return FitResult(None, 0.0)
        solo = _solo(ctx, ctx.views[0], ctx.spec)
        if ctx.spec.model == "best":
            return fit_best(solo)
        return fit_one(solo)


def fit_one(ctx: RunContext) -> FitResult:
    """The label holder's one model (``spec.model``) on its columns."""
    if ctx.spec.model != "gbdt":
        return fit_plain(ctx)
    v, task = ctx.views[0], ctx.info.task
    t0 = time.perf_counter()
    model = fit_trees(v.X_train, v.y_train, task, ctx.shared_seed)
    scores = tree_scores(model, v.X_test, task)
    if task == "multiclass":
        return FitResult(scores, time.perf_counter() - t0, model_refusal=TREES_REFUSAL)
    return FitResult(scores, time.perf_counter() - t0, model={0: trees_part(model, v, task)})


def trees_part(model: Any, view: PartyView, task: str) -> ModelPart:
    """The label holder's saved boosted trees: a linear head of zero weights whose margin is
    the trees' (plain node arrays, ``models.tree_arrays``; predict walks them with numpy and
    applies the link, as scikit-learn's predict_proba / predict does)."""
    d = int(np.asarray(view.X_train).shape[1])
    arrays = {"w": np.zeros(d), "bias": np.zeros(1), **trees_to_arrays(model)}
    link = "identity" if task == "regression" else "sigmoid"
    return ModelPart("linear", arrays, {"head": True, "link": link, "intercept": False})


def fit_best(ctx: RunContext) -> FitResult:
    """``--model best`` (module docstring): the pick is made on training rows only."""
    from securevfl.model.evaluation import metrics_for  # the record's own metric

    v = ctx.views[0]
    order = ctx.shared_rng("floor/validation").permutation(len(v.y_train))
    cut = int(round(len(order) * (1 - VALIDATION_SHARE)))
    fit_rows, val_rows = np.sort(order[:cut]), np.sort(order[cut:])
    inner = PartyView(
        0,
        v.columns,
        v.X_train[fit_rows],
        v.X_train[val_rows],
        v.y_train[fit_rows],
        v.y_train[val_rows],
    )
    scores: dict[str, float] = {}
    t0 = time.perf_counter()
    for model in CANDIDATES:
        spec = replace(ctx.spec, model=model)
        sub = _solo(ctx, inner, spec, n=(len(fit_rows), len(val_rows)))
        fit = fit_one(sub)
        metrics = metrics_for(ctx.info.task, inner.y_test, fit.test_scores)
        scores[model] = _key_metric(ctx.info.task, metrics)
    sign = -1.0 if ctx.info.task == "regression" else 1.0  # a NaN (diverged) is never picked
    pick = max(CANDIDATES, key=lambda m: -np.inf if np.isnan(scores[m]) else sign * scores[m])
    final = fit_one(_solo(ctx, v, replace(ctx.spec, model=pick)))
    final.train_s = time.perf_counter() - t0
    final.extra["floor_choice"] = {
        "model": pick,
        "validation": scores,
        "validation_share": VALIDATION_SHARE,
    }
    final.model_refusal = final.model_refusal or (
        None if final.model is not None else "it returns no model to save"
    )
    return final


def _key_metric(task: str, metrics: dict) -> float:
    """The metric the floor is chosen on: MSE (regression, lower is better), else accuracy."""
    return float(metrics["mse"] if task == "regression" else metrics["accuracy"])


def _solo(
    ctx: RunContext, view: PartyView, spec: RunSpec, n: tuple[int, int] | None = None
) -> RunContext:
    """A one-party run of the label holder on ``view`` (``n``: its train/test sizes)."""
    n_train, n_test = n if n is not None else (ctx.info.n_train, ctx.info.n_test)
    info = replace(
        ctx.info,
        data_parties=1,
        n_parties=1,
        features_per_party=ctx.info.features_per_party[:1],
        n_train=n_train,
        n_test=n_test,
    )
    return RunContext(
        rt=InProcessRuntime(1),
        spec=spec,
        info=info,
        views={0: view},
        shared_seed=ctx.shared_seed,
    )


__all__ = ["LocalOnly", "RunSpec", "fit_best", "fit_one"]
