"""Generic k-fold tuning inside the training split, for any method.

A method hands :func:`kfold_tune` a grid of hyperparameter settings and a function that runs
one fold (train on the fold's rows, score its validation rows as the test split, through the
method's own, possibly private, path). The folds come from the shared seed (every party derives
the same split); the label holder scores each fold and picks the setting; the choice is then
broadcast to the data parties. That choice is computed from the label holder's exact labels and
leaves it outside any mechanism: a private method that tunes must say so in its privacy report.
Traffic is metered as phase ``tuning``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from securevfl.context import PartyView, RunContext
from securevfl.errors import ConfigError, ProtocolError
from securevfl.model.evaluation import metrics_for
from securevfl.runtime.expect import Expect

# run(fold context, setting, fold index) -> validation scores at the label holder (None elsewhere)
FoldRun = Callable[[RunContext, Mapping[str, Any], int], np.ndarray | None]


def fold_context(ctx: RunContext, tr: np.ndarray, va: np.ndarray) -> RunContext:
    """The training split restricted to fold rows: ``tr`` trains, ``va`` plays the test split."""
    views = {}
    for k, v in ctx.views.items():
        views[k] = PartyView(
            index=v.index, columns=v.columns, X_train=v.X_train[tr], X_test=v.X_train[va]
        )
        if v.y_train is not None:
            views[k].y_train, views[k].y_test = v.y_train[tr], v.y_train[va]
    info = dataclasses.replace(ctx.info, n_train=len(tr), n_test=len(va))
    return dataclasses.replace(ctx, views=views, info=info)


def cv_score(task: str, y: np.ndarray, scores: np.ndarray) -> float:
    """Higher is better: the AUC where defined (accuracy ties at the majority class whenever
    noise flattens a model), else accuracy, else -MSE; -inf when not finite."""
    m = metrics_for(task, y, scores)
    s = m.get("auc", m.get("accuracy", -m.get("mse", np.inf)))
    return s if np.isfinite(s) else -np.inf


def kfold_tune(
    ctx: RunContext,
    grid: Sequence[Mapping[str, Any]],
    run: FoldRun,
    *,
    folds: int = 5,
    purpose: str = "cv",
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """k-fold CV over ``grid``; return (the chosen setting, the table of mean CV scores).

    Every setting runs on every fold (``run``); the table has one row per setting with its mean
    ``cv_score``; the first best row wins ties (order the grid from the cheapest setting). The
    fold split is a permutation from the shared generator ``purpose``. All settings must name
    the same numeric keys.
    """
    n = ctx.info.n_train
    if folds < 2:
        raise ConfigError(f"folds must be >= 2, got {folds}")
    if n < folds * 2:
        raise ConfigError(f"tuning needs at least {2 * folds} training rows, got {n}")
    if not grid:
        raise ConfigError("tuning needs at least one setting in its grid, got none")
    keys = list(grid[0])
    order = ctx.shared_rng(purpose).permutation(n)
    parts = np.array_split(order, folds)
    label = ctx.info.label_party
    table: list[dict[str, Any]] = []
    with ctx.rt.meter.in_phase("tuning"):
        for setting in grid:
            scores = []
            for f in range(folds):
                tr = np.concatenate([parts[j] for j in range(folds) if j != f])
                sub = fold_context(ctx, tr, parts[f])
                pred = run(sub, setting, f)
                if ctx.rt.here(label):
                    scores.append(cv_score(ctx.info.task, sub.views[label].y_test, pred))
            if ctx.rt.here(label):
                table.append({**setting, "cv_score": float(np.mean(scores))})
        best = None
        if ctx.rt.here(label):
            top = max(table, key=lambda row: row["cv_score"])  # the first best on ties
            best = np.array([top[key] for key in keys], dtype=float)
        others = [p for p in ctx.data_parties if p != label]
        rule = Expect("tuned setting", shape=(len(keys),))
        best = ctx.rt.broadcast(best, src=label, dsts=others, expect=rule)
    chosen = {key: type(grid[0][key])(value) for key, value in zip(keys, best, strict=True)}
    if chosen not in grid:  # a setting of the grid, or the label holder lied
        raise ProtocolError(
            f"party {label}'s tuned setting {chosen} at step 'tuned setting' is not in the grid"
        )
    return chosen, table
