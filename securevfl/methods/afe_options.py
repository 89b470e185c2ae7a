"""VFL-AFE's options (``securevfl run afe-vfl --help``) and their validation."""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.context import Option, RunSpec
from securevfl.errors import ConfigError
from securevfl.methods.base import Method

VARIANTS = ("vanilla", "r", "d", "full")

OPTIONS = {
    "variant": Option(
        str,
        "full",
        "vanilla (clip + noise), r (+ rescaling), d (+ distribution adjusting), full (R + D)",
        VARIANTS,
    ),
    "clip": Option(float, 1.0, "clipping bound C > 0 of each embedding row (Eq. 2)"),
    "lam_kl": Option(float, 0.1, "weight >= 0 of the KL term (Eq. 6; variants r, full)"),
    "kl_every": Option(
        int,
        4,
        "add the KL term every this many steps (>= 1; 1: every step, the paper's schedule; "
        "4 keeps the rescaling under 15% of a step at b = 256)",
    ),
    "lam_cl": Option(float, 0.1, "weight >= 0 of the contrastive loss (Eq. 8; variants d, full)"),
    "fcm_threshold": Option(
        float, 0.7, "FCM membership confidence in (0, 1) a row needs to enter the contrastive loss"
    ),
    "confidence": Option(
        float, 0.999, "confidence p in (0.5, 1) of the distance quantile mu + z_p sigma (Eq. 5)"
    ),
    "stats_share": Option(
        float,
        0.05,
        "share in (0, 1) of the Gaussian-DP budget mu^2 spent on the DP distance "
        "statistics that set the rescaling (variants r, full)",
    ),
}


def check_options(spec: RunSpec, method: Method) -> dict[str, Any]:
    opt = {name: spec.option(name, method) for name in OPTIONS}
    if opt["variant"] not in VARIANTS:
        raise ConfigError(f"variant must be one of {list(VARIANTS)}, got {opt['variant']!r}")
    cfg: dict[str, Any] = {"variant": opt["variant"]}
    every = opt["kl_every"]
    if isinstance(every, bool) or not isinstance(every, (int, str)) or not str(every).isdigit():
        raise ConfigError(f"kl_every must be an integer >= 1, got {every!r}")
    if int(every) < 1:
        raise ConfigError(f"kl_every must be an integer >= 1, got {every!r}")
    cfg["kl_every"] = int(every)
    for name, lo, hi, open_lo in (
        ("clip", 0.0, np.inf, True),
        ("lam_kl", 0.0, np.inf, False),
        ("lam_cl", 0.0, np.inf, False),
        ("fcm_threshold", 0.0, 1.0, True),
        ("confidence", 0.5, 1.0, True),
        ("stats_share", 0.0, 1.0, True),
    ):
        try:
            x = float(opt[name])
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a number, got {opt[name]!r}") from None
        ok = (x > lo if open_lo else x >= lo) and (x < hi or (hi == np.inf and np.isfinite(x)))
        if not ok:
            side = "(" if open_lo else "["
            raise ConfigError(f"{name} must lie in {side}{lo:g}, {hi:g}), got {opt[name]!r}")
        cfg[name] = x
    return cfg
