"""Accountants for Gaussian releases, used by HDP-VFL records.

HDP-VFL releases, per party, one stream: a passive party's noisy IR_B sequence (it protects that
party's columns) or the active party's noisy derivative sequence (it protects the active party's
columns and labels). Lemmas 3/4 bound the L2 sensitivity of the WHOLE stream, so each stream is a
single Gaussian mechanism (one event, count 1) and Theorem 1 is one application of the calibration:

* ``classic``: ε = sqrt(2 ln(1.25/δ))·Δ/σ (Dwork & Roth Thm A.1; a valid DP bound only for ε < 1);
* ``analytic``: the exact ε of the Gaussian mechanism (Balle & Wang 2018), any ε.

Several events of one party (e.g. the runs of a cross-validation on the same rows) compose
exactly for Gaussian mechanisms: the combined release is one Gaussian mechanism with
(Δ/σ)² = Σ count_i·(Δ_i/σ_i)² (Gaussian-DP composition, Dong, Roth & Su 2019, Cor. 3.3), and the
calibration is applied to that ratio.

Theorem 2 (JDP on the weights): every weight vector a party j != i ends up with is computed from
party i's data only through party i's noisy stream (post-processing), so the joint-DP guarantee
on the other parties' weights w.r.t. party i's data is party i's stream guarantee.
"""

from __future__ import annotations

import math
from collections import defaultdict

from securevfl.errors import ConfigError, check_open_unit
from securevfl.privacy.analytic_gaussian import analytic_gaussian_epsilon
from securevfl.privacy.events import GaussianEvent, PrivacyReport

CALIBRATIONS = ("classic", "analytic")


class GaussianStreamAccountant:
    """Per-party accountant of Gaussian events; ``calibration`` is 'classic' or 'analytic'."""

    def __init__(self, calibration: str = "analytic") -> None:
        if calibration not in CALIBRATIONS:
            raise ConfigError(
                f"calibration must be one of {list(CALIBRATIONS)}, got {calibration!r}"
            )
        self.calibration = calibration
        self._ratio_sq: dict[int, float] = defaultdict(float)
        self._events: list[GaussianEvent] = []

    @property
    def name(self) -> str:
        return f"gaussian-stream-{self.calibration}"

    def compose(self, event: GaussianEvent) -> None:
        """Add one event (it must name the party whose data it protects)."""
        if not isinstance(event, GaussianEvent):
            raise ConfigError(f"event must be a GaussianEvent, got {type(event).__name__}")
        if event.party is None:
            raise ConfigError("event.party must name the protected party, got None")
        if event.sigma <= 0:
            raise ConfigError(f"event.sigma must be > 0 for a finite epsilon, got {event.sigma}")
        self._events.append(event)
        self._ratio_sq[event.party] += event.count * (event.sensitivity / event.sigma) ** 2

    @property
    def parties(self) -> list[int]:
        return sorted(self._ratio_sq)

    def ratio(self, party: int) -> float:
        """Composed Δ/σ of a party's releases (its Gaussian-DP μ)."""
        if party not in self._ratio_sq:
            raise ConfigError(f"party must have events in this accountant, got {party}")
        return math.sqrt(self._ratio_sq[party])

    def get_epsilon(self, delta: float, party: int | None = None) -> float:
        """ε at ``delta`` for one party, or the largest over parties when ``party`` is None."""
        check_open_unit("delta", delta)
        if party is None:
            if not self._ratio_sq:
                raise ConfigError("accountant must have at least one event, got none")
            return max(self.get_epsilon(delta, p) for p in self.parties)
        mu = self.ratio(party)
        if mu == 0.0:
            return 0.0
        if self.calibration == "classic":
            return math.sqrt(2.0 * math.log(1.25 / delta)) * mu
        return analytic_gaussian_epsilon(sigma=1.0, delta=delta, sensitivity=mu)

    def report(self, delta: float, *, extra: dict[str, object] | None = None) -> PrivacyReport:
        """A PrivacyReport: ε = max over parties, per-party streams, and the JDP view (Thm 2)."""
        per_party: dict[int, dict[str, float]] = {}
        for p in self.parties:
            evs = [e for e in self._events if e.party == p]
            per_party[p] = {
                "epsilon": self.get_epsilon(delta, p),
                "delta": delta,
                "sigma": evs[-1].sigma,
                "sensitivity": evs[-1].sensitivity,
                "releases": float(sum(e.count for e in evs)),
            }
        eps = max(v["epsilon"] for v in per_party.values())
        out: dict[str, object] = {
            "calibration": self.calibration,
            "jdp_weights": {str(p): v["epsilon"] for p, v in per_party.items()},
        }
        if self.calibration == "classic" and eps >= 1.0:
            out["warning"] = (
                "classic Gaussian calibration is proven only for epsilon < 1; "
                f"reported epsilon {eps:.4g} is not a valid DP bound"
            )
        out.update(extra or {})
        return PrivacyReport(
            epsilon=eps, delta=delta, accountant=self.name, per_party=per_party, extra=out
        )
