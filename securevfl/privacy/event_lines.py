"""A record's ``releases`` line read back as the event it describes (checkpoints, the DP
ranges' composition). Kept apart from :mod:`securevfl.privacy.events`, whose source keys the
shipped PBM calibrations (``calibration_cache.code_version``)."""

from __future__ import annotations

import math
from typing import Any

from dp_accounting import dp_event

from securevfl.errors import ConfigError
from securevfl.privacy.events import PMFPairDpEvent, PureDpEvent


def event_from_line(line: dict[str, Any]) -> tuple[dp_event.DpEvent, int]:
    """A ``releases`` line (:func:`describe_release`) back as its leaf event and count
    (plain data, checked: ConfigError naming the line)."""
    try:
        mech, n = line["mechanism"], int(line["count"])
        if mech == "gaussian":
            ev: dp_event.DpEvent = dp_event.GaussianDpEvent(float(line["noise_multiplier"]))
        elif mech == "laplace":
            ev = dp_event.LaplaceDpEvent(float(line["noise_multiplier"]))
        elif mech == "pure":
            ev = PureDpEvent(float(line["epsilon"]))
        elif mech == "pmf-pair":
            lo, up = (
                tuple(-math.inf if v is None else float(v) for v in line[key])
                for key in ("log_lower", "log_upper")
            )
            ev = PMFPairDpEvent(lo, up, bool(line["symmetric"]))
        elif mech == "poisson-sampled gaussian":
            g = dp_event.GaussianDpEvent(float(line["noise_multiplier"]))
            ev = dp_event.PoissonSampledDpEvent(float(line["sampling"]), g)
        else:
            raise ValueError(f"unknown mechanism {mech!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"a release line must be a known event, got {line!r}: {exc}") from None
    return ev, n
