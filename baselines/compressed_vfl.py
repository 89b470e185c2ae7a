"""Compressed-VFL (Castiglia et al., 2022): first-order split learning with a server, whose clients
upload quantised (or top-k sparsified) embeddings; at 32 bits both ways it is plain split learning
in the server topology (both clients' traffic crosses the wire, unlike ``vfl``, whose label holder
also holds features)."""

from __future__ import annotations

from securevfl.methods import FitResult, Method, RunContext, RunSpec, register_method
from securevfl.methods.cascade_options import cascade_options, check_cascade, run_statistics
from securevfl.training import splitnn_fingerprints
from securevfl.training.cascade_trainer import CascadeHooks, CascadeTrainer


def fit_cascade(
    method: Method, ctx: RunContext, client_grad: str, hooks: CascadeHooks | None = None
) -> tuple[CascadeTrainer, FitResult]:
    """Train with the cascade trainer, score the test split; no privacy record."""
    trainer = CascadeTrainer(ctx, check_cascade(ctx.spec, method, client_grad), hooks)
    train_s = trainer.train()
    scores = trainer.predict()
    return trainer, FitResult(
        scores,
        train_s,
        fingerprints=splitnn_fingerprints(trainer.state),
        extra=run_statistics(trainer, train_s),
    )


@register_method
class CompressedVFL(Method):
    name = "compressed-vfl"
    summary = "Compressed-VFL: FO split learning with a server, quantised embeddings"
    family = "plain"
    models = ("mlp",)
    uses_server = True
    labels_at_server = True
    options = cascade_options(schedule="sync", uplink_bits=8, downlink_bits=32, zo=False)

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        check_cascade(spec, self, "foo")

    def fit(self, ctx: RunContext) -> FitResult:
        return fit_cascade(self, ctx, "foo")[1]
