"""VFL-AFE's options (``securevfl run afe-vfl --help``) and their validation."""

from __future__ import annotations

from typing import Any

from securevfl.context import Option, RunSpec, parse_bool
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.methods.dp_bottom_options import BOTTOM_OPTIONS
from securevfl.methods.release_options import RELEASE_OPTIONS, release_once

EXACT_ONLY = ("bottom", ("exact",))

VARIANTS = ("auto", "vanilla", "r", "d", "full")
SPLIT_VARIANTS = ("r", "d", "full")  # R and D act on split learning's steps

OPTIONS = {
    "variant": Option(
        str,
        "auto",
        "vanilla (clip + noise), r (+ rescaling), d (+ distribution adjusting), full (R + D); "
        "r, d and full run the split schedule; auto: vanilla under release-once, full under split",
        choices=VARIANTS,
    ),
    "clip": Option(float, 1.0, "clipping bound C of each embedding row (Eq. 2)", gt=0, le=1e6),
    "clip_mode": Option(
        str,
        "hard",
        "hard: Eq. 2's clip to the C-ball; soft: C·tanh(||h||/C) along h (also inside the ball, "
        "but rows outside C keep a gradient along themselves)",
        choices=("hard", "soft"),
    ),
    "lam_kl": Option(
        float,
        0.1,
        "weight of the KL term (Eq. 6; variants r, full; --bottom exact only: its gradient for "
        "one row depends on every row of the batch)",
        ge=0,
        le=1e6,
        when=EXACT_ONLY,
    ),
    "kl_every": Option(
        int,
        4,
        "add the KL term every this many steps (1: every step, the paper's schedule; "
        "4 keeps the rescaling under 15% of a step at b = 256)",
        ge=1,
        le=1_000_000,
        when=EXACT_ONLY,
    ),
    "lam_cl": Option(
        float, 0.1, "weight of the contrastive loss (Eq. 8; variants d, full)", ge=0, le=1e6
    ),
    "fcm_threshold": Option(
        float,
        0.7,
        "FCM membership confidence a row needs to enter the contrastive loss",
        gt=0,
        lt=1,
    ),
    "confidence": Option(
        float, 0.999, "confidence p of the distance quantile mu + z_p sigma (Eq. 5)", gt=0.5, lt=1
    ),
    "stats_share": Option(
        float,
        0.05,
        "share of the Gaussian-DP budget mu^2 spent on the DP distance statistics that set the "
        "rescaling (variants r, full)",
        gt=0,
        lt=1,
    ),
    "head_epochs": Option(
        int,
        0,
        "after training, the label holder trains its head for this many more epochs on the "
        "noisy embeddings it received in the last epoch (post-processing: no new release)",
        ge=0,
        le=1000,
    ),
    "rescale_gradient": Option(
        str,
        "identity",
        "gradient of the rescaling (R) in the bottom's update: identity (the released value is "
        "rescaled, the bottom is updated as if it were not: straight-through) or chain (through "
        "the factor; at small spread the factor is large and the bottom collapses to a constant "
        "row, measured on adult)",
        choices=("identity", "chain"),
    ),
    "input_scaling": Option(
        parse_bool,
        True,
        "the label holder divides each received block by its public spread bound "
        "sqrt(sigma^2 + C^2/P) before its head (post-processing; false: raw blocks)",
    ),
    "active_features": Option(
        parse_bool,
        False,
        "the label holder is also a data party (party 0, its own bottom, no noise: its own "
        "columns); parties 1..K-1 are the passive parties (K >= 2 under release-once, >= 3 for the "
        "split variants) and only their releases are accounted; none of the label holder's "
        "budget is spent on its own columns",
    ),
    **BOTTOM_OPTIONS,
    **RELEASE_OPTIONS,
}


def check_options(spec: RunSpec, method: Method) -> dict[str, Any]:
    """The run's AFE options, parsed and checked by their declarations (``variant`` auto
    resolved by the schedule)."""
    out = {
        name: opt.check(name, spec.option(name, method), owner=method.name)
        for name, opt in OPTIONS.items()
    }
    if out["variant"] == "auto":
        out["variant"] = "vanilla" if afe_release_once(spec, method) else "full"
    return out


def afe_release_once(spec: RunSpec, method: Method, task: str | None = None) -> bool:
    """Whether an afe-vfl run uses release-once: as ``release_once`` says, except that an
    explicit r, d or full variant under ``--release-schedule auto`` runs the split schedule."""
    variant = spec.option("variant", method)
    if variant in SPLIT_VARIANTS:
        if spec.option("release_schedule", method) == "release-once":
            raise ConfigError(
                f"variant {variant!r} of afe-vfl acts on split learning's steps: it needs "
                "--release-schedule split (or auto), got --release-schedule release-once"
            )
        return False
    return release_once(spec, method, task)
