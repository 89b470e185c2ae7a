"""DP scaling ranges for a CSV run without ``--bounds``: one noisy histogram per party.

A ``csv:`` column has no catalogue domain. Its exact min/max is one person's value and shapes
everything released after it, so in a run with an ε each data party releases its ranges under
the budget instead (``--bounds-share``), and the record composes the release with the method's.

**What is released.** Party k holds d numeric columns (one-hot and missing-indicator columns
live in the public [0, 1] and release nothing). It counts, per column, its rows in the bins of
one public grid fixed here, never read off the data: log-scale magnitudes of both signs,
edges ±2^e for e = LOW_EXP..HIGH_EXP, and one central bin [-2^LOW_EXP, 2^LOW_EXP]; a value past
the outer edges counts in the outer bin (and is clipped to its edge later). A blank cell counts
nowhere. The d histograms are released together as one vector with noise on every count, to
the party itself (nothing crosses the wire), yet accounted as public: the ranges shape every
later release and go into the party's saved encoder.

**Sensitivity, unit.** Replace-one (n is public): one row of party k's block changes; in each
column that row leaves one bin and enters another (or only enters or leaves, a blank), so the
vector moves by at most sqrt(2d) in L2 and 2d in L1, however many bins the grid has. With
N(0, (z·sqrt(2d))²) per count the release is the Gaussian mechanism of noise multiplier z
(dp_accounting's ``GaussianDpEvent(z)``); in a pure-ε run (a method reporting δ = 0) it is
Laplace(z·2d) per count (``LaplaceDpEvent(z)``, ε = 1/z). Party-row unit: a row of party k
touches its own release only (one event per releasing party); sample unit: a row is in every
block (the K releases compose).

**The share.** ``share`` s is the bounds' part of the budget: with a Gaussian method it is a
share of the Gaussian-DP μ² (zero-concentrated ρ, which composes additively): the run's ε at δ
is the ε of a μ-GDP mechanism, the bounds take μ_b = sqrt(s)·μ (split as μ_b/sqrt(K) per party
for the sample unit) and the method is calibrated to the ε of sqrt(1-s)·μ, so bounds and method
compose to the run's ε when the method is Gaussian. A method whose releases are not all Gaussian
(PBM's pmfs, Laplace centring inside fm-vfl's ledger) composes with the bounds a little past
that (docs/privacy-boundaries.md has the figures), so the method is calibrated to ``MARGIN``
below it; the record prints what the accountant composes, whatever it is. A pure-ε run gives
the bounds s·ε (over K for sample) and the method the rest (basic composition, exact at δ = 0).

**The rule** (post-processing of the release): each column's range is the grid interval [a, b]
maximising the sum over its bins of (noisy count - s_bin), s_bin the noise's standard deviation
per count: a bin joins the range only if it holds more rows than the noise can fake, so a tail
of fewer than about s_bin rows per bin is clipped, and an empty bin far from the bulk, even with
a large noise draw, rarely outweighs the bulk. Its end bins are then trimmed while they hold
under 1 % of the (public) n rows, which only binds when n is large beside the noise. One
widening follows: to the central bin, where it holds significantly many rows (zeros beside
counts). The range is finite and holds the bulk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.errors import ConfigError

BOUNDS_SHARE = 0.1  # of the budget (μ², or ε when pure): the default of --bounds-share
LOW_EXP, HIGH_EXP = -12, 40  # the grid's magnitudes: 2^-12 (2.4e-4) .. 2^40 (1.1e12)
_POS = 2.0 ** np.arange(LOW_EXP, HIGH_EXP + 1)
GRID_EDGES = np.concatenate([-_POS[::-1], _POS])  # bins lie between consecutive edges
CENTRE = len(_POS) - 1  # the index of the central bin [-2^LOW_EXP, 2^LOW_EXP]
TAIL = 0.01  # an end bin with fewer than this share of the rows is clipped off a range
ZERO_Z = 3.0  # the one widening test of the rule: 3 deviations (one-sided p = 0.13 %)
MECHANISMS = ("gaussian", "laplace")
MARGIN = 0.02  # the method's ε below the Gaussian split: room for non-Gaussian methods


@dataclass(frozen=True)
class BoundsPlan:
    """Every party's bounds release, fixed by the run's public settings (no data)."""

    mechanism: str  # gaussian, or laplace in a pure-ε run
    noise_multiplier: float  # noise / sensitivity of each party's one release
    share: float
    unit: str  # the unit the share was sized in (the method's)
    epsilon_method: float  # the ε the method is calibrated to, the bounds set aside
    seed: int | None = None  # the noise seed (None: the CSPRNG)

    def to_dict(self, parties: list[int]) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "share": self.share,
            "share_of": "epsilon (pure)" if self.mechanism == "laplace" else "Gaussian-DP mu^2",
            "parties": list(parties),
            "relation": "replace-one",
            "grid": f"log2 magnitudes 2^{LOW_EXP}..2^{HIGH_EXP}, both signs, and a central bin",
            "epsilon_method": self.epsilon_method,
        }


def _mu_of(epsilon: float, delta: float) -> float:
    """μ of the Gaussian mechanism that is exactly (ε, δ)-DP."""
    from securevfl.privacy.analytic_gaussian import analytic_gaussian_sigma

    return 1.0 / analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=1.0)


def plan_bounds(
    epsilon: float,
    delta: float,
    *,
    unit: str,
    parties: int,
    share: float = BOUNDS_SHARE,
    pure: bool = False,
    seed: int | None = None,
) -> BoundsPlan:
    """The bounds releases of a run at ``epsilon`` (what the method leaves after centring) and
    ``delta`` whose ε is in ``unit`` with K = ``parties``; ``pure``: the method reports δ = 0."""
    if not 0 < share < 1:
        raise ConfigError(f"bounds_share must be in (0, 1), got {share}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"epsilon must be a finite number > 0, got {epsilon}")
    split = parties if unit == "sample" else 1  # a row is in every block: K releases
    if pure:
        eps_b = share * epsilon / split
        return BoundsPlan("laplace", 1.0 / eps_b, share, unit, (1 - share) * epsilon, seed)
    from securevfl.privacy.analytic_gaussian import analytic_gaussian_epsilon

    mu = _mu_of(epsilon, delta)
    mu_party = math.sqrt(share / split) * mu
    rest = analytic_gaussian_epsilon(
        sigma=1.0, delta=delta, sensitivity=math.sqrt(1.0 - share) * mu
    )
    return BoundsPlan("gaussian", 1.0 / mu_party, share, unit, (1 - MARGIN) * rest, seed)


def histograms(X: np.ndarray) -> np.ndarray:
    """Each column's row counts in the grid's bins (d x bins); a blank (NaN) counts nowhere."""
    bins = len(GRID_EDGES) - 1
    out = np.zeros((X.shape[1], bins))
    for j in range(X.shape[1]):
        c = X[:, j]
        c = c[~np.isnan(c)]
        idx = np.clip(np.searchsorted(GRID_EDGES, c, side="right") - 1, 0, bins - 1)
        out[j] = np.bincount(idx, minlength=bins)
    return out


def noise_scale(plan: BoundsPlan, d: int) -> tuple[float, float]:
    """(the mechanism's scale per count, the noise's standard deviation per count)."""
    if plan.mechanism == "gaussian":
        sigma = plan.noise_multiplier * math.sqrt(2 * d)
        return sigma, sigma
    b = plan.noise_multiplier * 2 * d
    return b, b * math.sqrt(2.0)


def bulk_interval(noisy: np.ndarray, sd: float, rows: int) -> tuple[float, float]:
    """The grid interval maximising Σ (noisy count - sd) over its bins (Kadane's scan); its end
    bins trimmed while they hold fewer than ``TAIL`` of the ``rows`` (public n): with many rows
    the noise is small beside the bulk and a run of lucky draws would otherwise stretch a range
    far out; then widened to the central bin where it holds more than ``ZERO_Z`` noise
    deviations of rows: zeros beside positive counts (0..5) sit a dozen empty log bins from the
    bulk, which the scan alone would not cross."""
    best, cur, start, span = -math.inf, 0.0, 0, (0, 0)
    for i, v in enumerate(noisy - sd):
        if cur <= 0:
            cur, start = 0.0, i
        cur += v
        if cur > best:
            best, span = cur, (start, i)
    a, b = span
    while a < b and noisy[a] < TAIL * rows:
        a += 1
    while b > a and noisy[b] < TAIL * rows:
        b -= 1
    c = CENTRE
    if (a > c or b < c) and noisy[c] > ZERO_Z * sd:  # zeros beside a one-signed bulk
        a, b = min(a, c), max(b, c)
    return float(GRID_EDGES[a]), float(GRID_EDGES[b + 1])


def released_ranges(
    X: np.ndarray, plan: BoundsPlan, rng: np.random.Generator
) -> list[tuple[float, float]]:
    """The release of one party's d numeric columns ``X`` (rows x d, NaN blank) and each
    column's range read off it (module docstring)."""
    if X.shape[1] == 0:
        return []
    return ranges_from_counts(histograms(np.asarray(X, dtype=np.float64)), X.shape[0], plan, rng)


def ranges_from_counts(
    counts: np.ndarray, rows: int, plan: BoundsPlan, rng: np.random.Generator
) -> list[tuple[float, float]]:
    """:func:`released_ranges` from the exact :func:`histograms` of ``rows`` rows (a table's
    histograms summed block by block on a party's engine release the same values)."""
    d = counts.shape[0]
    if d == 0:
        return []
    scale, sd = noise_scale(plan, d)
    if plan.mechanism == "gaussian":
        noisy = counts + rng.normal(0.0, scale, size=counts.shape)
    else:
        noisy = counts + rng.laplace(0.0, scale, size=counts.shape)
    return [bulk_interval(noisy[j], sd, rows) for j in range(d)]


def compose_bounds(
    privacy: dict[str, Any], plan: BoundsPlan, parties: list[int], *, runs: int = 1
) -> dict[str, Any]:
    """The record's ``privacy`` with the bounds releases of ``parties`` (``runs`` times: a
    resumed run released them again) added to its ``releases`` and every ε recomputed from the
    lines by the project's accountant (per party, by unit, the headline)."""
    from securevfl.privacy.accountant import Accountant
    from securevfl.privacy.event_lines import event_from_line
    from securevfl.privacy.events import describe_release

    out = dict(privacy)
    kind = "rdp" if "rdp" in str(out.get("accountant", "")).lower() else "pld"
    leaf = _leaf(plan)
    lines = list(out.get("releases") or [])
    for k in parties:
        lines.append({"party": int(k), **describe_release(leaf, runs)})
    units = dict(out.get("by_unit") or {})
    has_sample = out.get("unit") == "sample" or "sample" in units
    if has_sample:
        lines.append({"party": None, **describe_release(leaf, runs * len(parties))})
    out["releases"] = lines
    delta = float(out["delta"])

    def composed(party: int | None) -> float:
        acct = Accountant(kind)
        for line in (x for x in lines if x["party"] == party):
            acct.compose(*event_from_line(line))
        return acct.get_epsilon(delta)

    per_party = {str(k): dict(v) for k, v in (out.get("per_party") or {}).items()}
    for k in parties:
        entry = per_party.setdefault(str(k), {"releases": 0})
        entry["epsilon"] = composed(int(k))
        entry["releases"] = int(entry.get("releases", 0)) + runs
    out["per_party"] = per_party
    row = [v["epsilon"] for v in per_party.values() if isinstance(v.get("epsilon"), float | int)]
    if "party-row" in units or out.get("unit") == "party-row":
        units["party-row"] = max(row)
    if has_sample:
        units["sample"] = composed(None)
    out["by_unit"] = units
    if out.get("epsilon") is not None:
        out["epsilon"] = units[str(out["unit"])]
    out["bounds"] = plan.to_dict(parties)
    return out


def _leaf(plan: BoundsPlan) -> Any:
    from dp_accounting import dp_event

    if plan.mechanism == "gaussian":
        return dp_event.GaussianDpEvent(plan.noise_multiplier)
    return dp_event.LaplaceDpEvent(plan.noise_multiplier)
