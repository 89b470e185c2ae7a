"""The active party alone, on its own columns: what VFL must beat to be worth it."""

from __future__ import annotations

from dataclasses import replace

from baselines.vfl import fit_plain
from securevfl.context import RunContext, RunSpec
from securevfl.methods.base import Method, register_method
from securevfl.results import FitResult
from securevfl.runtime import InProcessRuntime


@register_method
class LocalOnly(Method):
    name = "local"
    summary = "active party only: trains on party 0's columns, no communication"
    family = "plain"
    models = ("glm", "mlp", "cnn")
    label_party_only = True

    def fit(self, ctx: RunContext) -> FitResult:
        if not ctx.rt.here(0):
            return FitResult(None, 0.0)
        info = replace(
            ctx.info,
            data_parties=1,
            n_parties=1,
            features_per_party=ctx.info.features_per_party[:1],
        )
        solo = RunContext(
            rt=InProcessRuntime(1),
            spec=ctx.spec,
            info=info,
            views={0: ctx.views[0]},
            shared_seed=ctx.shared_seed,
        )
        return fit_plain(solo)


__all__ = ["LocalOnly", "RunSpec"]
