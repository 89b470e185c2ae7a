"""Every DP method's record lists its releases (count, mechanism, noise), and composing that list
independently of securevfl's accountant reproduces the record's ε (issue 25, item 8).

The composition here is our own: the exact ε of composed Gaussian releases from the Gaussian-DP
closed form (Dong, Roth & Su; δ(ε) solved by bisection), sums for pure releases, Rényi
divergences computed here from the listed pmfs, and dp_accounting's RDP accountant only for the
events it analyses itself (Gaussian, Laplace, add/remove Poisson-sampled Gaussian).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy.optimize import brentq
from scipy.special import logsumexp
from scipy.stats import norm

from securevfl.experiment import run_experiment
from securevfl.registry import lookup, names
from securevfl.run_options import build_spec

ORDERS = [1 + x / 10 for x in range(1, 10)] + list(range(2, 64)) + [96, 128, 256, 512, 1024]
# methods whose defaults cost minutes (2048-bit Paillier, 20 trees): small settings
# pbm-vfl: b = 8 trials, the same releases and level search as b = 64 in a fraction of the time
FAST_OPTIONS = {
    "secureboost-dp": {"trees": 2, "depth": 2, "paillier_bits": 256},
    "pbm-vfl": {"b": 8},
}
DP_METHODS = [n for n in names("method") if "dp" in lookup("method", n).family.split("+")]
# method -> why its per_party (sigma, sensitivity, releases) summary does not compose to its ε
PER_PARTY_SUMMARY_WRONG = {
    "afe-vfl": "per_party pairs the embedding's sigma with the count of all the party's releases "
    "(statistics, test and bottom releases have other noise): the lead's afe-vfl rework",
    "hdp-vfl": "per_party pairs the score stream's sigma with the count of all the party's "
    "releases (the DP weights release has its own sigma_w): hdp_plan.hdp_report",
}


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP mechanism at δ: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""

    def gap(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    if gap(0.0) <= 0:
        return 0.0
    hi = 1.0
    while gap(hi) > 0:
        hi *= 2
    return brentq(gap, 0.0, hi, xtol=1e-10)


def _log_pmf(masses: list) -> np.ndarray:
    return np.array([-np.inf if v is None else v for v in masses], dtype=float)


def renyi(lp: np.ndarray, lq: np.ndarray, a: float) -> float:
    live = lp > -np.inf
    if np.any(lq[live] == -np.inf):
        return math.inf
    return float(logsumexp(a * lp[live] - (a - 1) * lq[live])) / (a - 1)


def compose(lines: list[dict], delta: float, *, rdp: bool) -> float:
    """ε at δ of the listed releases, computed without securevfl's accountant."""
    kinds = {line["mechanism"] for line in lines}
    if not lines:
        return 0.0
    if kinds <= {"pure", "laplace"} and (delta == 0 or not rdp):
        return sum(
            line["count"] * (line["epsilon"] if "epsilon" in line else 1 / line["noise_multiplier"])
            for line in lines
        )
    if kinds == {"gaussian"} and not rdp:
        mu = math.sqrt(sum(line["count"] / line["noise_multiplier"] ** 2 for line in lines))
        return gaussian_dp_epsilon(mu, delta)
    if rdp:
        acc = rdp_lib.RdpAccountant(ORDERS)
        extra = np.zeros(len(ORDERS))
        for line in lines:
            n, m = line["count"], line["mechanism"]
            if m == "gaussian":
                acc.compose(dp_event.GaussianDpEvent(line["noise_multiplier"]), n)
            elif m == "laplace":
                acc.compose(dp_event.LaplaceDpEvent(line["noise_multiplier"]), n)
            elif m == "poisson-sampled gaussian" and line.get("relation") == "add-remove":
                inner = dp_event.GaussianDpEvent(line["noise_multiplier"])
                acc.compose(dp_event.PoissonSampledDpEvent(line["sampling"], inner), n)
            elif m == "pmf-pair":
                lo, up = _log_pmf(line["log_lower"]), _log_pmf(line["log_upper"])
                extra += n * np.array([max(renyi(lo, up, a), renyi(up, lo, a)) for a in ORDERS])
            elif m == "pure":
                e = line["epsilon"]
                extra += n * np.minimum(e, np.asarray(ORDERS) * e * e / 2)
            else:
                raise AssertionError(f"no RDP composition for {line}")
        eps, _ = rdp_lib.compute_epsilon(ORDERS, np.asarray(acc._rdp) + extra, delta)
        return float(eps)
    # mixed releases: dp_accounting's own PLDs, composed
    out = None
    for line in lines:
        n, m = line["count"], line["mechanism"]
        if m == "gaussian":
            one = pld_lib.from_gaussian_mechanism(line["noise_multiplier"])
        elif m == "laplace":
            one = pld_lib.from_laplace_mechanism(line["noise_multiplier"])
        elif m == "pure":
            params = pld_lib.common.DifferentialPrivacyParameters(line["epsilon"], 0.0)
            one = pld_lib.from_privacy_parameters(params)
        elif m == "poisson-sampled gaussian" and line.get("relation") == "replace-one":
            # (1-q)N(0, σ²) + qN(±1, σ²): a row's clipped contribution replaced, n fixed
            one = pld_lib.from_gaussian_mechanism(
                line["noise_multiplier"],
                sampling_prob=line["sampling"],
                neighboring_relation=NeighboringRelation.REPLACE_ONE,
            )
        else:
            raise AssertionError(f"no PLD composition for {line}")
        one = one.self_compose(n) if n > 1 else one
        out = one if out is None else out.compose(one)
    return float(out.get_epsilon_for_delta(delta))


def headline_epsilon(privacy: dict, unit: str | None = None) -> float:
    """``unit`` (default: the record's) composed from the record's own ``releases`` list: the
    sample unit from the lines of no party (a row in every block), party-row as the worst
    party's lines."""
    lines, delta = privacy["releases"], privacy["delta"]
    rdp = "rdp" in privacy["accountant"].lower()
    basic = str((privacy.get("centring") or {}).get("composition", "")).startswith("basic")

    def of(mine: list[dict]) -> float:
        if not basic:
            return compose(mine, delta, rdp=rdp)
        # the record states basic composition of its pure (centring) releases: their ε added
        pure = [x for x in mine if x["mechanism"] == "pure"]
        rest = [x for x in mine if x["mechanism"] != "pure"]
        return compose(rest, delta, rdp=rdp) + sum(x["count"] * x["epsilon"] for x in pure)

    if (unit or privacy["unit"]) == "sample":
        return of([x for x in lines if x["party"] is None])
    parties = {x["party"] for x in lines if x["party"] is not None}
    return max(of([x for x in lines if x["party"] == p]) for p in parties)


def _record(name: str) -> dict:
    """One small run (300 rows of breast, one epoch) of ``name`` at ε = 2: its privacy block."""
    m = lookup("method", name)
    spec = build_spec(
        dict(
            method=name,
            dataset="breast",
            n=300,
            parties=2,
            epochs=1,
            batch_size=128,
            seed=0,
            model=m.models[0],
            epsilon=2.0,
            delta=1e-5,
            **FAST_OPTIONS.get(name, {}),
        )
    )
    return run_experiment(spec)["privacy"]


@pytest.fixture(scope="module")
def records() -> dict[str, dict]:
    return {}


def _cached(records: dict, name: str) -> dict:
    if name not in records:
        records[name] = _record(name)
    return records[name]


def test_the_dp_methods_are_found():
    assert {"dpsgd-c", "fm-central", "hdp-vfl", "afe-vfl"} <= set(DP_METHODS)


@pytest.mark.parametrize("name", DP_METHODS)
def test_releases_compose_to_the_record_epsilon(name, records):
    p = _cached(records, name)
    assert p["epsilon"] is not None and p["releases"], p
    for line in p["releases"]:
        assert line["count"] >= 1 and line["mechanism"]
    mine = headline_epsilon(p)
    # our composition is exact or pessimistic by its discretisation; the record's accountant
    # may be a little tighter (PLD) or looser (RDP orders; hdp-vfl adds its pure centring
    # releases by basic composition): never more than 3 % below ours, at most 5 % above
    assert _agrees(mine, p["epsilon"]), (mine, p["epsilon"])


@pytest.mark.parametrize("name", DP_METHODS)
def test_releases_compose_to_every_printed_unit(name, records):
    """Issue 42 item 6: each ε of ``by_unit`` (not only the headline) is the composition of
    the record's releases (hdp-vfl's sample unit missed the two centring releases: 5.378
    composed against 6.178 printed)."""
    p = _cached(records, name)
    assert p["by_unit"] and p["unit"] in p["by_unit"], p["by_unit"]
    for unit, eps in p["by_unit"].items():
        mine = headline_epsilon(p, unit)
        assert _agrees(mine, eps), (unit, mine, eps)


@pytest.mark.parametrize("name", DP_METHODS)
def test_each_party_lines_compose_to_its_per_party_epsilon(name, records):
    p = _cached(records, name)
    rdp = "rdp" in p["accountant"].lower()
    for k, v in p["per_party"].items():
        lines = [x for x in p["releases"] if x["party"] == int(k)]
        assert sum(x["count"] for x in lines) == v["releases"], k
        mine = compose(lines, p["delta"], rdp=rdp)
        assert _agrees(mine, v["epsilon"]), (k, mine, v["epsilon"])


def _agrees(mine: float, record: float) -> bool:
    """The record's ε is not below an independent composition (beyond 3 %: discretisation)
    and not looser than it by more than 5 %."""
    return 0.97 * mine - 1e-6 <= record <= 1.05 * mine + 1e-6


@pytest.mark.parametrize("name", DP_METHODS)
def test_a_per_party_noise_summary_composes_to_its_epsilon(name, records):
    """Where per_party gives one σ and Δ for a party, its releases at that σ/Δ give its ε."""
    if name in PER_PARTY_SUMMARY_WRONG:
        pytest.xfail(PER_PARTY_SUMMARY_WRONG[name])
    p = _cached(records, name)
    summaries = {k: v for k, v in p["per_party"].items() if "sigma" in v and "sensitivity" in v}
    if not summaries:
        pytest.skip("no per-party noise summary")
    for k, v in summaries.items():
        mu = math.sqrt(v["releases"]) * v["sensitivity"] / v["sigma"]
        assert gaussian_dp_epsilon(mu, p["delta"]) == pytest.approx(v["epsilon"], rel=0.03), k


def test_composition_catches_a_wrong_count():
    """The check can fail: one release too few composes to a smaller ε."""
    lines = [{"party": None, "mechanism": "gaussian", "count": 30, "noise_multiplier": 5.53}]
    full = headline_epsilon(
        {"releases": lines, "delta": 1e-5, "accountant": "pld", "unit": "sample"}
    )
    fewer = compose([{**lines[0], "count": 29}], 1e-5, rdp=False)
    assert fewer < full * 0.99
    # and the closed form matches dp_accounting's PLD for one Gaussian
    pld = pld_lib.from_gaussian_mechanism(5.53 / math.sqrt(30))
    assert full == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=1e-3)
