"""Non-private VFL: the shared trainers with their default plug points (GLM and split-NN)."""

from __future__ import annotations

from securevfl.context import RunContext
from securevfl.methods.base import Method, register_method
from securevfl.results import FitResult
from securevfl.training import (
    SplitNNHooks,
    glm_fingerprints,
    predict_glm,
    predict_splitnn,
    splitnn_fingerprints,
    train_glm,
    train_splitnn,
)


def fit_plain(ctx: RunContext) -> FitResult:
    """Train without privacy on the model the spec names; score the test split."""
    if ctx.spec.model == "glm":
        state, train_s = train_glm(ctx)
        return FitResult(predict_glm(ctx, state), train_s, fingerprints=glm_fingerprints(state))
    hooks = SplitNNHooks()
    hooks.aggregation = ctx.spec.aggregation
    state, train_s = train_splitnn(ctx, hooks)
    return FitResult(
        predict_splitnn(ctx, state, hooks), train_s, fingerprints=splitnn_fingerprints(state)
    )


@register_method
class NonPrivateVFL(Method):
    name = "vfl"
    summary = "non-private VFL: plain intermediate results / embeddings (the accuracy ceiling)"
    family = "plain"
    models = ("glm", "mlp")

    def fit(self, ctx: RunContext) -> FitResult:
        return fit_plain(ctx)
