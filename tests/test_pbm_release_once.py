"""PBM-VFL under the release-once schedule: the label holder with columns of its own
(``--active-features``), the sample unit with the labels' randomized response composed into
PBM's RDP curve, and a test row's own beta, each ε checked by an independent computation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.privacy.accountant import Accountant
from securevfl.privacy.pbm_accountant import dominating_pair
from securevfl.privacy.randomized_response import rr_event
from tests._built_once import built_once

ORDERS = np.array([1 + x / 20 for x in range(1, 20)] + list(range(2, 257)), dtype=float)


def _spec(parties: int = 2, epsilon: float = 4.0, **options) -> RunSpec:
    # b = 16: the exact accountant's envelope costs ~(b·M)^3, seconds at 32 trials
    return RunSpec(
        method="pbm-vfl", dataset="breast", parties=parties, model="mlp", epochs=5,
        batch_size=128, embedding_dim=1, seed=3, epsilon=epsilon, delta=1e-5,
        options={"b": 16, **options},
    )  # fmt: skip


@pytest.fixture(scope="module")
def two_party(tmp_path_factory) -> dict:
    """One run's record (as JSON, what a record is), made once per session."""

    def build(out: Path) -> None:
        (out / "record.json").write_text(json.dumps(run_experiment(_spec())))

    out = built_once(tmp_path_factory, "pbm-two-party", build)
    return json.loads((out / "record.json").read_text())


def rr_renyi(eps: float, c: int, a: float) -> float:
    """D_α of k-ary randomized response, closed form (p keep, q each other class)."""
    lp = -math.log1p((c - 1) * math.exp(-eps))  # log p, p = e^ε / (e^ε + c - 1)
    lq = lp - eps  # log q, q = (1 - p) / (c - 1) = p e^-ε
    terms = [a * lp + (1 - a) * lq, a * lq + (1 - a) * lp] + [lq] * (c - 2)
    return float(logsumexp(terms)) / (a - 1)


def binom_renyi(n: int, lo: float, hi: float, a: float) -> float:
    """D_α(Binomial(n, hi) || Binomial(n, lo)) = n·D_α(Bernoulli(hi) || Bernoulli(lo))."""
    return n * math.log(hi**a * lo ** (1 - a) + (1 - hi) ** a * (1 - lo) ** (1 - a)) / (a - 1)


def rdp_to_epsilon(rdp: np.ndarray, delta: float) -> float:
    """The RDP -> (ε, δ) conversion of Canonne, Kamath & Steinke (2020), written out."""
    a = ORDERS
    eps = rdp + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    return float(max(0.0, eps.min()))


@pytest.mark.parametrize("eps,c", [(0.5, 2), (4.0, 2), (2.0, 3), (8.0, 10)])
def test_randomized_response_event_has_the_closed_form_renyi_curve(eps, c):
    ev = rr_event(eps, c)
    lo, up = np.array(ev.log_lower), np.array(ev.log_upper)
    for a in (1.5, 2.0, 8.0, 64.0):
        mine = float(logsumexp(a * up - (a - 1) * lo)) / (a - 1)
        assert mine == pytest.approx(rr_renyi(eps, c, a), rel=1e-9)
        assert rr_renyi(eps, c, a) <= min(eps, a * eps**2 / 2) + 1e-12  # tighter than pure-ε
    # as a PLD its δ-free ε is the mechanism's ε
    assert Accountant("pld").compose(ev).get_epsilon(1e-12) == pytest.approx(eps, abs=2e-3)


def test_sample_unit_composes_the_label_with_pbm_and_the_bottoms(two_party):
    """by_unit['sample'] against our own RDP sum: RR closed form + P·Binomial pair of the secure
    sum (N = b·M trials at the extreme grid levels) + every sender's DP-SGD releases."""
    p = two_party["privacy"]
    M, b = p["secure_sum_parties"], p["sampler"]["b"]
    lo, hi = p["sampler"]["p_levels"]
    z = p["bottom_noise_multiplier"] / 2  # σ_g·C_g over the replace-one sensitivity 2·C_g
    grads = M * p["bottom_epochs"] * ORDERS / (2 * z**2)
    pbm = np.array([binom_renyi(b * M, lo, hi, a) for a in ORDERS])
    label = np.array([rr_renyi(p["label_epsilon"], 2, a) for a in ORDERS])
    mine = rdp_to_epsilon(pbm + grads + label, 1e-5)
    sample = p["by_unit"]["sample"]
    # the record uses fewer RDP orders than we do: at or a little above ours
    assert mine - 1e-6 <= sample <= 1.05 * mine, (mine, sample)
    # the label matters: without it our figure is clearly smaller, and the sample unit is
    # above the party-row headline
    assert rdp_to_epsilon(pbm + grads, 1e-5) < 0.97 * sample
    assert sample > p["by_unit"]["party-row"] == p["epsilon"]
    lines = [x for x in p["releases"] if x["party"] is None]
    assert sum(x["count"] for x in lines) == 1 + M * p["bottom_epochs"] + 1


def test_a_test_row_gets_the_whole_target_at_its_own_beta(two_party):
    """The test release's beta is above training's; δ(ε) of its dominating pair, computed
    directly (hockey stick), meets the recorded test-row ε at 1e-5 and not well below it."""
    p = two_party["privacy"]
    b, M = p["sampler"]["b"], p["secure_sum_parties"]
    tb = p["test_sampler"]["beta"]
    assert tb > p["sampler"]["beta"]
    assert 0.9 * 4.0 <= p["test_row_epsilon"] <= 4.0
    lo, up = (np.array(v) for v in dominating_pair("party-row", b, tb, M))

    def delta_at(e: float) -> float:
        return float(np.sum(np.maximum(0.0, np.exp(up) - np.exp(e + lo))))

    assert delta_at(p["test_row_epsilon"]) <= 1e-5
    assert delta_at(0.95 * p["test_row_epsilon"]) > 1e-5
    assert 0.98 * 4.0 <= p["epsilon"] <= 4.0


def test_active_features_run_secure_aggregation_among_the_passive_parties():
    """K = 3 with the label holder's columns: parties 1 and 2 mask, party 0 unmasks their sum;
    only their rows are accounted, and the head learns from party 0's own columns."""
    rec = run_experiment(_spec(parties=3, epsilon=2.0, active_features=True))
    p = rec["privacy"]
    assert set(p["per_party"]) == {"1", "2"}
    assert p["secure_sum_parties"] == 2
    assert rec["extra"]["secagg_dropouts"] == 0
    assert "accuracy_ceiling" not in rec["extra"]
    assert 0.98 * 2.0 <= p["epsilon"] <= 2.0
    assert rec["metrics"]["accuracy"] > 0.85


@pytest.mark.slow
@pytest.mark.networked
def test_active_features_are_identical_over_real_processes():
    """One OS process per party: the label holder (party 0) unmasks the passive parties' secure
    sum exactly as in-process (same models, scores and bytes; the reproduction mode)."""
    from dataclasses import replace

    from bench.runner import PLUGINS
    from securevfl.experiment import run_in_processes

    spec = _spec(parties=3, epsilon=2.0, active_features=True)
    spec = replace(spec, reproducible_noise=True, timeout=240)
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["runtime"] == "processes"
    assert net["model_fingerprint"] == local["model_fingerprint"] != {}
    assert net["metrics"] == local["metrics"]
    assert net["comm"]["bytes_total"] == local["comm"]["bytes_total"] > 0
