"""Options shared by VFL-CZOFO and its baselines on the cascade trainer, their validation, and the
run statistics they all record."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from protocols.compress import CompressError, check_bits
from securevfl.context import Option, RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.results import FitResult
from securevfl.training.cascade_trainer import CascadeConfig, CascadeHooks, CascadeTrainer
from securevfl.training.rounds import SCHEDULES
from securevfl.training.splitnn_trainer import splitnn_fingerprints
from securevfl.training.zeroth_order import DIRECTIONS

ZO_OPTIONS = ("q", "mu", "direction", "deltas")
LINKS = ("none", "up", "down", "both")


def cascade_options(*, schedule: str, uplink_bits: int, downlink_bits: int, zo: bool) -> dict:
    """The option table of one method (its defaults; ZO options only where ``zo``)."""
    out = {
        "schedule": Option(
            str,
            schedule,
            "sync (every client each round) or async (one random client per round, the others' "
            "embeddings from the server's table)",
            choices=SCHEDULES,
        ),
        "uplink_bits": Option(
            int,
            uplink_bits,
            "bits per embedding entry sent (1..16 uniform min/max quantiser; 32 = float32)",
        ),
        "uplink_delta_bits": Option(
            int,
            0,
            "bits per entry of a row's difference from the value the server decoded at the row's "
            "previous visit (0: off; error feedback, securevfl/training/row_reference.py)",
            ge=0,
            le=16,
        ),
        "downlink_bits": Option(
            int, downlink_bits, "bits per entry of each reply (1..16 quantised; 32 = float32)"
        ),
        "stochastic_rounding": Option(
            str,
            "none",
            "links whose quantiser rounds stochastically (unbiased) instead of to nearest",
            choices=LINKS,
        ),
        "clip_range": Option(
            str,
            "none",
            "links whose quantiser spans mean ± c_b std (Gaussian-optimal) instead of min/max",
            choices=LINKS,
        ),
        "entropy_coding": Option(
            str,
            "none",
            "links whose quantiser codes are range-coded (lossless; adaptive model, bits <= 8, "
            "not with top-k)",
            choices=LINKS,
        ),
        "topk": Option(
            float, 1.0, "share of entries each message keeps (top-k by magnitude)", gt=0, le=1
        ),
        "max_staleness": Option(
            int,
            0,
            "async: refresh table entries older than this many rounds (0: unbounded)",
            ge=0,
            le=1_000_000,
        ),
        "curve_points": Option(
            int,
            10,
            "test-accuracy measurements during training (unmetered instrument; 0: none)",
            ge=0,
            le=10_000,
        ),
    }
    if zo:
        out.update(
            {
                "q": Option(int, 10, "directions per zeroth-order estimate", ge=1, le=10_000),
                "mu": Option(float, 1e-3, "smoothing radius of the estimate", gt=0, le=1e3),
                "direction": Option(str, "sphere", "random directions", choices=DIRECTIONS),
                "deltas": Option(
                    str,
                    "batch",
                    "batch: q loss differences per batch (the authors' code); sample: q per row "
                    "(the poster's Eq. 2)",
                    choices=("batch", "sample"),
                ),
            }
        )
    return out


def _number(name: str, value: Any, kind: type) -> Any:
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if kind is int and (isinstance(value, bool) or float(value) != x):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    return x


def check_cascade(spec: RunSpec, method: Method, client_grad: str) -> CascadeConfig:
    """Validate the spec's options into a trainer configuration (ConfigError naming the rule)."""
    # ranges and choices are declared on the options and checked by Method.validate
    opt = {name: spec.option(name, method) for name in method.options}
    kw: dict[str, Any] = {"client_grad": client_grad, "schedule": opt["schedule"]}
    for name in ("uplink_bits", "downlink_bits"):
        try:
            kw[name] = check_bits(_number(name, opt[name], int))
        except CompressError:
            raise ConfigError(
                f"{name} must be an integer in 1..16 or 32, got {opt[name]!r}"
            ) from None
    kw["uplink_delta_bits"] = int(opt["uplink_delta_bits"])
    if kw["uplink_delta_bits"] and client_grad == "zo-model":
        raise ConfigError(
            f"uplink_delta_bits must be 0 for zeroth order on the client model, "
            f"got {kw['uplink_delta_bits']}"
        )
    kw["topk"] = float(opt["topk"])
    for name in ("stochastic_rounding", "clip_range", "entropy_coding"):
        kw[name] = opt[name]
    for name in ("max_staleness", "curve_points"):
        kw[name] = int(opt[name])
    if "q" in opt:
        kw["q"], kw["mu"] = int(opt["q"]), float(opt["mu"])
        kw.update(direction=opt["direction"], per_sample=opt["deltas"] == "sample")
        if client_grad == "zo-output" and kw["direction"] == "orthogonal":
            if kw["q"] > spec.embedding_dim:
                raise ConfigError(
                    f"q must be <= embedding_dim ({spec.embedding_dim}) for orthogonal "
                    f"directions, got {kw['q']}"
                )
    if spec.parties < 2:
        raise ConfigError(f"parties (clients) for {method.name!r} must be >= 2, got {spec.parties}")
    return CascadeConfig(**kw)


def run_statistics(trainer: CascadeTrainer, train_s: float) -> dict[str, Any]:
    """The record's ``extra``: rounds, replies per client, staleness, the accuracy curve."""
    st, cfg = trainer.stats, trainer.cfg
    stale = np.asarray(st.staleness or [0])
    out: dict[str, Any] = {
        "schedule": cfg.schedule,
        "client_grad": cfg.client_grad,
        "rounds": st.rounds,
        "replies": {str(k): v for k, v in st.replies.items()},
        "server": trainer.S,
        "uplink_bits": cfg.uplink_bits,
        "downlink_bits": cfg.downlink_bits,
        "topk": cfg.topk,
        "stochastic_rounding": cfg.stochastic_rounding,
        "clip_range": cfg.clip_range,
        "entropy_coding": cfg.entropy_coding,
        "uplink_delta_bits": cfg.uplink_delta_bits,
        "step_ms": 1e3 * train_s / max(1, st.rounds),
        "curve": st.curve,
        "curve_note": "test accuracy measured by the benchmark through an unmetered control "
        "plane (not a protocol message); train_bytes: bytes of phase 'train' so far",
    }
    if cfg.client_grad != "foo":
        out.update(q=cfg.q, mu=cfg.mu, direction=cfg.direction)
        out["deltas"] = "sample" if cfg.per_sample and cfg.client_grad == "zo-output" else "batch"
    if cfg.schedule == "async":
        out["staleness"] = {
            "bound": cfg.max_staleness or None,
            "max": int(stale.max()),
            "mean": float(stale.mean()),
            "refreshes": st.refreshes,
        }
    if st.losses:
        out["final_train_loss"] = float(np.mean(st.losses[-20:]))
    return out


class CascadeMethod(Method):
    """A method on the cascade trainer: clients 0..K-1, the server K with the labels; what the
    server returns is ``client_grad`` (see ``securevfl.training.cascade_trainer``)."""

    client_grad: ClassVar[str] = "foo"
    models = ("mlp", "cnn")
    uses_server = True
    labels_at_server = True
    model_export_refusal = "the cascade trainer has no export hook yet"

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        check_cascade(spec, self, self.client_grad)

    def fit(self, ctx: RunContext) -> FitResult:
        return fit_cascade(self, ctx)[1]


def fit_cascade(
    method: CascadeMethod, ctx: RunContext, hooks: CascadeHooks | None = None
) -> tuple[CascadeTrainer, FitResult]:
    """Train with the cascade trainer and score the test split (no privacy record)."""
    trainer = CascadeTrainer(ctx, check_cascade(ctx.spec, method, method.client_grad), hooks)
    train_s = trainer.train()
    scores = trainer.predict()
    return trainer, FitResult(
        scores,
        train_s,
        fingerprints=splitnn_fingerprints(trainer.state),
        extra=run_statistics(trainer, train_s),
    )
