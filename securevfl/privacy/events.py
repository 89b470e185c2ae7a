"""Privacy event records: every use of a mechanism produces one; accountants only consume them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GaussianEvent:
    """``count`` releases of a query with L2 sensitivity ``sensitivity`` plus N(0, sigma^2)."""

    sigma: float
    sensitivity: float
    count: int = 1
    party: int | None = None
    label: str = ""


@dataclass(frozen=True)
class LaplaceEvent:
    """``count`` releases of a query with L1 sensitivity ``sensitivity`` plus Laplace(scale)."""

    scale: float
    sensitivity: float
    count: int = 1
    party: int | None = None
    label: str = ""


@dataclass(frozen=True)
class PureDPEvent:
    """A release already known to be ``epsilon``-DP (e.g. from a closed form)."""

    epsilon: float
    count: int = 1
    party: int | None = None
    label: str = ""


@dataclass(frozen=True)
class PrivacyReport:
    """What a result record's ``privacy`` field says; built by methods from an accountant."""

    epsilon: float
    delta: float
    accountant: str
    per_party: dict[int, dict[str, float]] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "accountant": self.accountant,
            "per_party": {str(k): v for k, v in self.per_party.items()},
        }
        out.update(self.extra)
        return out
