"""The one accountant interface: ``supports``, ``compose(event, count)``, ``get_epsilon(delta)``,
``get_delta(epsilon)``, over dp_accounting's PLD and RDP accountants.

Every DP method emits events (``securevfl.privacy.events``) as its releases happen and reads its
ε from an :class:`Accountant` (one per protected party, gathered in a :class:`PrivacyLedger`).

How events are composed (``kind="pld"``, the default):

* Gaussian releases (any number, adaptively chosen) compose exactly into one Gaussian mechanism
  with μ² = Σ count·(Δ/σ)² (Gaussian DP, Dong, Roth & Su 2019, Cor. 3.3). When a ledger holds only
  Gaussian releases, ε(δ) is the exact ε of that mechanism (Balle & Wang 2018, Thm 8), no
  discretisation.
* Otherwise every event becomes a dp_accounting privacy-loss distribution (pessimistic rounding,
  discretisation 1e-4) — Laplace, our PMF pairs (``from_two_probability_mass_functions``), pure ε
  (``from_privacy_parameters``), the Gaussian part as one Gaussian PLD — and the PLDs compose.

* A Poisson-subsampled Gaussian (``PoissonSampledDpEvent`` of a ``GaussianDpEvent``, built by
  ``events.sampled_gaussian_event``) is read in the replace-one relation, with the inner
  noise multiplier meaning what it means alone (noise / the distance between two records'
  contributions): each record's contribution lies in a ball of radius 1/2 (noise units
  scaled by the multiplier), it enters the sum with probability q, secretly. Its PLD is
  dp_accounting's for the pair q·N(−1/2, z²) + (1−q)·N(0, z²) vs q·N(1/2, z²) + (1−q)·N(0, z²)
  (``from_gaussian_mechanism``, ``REPLACE_ONE``; the dominating pair of Zhu, Dong & Wang
  2022 for this relation); at q = 1 it is the plain Gaussian of multiplier z.

``kind="rdp"`` gives dp_accounting's RDP accountant for the standard events, plus the exact Rényi
divergences of PMF pairs and ε²α/2 (zCDP, Bun & Steinke 2016) for pure events: a looser,
independent figure used as a cross-check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy.special import logsumexp

from securevfl.errors import ConfigError, check_open_unit
from securevfl.privacy.analytic_gaussian import analytic_gaussian_delta, analytic_gaussian_epsilon
from securevfl.privacy.events import PMFPairDpEvent, PrivacyReport, PureDpEvent, release_list

KINDS = ("pld", "rdp")
DISCRETIZATION = 1e-4
RDP_ORDERS = tuple(
    [1.05, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0]
    + [16.0, 20.0, 32.0, 48.0, 64.0, 128.0, 256.0, 512.0, 1024.0]
)


def _flatten(event: dp_event.DpEvent, count: int) -> Iterable[tuple[dp_event.DpEvent, int]]:
    """Leaf events with their multiplicities (Composed and SelfComposed unrolled)."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        yield from _flatten(event.event, event.count * count)
    elif isinstance(event, dp_event.ComposedDpEvent):
        for e in event.events:
            yield from _flatten(e, count)
    else:
        yield event, count


def _is_sampled_gaussian(event: dp_event.DpEvent) -> bool:
    return isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(
        event.event, dp_event.GaussianDpEvent
    )


LEAVES = (
    dp_event.NoOpDpEvent,
    dp_event.GaussianDpEvent,
    dp_event.LaplaceDpEvent,
    PMFPairDpEvent,
    PureDpEvent,
)


def _pmf_dict(log_pmf: tuple[float, ...]) -> dict[int, float]:
    return {i: float(v) for i, v in enumerate(log_pmf) if v > -math.inf}


def _renyi(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_α(P || Q) of two pmfs on one support (inf where P has mass Q lacks)."""
    live = log_p > -np.inf
    if np.any(log_q[live] == -np.inf):
        return math.inf
    lp, lq = log_p[live], log_q[live]
    return float(logsumexp(alpha * lp - (alpha - 1.0) * lq)) / (alpha - 1.0)


class Accountant:
    """Composes the events of one protected party's releases; ε(δ) and δ(ε) on demand."""

    def __init__(self, kind: str = "pld") -> None:
        if kind not in KINDS:
            raise ConfigError(f"accountant kind must be one of {list(KINDS)}, got {kind!r}")
        self.kind = kind
        self.mu_sq = 0.0  # Σ count·(Δ/σ)² of the Gaussian releases
        self.others: list[tuple[dp_event.DpEvent, int]] = []
        self.log: list[tuple[dp_event.DpEvent, int]] = []  # every leaf, Gaussians not merged
        self.releases = 0
        # answers by (query, argument, state): a record asks ε(δ) of the same releases several
        # times (headline, by unit, per party) and each answer builds a PLD anew (0.1-40 s);
        # the state is all a query reads, and compose only ever changes it
        self._answers: dict[tuple[str, float, float, int], float] = {}

    def _answer(self, query: str, arg: float, compute: Callable[[], float]) -> float:
        key = (query, arg, self.mu_sq, len(self.others))
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]

    @property
    def name(self) -> str:
        if self.kind == "rdp":
            return "rdp (dp_accounting)"
        if not self.others:
            return "pld (dp_accounting; Gaussian releases composed exactly, Balle-Wang epsilon)"
        if self.pure_epsilon() is not None:
            return "pld (dp_accounting; pure-DP releases composed exactly at delta = 0)"
        return "pld (dp_accounting)"

    def supports(self, event: dp_event.DpEvent) -> bool:
        leaves = [e for e, _ in _flatten(event, 1)]
        if self.kind == "rdp" and any(_is_sampled_gaussian(e) for e in leaves):
            return False  # dp_accounting's RDP analyses add/remove sampling only
        return all(isinstance(e, LEAVES) or _is_sampled_gaussian(e) for e in leaves)

    def compose(self, event: dp_event.DpEvent, count: int = 1) -> Accountant:
        """Add ``count`` adaptive releases of ``event``."""
        if not self.supports(event):
            raise ConfigError(f"event must be one the accountant supports, got {event!r}")
        if int(count) != count or count < 0:
            raise ConfigError(f"count must be an integer >= 0, got {count}")
        for leaf, n in _flatten(event, int(count)):
            if n == 0 or isinstance(leaf, dp_event.NoOpDpEvent):
                continue
            self.releases += n
            self.log.append((leaf, n))
            if isinstance(leaf, dp_event.GaussianDpEvent):
                self.mu_sq += n / leaf.noise_multiplier**2
            else:
                self.others.append((leaf, n))
        return self

    @property
    def gaussian_mu(self) -> float:
        """μ of the composed Gaussian releases (their Gaussian-DP parameter)."""
        return math.sqrt(self.mu_sq)

    # --- PLD ---------------------------------------------------------------------------------
    def _pld(self) -> pld_lib.PrivacyLossDistribution | None:
        out = None
        if self.mu_sq > 0:
            out = pld_lib.from_gaussian_mechanism(
                1.0 / self.gaussian_mu, value_discretization_interval=DISCRETIZATION
            )
        for leaf, n in self.others:
            if _is_sampled_gaussian(leaf):
                one = pld_lib.from_gaussian_mechanism(
                    leaf.event.noise_multiplier,
                    sensitivity=0.5,
                    sampling_prob=leaf.sampling_probability,
                    neighboring_relation=NeighboringRelation.REPLACE_ONE,
                    value_discretization_interval=DISCRETIZATION,
                )
            elif isinstance(leaf, dp_event.LaplaceDpEvent):
                one = pld_lib.from_laplace_mechanism(
                    leaf.noise_multiplier, value_discretization_interval=DISCRETIZATION
                )
            elif isinstance(leaf, PMFPairDpEvent):
                one = pld_lib.from_two_probability_mass_functions(
                    _pmf_dict(leaf.log_lower),
                    _pmf_dict(leaf.log_upper),
                    value_discretization_interval=DISCRETIZATION,
                    symmetric=leaf.symmetric,
                )
                if not leaf.symmetric:
                    back = pld_lib.from_two_probability_mass_functions(
                        _pmf_dict(leaf.log_upper),
                        _pmf_dict(leaf.log_lower),
                        value_discretization_interval=DISCRETIZATION,
                    )
                    one = _both_directions(one, back)
            else:  # PureDpEvent
                one = pld_lib.from_privacy_parameters(
                    pld_lib.common.DifferentialPrivacyParameters(leaf.epsilon, 0.0),
                    value_discretization_interval=DISCRETIZATION,
                )
            one = one.self_compose(n) if n > 1 else one
            out = one if out is None else out.compose(one)
        return out

    # --- RDP ---------------------------------------------------------------------------------
    def rdp_curve(self) -> np.ndarray:
        """Composed Rényi divergence at each of ``RDP_ORDERS``."""
        acc = rdp_lib.RdpAccountant(list(RDP_ORDERS))
        if self.mu_sq > 0:
            acc.compose(dp_event.GaussianDpEvent(1.0 / self.gaussian_mu))
        extra = np.zeros(len(RDP_ORDERS))
        for leaf, n in self.others:
            if isinstance(leaf, dp_event.LaplaceDpEvent):
                acc.compose(leaf, n)
            elif isinstance(leaf, PMFPairDpEvent):
                lo, up = np.asarray(leaf.log_lower), np.asarray(leaf.log_upper)
                for i, a in enumerate(RDP_ORDERS):
                    extra[i] += n * max(_renyi(lo, up, a), _renyi(up, lo, a))
            else:
                extra += n * np.minimum(leaf.epsilon, np.asarray(RDP_ORDERS) * leaf.epsilon**2 / 2)
        return np.asarray(acc._rdp, dtype=float) + extra  # the accountant's composed curve

    def pure_epsilon(self) -> float | None:
        """Σ of the pure ε of Laplace and pure releases (basic composition is exact at δ = 0);
        None when a release is not pure-DP."""
        total = 0.0
        for leaf, n in self.others:
            if isinstance(leaf, dp_event.LaplaceDpEvent):
                total += n / leaf.noise_multiplier
            elif isinstance(leaf, PureDpEvent):
                total += n * leaf.epsilon
            else:
                return None
        return None if self.mu_sq > 0 else total

    # --- queries -----------------------------------------------------------------------------
    def get_epsilon(self, delta: float) -> float:
        """Smallest ε such that the composed releases are (ε, δ)-DP (0 when nothing released)."""
        if delta != 0:
            check_open_unit("delta", delta)
        return self._answer("epsilon", delta, lambda: self._epsilon(delta))

    def _epsilon(self, delta: float) -> float:
        if self.mu_sq == 0 and not self.others:
            return 0.0
        if self.kind == "rdp":
            eps, _ = rdp_lib.compute_epsilon(RDP_ORDERS, self.rdp_curve(), delta)
            return float(eps)
        pure = self.pure_epsilon()
        if delta == 0 and pure is not None:
            return pure
        if not self.others:
            if delta == 0:
                return math.inf
            return analytic_gaussian_epsilon(sigma=1.0, delta=delta, sensitivity=self.gaussian_mu)
        eps = float(self._pld().get_epsilon_for_delta(delta))
        return eps if pure is None else min(eps, pure)  # both bound ε; the PLD rounds up

    def get_delta(self, epsilon: float) -> float:
        """Smallest δ such that the composed releases are (ε, δ)-DP."""
        if not (epsilon >= 0 and math.isfinite(epsilon)):
            raise ConfigError(f"epsilon must be a finite number >= 0, got {epsilon}")
        return self._answer("delta", epsilon, lambda: self._delta(epsilon))

    def _delta(self, epsilon: float) -> float:
        if self.mu_sq == 0 and not self.others:
            return 0.0
        if self.kind == "rdp":
            return float(rdp_lib.compute_delta(RDP_ORDERS, self.rdp_curve(), epsilon)[0])
        if not self.others:
            return analytic_gaussian_delta(sigma=1.0, epsilon=epsilon, sensitivity=self.gaussian_mu)
        return float(self._pld().get_delta_for_epsilon(epsilon))


def _both_directions(
    fwd: pld_lib.PrivacyLossDistribution, back: pld_lib.PrivacyLossDistribution
) -> pld_lib.PrivacyLossDistribution:
    """One PLD whose remove direction is ``fwd`` and add direction ``back``'s."""
    return pld_lib.PrivacyLossDistribution(fwd._pmf_remove, back._pmf_remove)


class PrivacyLedger:
    """The accountants of one run, in both privacy units.

    ``parties[k]`` composes the releases that depend on party k's block (unit ``party-row``:
    one row of party k changes); ``sample`` composes every release once (unit ``sample``: one
    row changes in every block, so every release may move). The record's headline is the
    ledger's ``unit``: the largest party ε for ``party-row``, the sample accountant's ε for
    ``sample``; ``by_unit`` gives both.
    """

    def __init__(self, unit: str, kind: str = "pld") -> None:
        PrivacyReport(epsilon=0.0, delta=0.0, accountant="", unit=unit)  # validates the unit
        self.unit, self.kind = unit, kind
        self.notes: dict[str, object] = {}  # facts the record adds (e.g. a checkpoint resume)
        self.parties: dict[int, Accountant] = {}
        self.sample = Accountant(kind)

    def compose(
        self, party: int | None, event: dp_event.DpEvent, count: int = 1, *, sample: bool = True
    ) -> None:
        """Record a release that depends on ``party``'s rows (None: on no single party's) and,
        unless ``sample`` is False, in the sample accountant too."""
        if party is not None:
            self.parties.setdefault(int(party), Accountant(self.kind)).compose(event, count)
        if sample:
            self.sample.compose(event, count)

    def epsilon(self, delta: float, party: int | None = None) -> float:
        """ε in the ledger's unit, or of one party (party-row) when ``party`` is given."""
        if party is not None:
            return self.parties[party].get_epsilon(delta) if party in self.parties else 0.0
        if self.unit == "sample":
            return self.sample.get_epsilon(delta)
        return max((a.get_epsilon(delta) for a in self.parties.values()), default=0.0)

    def by_unit(self, delta: float) -> dict[str, float]:
        out = {}
        if self.parties:
            out["party-row"] = max(a.get_epsilon(delta) for a in self.parties.values())
        if self.sample.releases:
            out["sample"] = self.sample.get_epsilon(delta)
        return out

    def releases(self) -> list[dict[str, object]]:
        """Every accountant's releases (``events.release_list``): party k's lines carry
        ``party`` k, the sample accountant's ``party`` None; composing the headline unit's lines
        (the largest party's for ``party-row``) reproduces the record's ε."""
        out = []
        for p, acct in sorted(self.parties.items()):
            out += release_list(acct.log, p)
        return out + release_list(self.sample.log, None)

    @property
    def name(self) -> str:
        accts = [*self.parties.values(), self.sample]
        names = {a.name for a in accts if a.releases}
        return names.pop() if len(names) == 1 else "pld (dp_accounting)"

    def report(
        self,
        delta: float,
        *,
        outside_guarantee: Iterable[str] = (),
        target_epsilon: float | None = None,
        void: bool = False,
        per_party_extra: Mapping[int, Mapping[str, object]] | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> PrivacyReport:
        """The record's ``privacy`` (ε None when ``void``: ``outside_guarantee`` says why)."""
        per_party: dict[int, dict[str, object]] = {}
        for p, acct in sorted(self.parties.items()):
            per_party[p] = {"epsilon": acct.get_epsilon(delta), "releases": acct.releases}
            per_party[p].update((per_party_extra or {}).get(p, {}))
        eps = None if void else self.epsilon(delta)
        more: dict[str, object] = {"by_unit": self.by_unit(delta), "releases": self.releases()}
        more.update(self.notes)
        more.update(extra or {})
        return PrivacyReport(
            epsilon=eps,
            delta=delta,
            accountant=self.name,
            unit=self.unit,
            per_party=per_party,
            outside_guarantee=tuple(outside_guarantee),
            target_epsilon=target_epsilon,
            extra=more,
        )


def calibrate(
    epsilon_of: Callable[[float], float],
    target: float,
    *,
    lo: float,
    hi: float,
    rel_tol: float = 0.005,
    what: str = "noise",
) -> tuple[float, float]:
    """The noise parameter s in [lo, hi] whose ε is at most ``target`` and within ``rel_tol``.

    ``epsilon_of`` must decrease as s grows (more noise, less ε). Bisection in log s keeps the
    side whose ε is <= target, so the returned (s, ε(s)) always meets the target.
    """
    if not (target > 0 and math.isfinite(target)):
        raise ConfigError(f"epsilon must be a finite number > 0, got {target}")
    e_hi = epsilon_of(hi)
    if e_hi > target:
        raise ConfigError(
            f"epsilon {target:g} cannot be reached: even {what} {hi:.4g} gives {e_hi:.4g}"
        )
    e_lo = epsilon_of(lo)
    if e_lo <= target:
        return lo, e_lo
    for _ in range(200):
        if e_hi >= target * (1.0 - rel_tol):
            break
        mid = math.sqrt(lo * hi)
        e_mid = epsilon_of(mid)
        if e_mid <= target:
            hi, e_hi = mid, e_mid
        else:
            lo = mid
        if hi / lo < 1 + 1e-12:
            break
    return hi, e_hi
