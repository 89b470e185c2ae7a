"""Non-private VFL: the shared trainers with their default plug points (GLM and split-NN)."""

from __future__ import annotations

from securevfl.context import RunContext
from securevfl.methods.base import Method, register_method
from securevfl.results import FitResult
from securevfl.training import fit_glm


def fit_plain(ctx: RunContext) -> FitResult:
    """Train without privacy on the model the spec names; score the test split."""
    if ctx.spec.model == "glm":
        return fit_glm(ctx).result()
    from securevfl.training import SplitNNHooks, fit_splitnn  # torch: only a split-NN run's

    hooks = SplitNNHooks()
    hooks.aggregation = ctx.spec.aggregation
    return fit_splitnn(ctx, hooks).result()


@register_method
class NonPrivateVFL(Method):
    name = "vfl"
    summary = "non-private VFL: plain intermediate results / embeddings (the accuracy ceiling)"
    family = "plain"
    models = ("glm", "mlp", "cnn")

    def fit(self, ctx: RunContext) -> FitResult:
        return fit_plain(ctx)
