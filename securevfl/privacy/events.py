"""Privacy events: every release of a mechanism emits one; accountants only consume them.

Events are dp_accounting's (``GaussianDpEvent``, ``LaplaceDpEvent``, ``SelfComposedDpEvent``,
``ComposedDpEvent``), normalised by the query's sensitivity (noise multiplier = noise / Δ), plus two
of our own that dp_accounting has no class for:

* :class:`PMFPairDpEvent` — a discrete mechanism given by the exact pmf pair of its worst-case
  neighbouring inputs (PBM's Poisson-binomial sum as the sampler actually draws it);
* :class:`PureDpEvent` — a mechanism proved ε-DP in closed form (DP-SGD-C's ℓ2-Laplace noise).

The helpers :func:`gaussian_event` and :func:`laplace_event` build events from (σ, Δ) and
(b, Δ) so callers never divide by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import attr
from dp_accounting import dp_event

from securevfl.errors import ConfigError

UNITS = ("sample", "party-row")
UNIT_HELP = {
    "sample": "one row changes in every party's block and its label",
    "party-row": "one row of one party's block changes (the active party's: its columns and label)",
}


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PMFPairDpEvent(dp_event.DpEvent):
    """One release of a discrete mechanism whose worst-case neighbours give these two pmfs.

    ``log_lower`` and ``log_upper`` are natural-log masses over the same outcome index (``-inf``
    for an impossible outcome). ``symmetric``: the pair read the other way round is no worse
    (so the add and remove directions share one privacy-loss distribution).
    """

    log_lower: tuple[float, ...]
    log_upper: tuple[float, ...]
    symmetric: bool = False


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PureDpEvent(dp_event.DpEvent):
    """A release proved ``epsilon``-DP (δ = 0) in closed form."""

    epsilon: float


def gaussian_event(*, sigma: float, sensitivity: float, count: int = 1) -> dp_event.DpEvent:
    """``count`` releases of a query with L2 sensitivity Δ plus N(0, σ²) per coordinate."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ConfigError(f"sigma must be a finite number > 0, got {sigma}")
    if not (sensitivity >= 0 and math.isfinite(sensitivity)):
        raise ConfigError(f"sensitivity must be a finite number >= 0, got {sensitivity}")
    if sensitivity == 0:
        return dp_event.NoOpDpEvent()
    ev = dp_event.GaussianDpEvent(sigma / sensitivity)
    return ev if count == 1 else dp_event.SelfComposedDpEvent(ev, count)


def sampled_gaussian_event(
    *, sigma: float, sensitivity: float, sampling: float, count: int = 1
) -> dp_event.DpEvent:
    """``count`` releases of a sum in which each record enters with probability ``sampling``
    (Poisson, secret), two records' contributions at most Δ apart (replace-one), plus
    N(0, σ²) per coordinate. ``sampling`` = 1 is :func:`gaussian_event`."""
    if not 0 < sampling <= 1:
        raise ConfigError(f"sampling must be in (0, 1], got {sampling}")
    if sampling == 1:
        return gaussian_event(sigma=sigma, sensitivity=sensitivity, count=count)
    inner = gaussian_event(sigma=sigma, sensitivity=sensitivity)
    if isinstance(inner, dp_event.NoOpDpEvent):
        return inner
    ev = dp_event.PoissonSampledDpEvent(sampling, inner)
    return ev if count == 1 else dp_event.SelfComposedDpEvent(ev, count)


def laplace_event(*, scale: float, sensitivity: float, count: int = 1) -> dp_event.DpEvent:
    """``count`` releases of a query with L1 sensitivity Δ plus Laplace(b) per coordinate."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ConfigError(f"scale must be a finite number > 0, got {scale}")
    if not (sensitivity >= 0 and math.isfinite(sensitivity)):
        raise ConfigError(f"sensitivity must be a finite number >= 0, got {sensitivity}")
    if sensitivity == 0:
        return dp_event.NoOpDpEvent()
    ev = dp_event.LaplaceDpEvent(scale / sensitivity)
    return ev if count == 1 else dp_event.SelfComposedDpEvent(ev, count)


@dataclass(frozen=True)
class PrivacyReport:
    """What a result record's ``privacy`` field says; built by :func:`report` from accountants.

    ``epsilon`` is None when the run released something outside any DP guarantee that voids it
    (then ``outside_guarantee`` says what).
    """

    epsilon: float | None
    delta: float
    accountant: str
    unit: str
    per_party: dict[int, dict[str, object]] = field(default_factory=dict)
    outside_guarantee: tuple[str, ...] = ()
    target_epsilon: float | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ConfigError(f"privacy unit must be one of {list(UNITS)}, got {self.unit!r}")

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "delta": float(self.delta),
            "unit": self.unit,
            "accountant": self.accountant,
            "per_party": {str(k): v for k, v in self.per_party.items()},
            "outside_guarantee": list(self.outside_guarantee),
        }
        if self.target_epsilon is not None:
            out["target_epsilon"] = float(self.target_epsilon)
        out.update(self.extra)
        return out


def _finite_or_none(v: float) -> float | None:
    """A log mass for JSON: None stands for −inf (an impossible outcome)."""
    return None if v == -math.inf else float(v)


def describe_release(event: dp_event.DpEvent, count: int) -> dict[str, object]:
    """One line of a record's ``releases`` list: ``count`` releases of the leaf ``event``, with
    its mechanism and noise in the units the event carries (noise multiplier = noise / Δ), so a
    reader can compose the list with any accountant and reproduce the record's ε. A pmf pair's
    log masses list None for −inf (JSON has no infinities)."""
    out: dict[str, object] = {"count": int(count)}
    if isinstance(event, dp_event.GaussianDpEvent):
        out.update(mechanism="gaussian", noise_multiplier=float(event.noise_multiplier))
    elif isinstance(event, dp_event.LaplaceDpEvent):
        out.update(mechanism="laplace", noise_multiplier=float(event.noise_multiplier))
    elif isinstance(event, PureDpEvent):
        out.update(mechanism="pure", epsilon=float(event.epsilon))
    elif isinstance(event, PMFPairDpEvent):
        out.update(
            mechanism="pmf-pair",
            log_lower=[_finite_or_none(v) for v in event.log_lower],
            log_upper=[_finite_or_none(v) for v in event.log_upper],
            symmetric=bool(event.symmetric),
        )
    elif isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(
        event.event, dp_event.GaussianDpEvent
    ):
        out.update(
            mechanism="poisson-sampled gaussian",
            relation="replace-one",
            sampling=float(event.sampling_probability),
            noise_multiplier=float(event.event.noise_multiplier),
        )
    else:
        raise ConfigError(f"event must be a leaf event the accountants support, got {event!r}")
    return out


def release_list(
    log: list[tuple[dp_event.DpEvent, int]], party: int | None
) -> list[dict[str, object]]:
    """``log`` (leaf events with their counts, in order) as ``releases`` lines, equal events
    merged; ``party`` names the accountant (None: the sample accountant)."""
    merged: dict[dp_event.DpEvent, int] = {}
    for ev, n in log:
        merged[ev] = merged.get(ev, 0) + int(n)
    return [{"party": party, **describe_release(ev, n)} for ev, n in merged.items() if n]
