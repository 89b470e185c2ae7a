"""Adapters of a GLM run's context: a loss with bounded constants, and the active party's
intercept as a constant column (so it is clipped with its weight block)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from securevfl.context import RunContext, parse_bool
from securevfl.errors import ConfigError

# losses whose derivative is not bounded for every θ: their constants fail under θ-noise
UNBOUNDED_LOSSES = {"least-squares": "least-squares-bounded"}


def with_bounded_loss(ctx: RunContext) -> RunContext:
    """Use a loss whose constants hold for any θ (regression default: least-squares-bounded)."""
    name = ctx.spec.loss
    if name in UNBOUNDED_LOSSES:
        raise ConfigError(
            f"loss for hdp-vfl must have a bounded derivative (use "
            f"{UNBOUNDED_LOSSES[name]!r}), got {name!r}"
        )
    if name is None and ctx.info.task == "regression":
        return dataclasses.replace(
            ctx, spec=dataclasses.replace(ctx.spec, loss="least-squares-bounded")
        )
    return ctx


def with_constant_feature(ctx: RunContext) -> RunContext:
    """The active party's columns plus a constant 1: its weight is the intercept.

    The bias then lives in w_A and is clipped with it (||(w_A, b)|| <= k), which the proofs allow
    (the constant never differs between neighbouring rows). An unclipped bias, as the shared
    trainer's would be, grows without bound under θ-noise (the noise flattens the sigmoid, the
    bias compensates) while w stays clipped, and the model then predicts the majority class.
    """
    views = dict(ctx.views)
    active = 0
    if active in views:
        v = views[active]
        views[active] = dataclasses.replace(
            v, X_train=_with_ones(v.X_train), X_test=_with_ones(v.X_test)
        )
    fpp = list(ctx.info.features_per_party)
    fpp[active] += 1
    info = dataclasses.replace(ctx.info, features_per_party=tuple(fpp))
    return dataclasses.replace(ctx, views=views, info=info)


def _with_ones(X: Any) -> Any:
    """X with a constant column 1 (a table on the party's engine appends it blockwise)."""
    if hasattr(X, "with_constant"):
        return X.with_constant()
    return np.hstack([X, np.ones((len(X), 1))])


INTERCEPTS = ("clipped", "free", "none")


def parse_intercept(value: Any) -> str:
    """'clipped' (true), 'free' or 'none' (false): how the active party's bias is treated."""
    if isinstance(value, str) and value.strip().lower() in INTERCEPTS:
        return value.strip().lower()
    try:
        return "clipped" if parse_bool(value) else "none"
    except ConfigError:
        raise ConfigError(
            f"intercept must be one of {list(INTERCEPTS)} (or true/false), got {value!r}"
        ) from None


parse_intercept.kind = "one of clipped, free, none (or true/false)"  # type: ignore[attr-defined]


def check_deconvolvable(loss_name: str, intercept: str) -> None:
    """A deconvolved threshold needs the logistic loss and a bias that is not clipped."""
    if loss_name != "logistic":
        raise ConfigError(f"threshold 'deconvolved' needs the logistic loss, got {loss_name!r}")
    if intercept == "clipped":
        raise ConfigError("threshold 'deconvolved' needs intercept 'free' or 'none', got 'clipped'")
