"""Functional-mechanism sensitivities and budgets (securevfl/privacy/functional.py) against the
FM-VFL paper's closed forms and an independent brute-force computation of Lemma 1."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from securevfl.errors import ConfigError
from securevfl.privacy.functional import (
    block_sensitivities,
    bottom_up_scales,
    fm_ledger,
    global_sensitivity,
    paper_delta_f,
    party_sensitivity,
    target_bottom_up_scales,
    top_down_scales,
)


@pytest.mark.parametrize("task", ["linear", "logistic"])
@pytest.mark.parametrize("dims", [[5], [3, 4], [2, 3, 4], [1, 1, 1, 5]])
def test_global_sensitivity_is_the_papers_closed_form(task, dims):
    d = sum(dims)
    assert global_sensitivity(block_sensitivities(task, dims)) == pytest.approx(
        paper_delta_f(task, d)
    )
    assert paper_delta_f("linear", d) == 2 * (1 + 2 * d + d * d)
    assert paper_delta_f("logistic", d) == d * d / 4 + d


@pytest.mark.parametrize("dims", [[3, 4], [2, 3, 4]])
def test_logistic_party_sensitivities_match_section_iii_c(dims):
    d = sum(dims)
    s = block_sensitivities("logistic", dims)
    assert party_sensitivity(s, 0) == pytest.approx(d + dims[0] * (2 * d - dims[0]) / 4)
    for k in range(1, len(dims)):
        assert party_sensitivity(s, k) == pytest.approx(dims[k] + dims[k] * (2 * d - dims[k]) / 4)


def _coeffs(task, x, y):
    """All distinct-monomial coefficients of one row (brute force, independent of the module)."""
    d = len(x)
    out = {}
    if task == "linear":
        out["0"] = y * y
        for a in range(d):
            out[f"w{a}"] = -2 * y * x[a]
        quad = 1.0
    else:
        for a in range(d):
            out[f"w{a}"] = (0.5 - y) * x[a]
        quad = 0.125
    for a, b in itertools.combinations_with_replacement(range(d), 2):
        out[f"w{a}w{b}"] = quad * x[a] * x[b] * (1 if a == b else 2)
    return out


@pytest.mark.parametrize("task", ["linear", "logistic"])
def test_block_sensitivities_by_brute_force_over_the_corners(task):
    """Lemma 1/2 by enumeration of rows in {-1,1}^d with extreme labels (where |λ_t| peaks):
    2 max_t Σ|λ_t| over the coefficients touching a party, and the true worst change below it."""
    dims = [2, 1, 2]
    d = sum(dims)
    owner = np.repeat(np.arange(len(dims)), dims)
    ys = [-1.0, 1.0] if task == "linear" else [0.0, 1.0]
    rows = [(np.array(x), y) for x in itertools.product([-1.0, 1.0], repeat=d) for y in ys]
    coeffs = [_coeffs(task, x, y) for x, y in rows]

    def touches(key, k):
        if key == "0":
            return k == 0
        idx = [int(t) for t in key.split("w")[1:]]
        return any(owner[i] == k for i in idx) or (k == 0 and len(idx) == 1)

    s = block_sensitivities(task, dims)
    for k in range(len(dims)):
        keys = [key for key in coeffs[0] if touches(key, k)]
        lemma = 2 * max(sum(abs(c[key]) for key in keys) for c in coeffs)  # Eq. 6/7
        worst = max(sum(abs(c1[key] - c2[key]) for key in keys) for c1 in coeffs for c2 in coeffs)
        assert party_sensitivity(s, k) == pytest.approx(lemma)
        assert worst <= lemma + 1e-9  # the Lemma's bound is valid (not always tight)
    lemma_all = 2 * max(sum(abs(v) for v in c.values()) for c in coeffs)
    assert global_sensitivity(s) == pytest.approx(lemma_all)


def test_top_down_budget_theorems_1_and_2():
    s = block_sensitivities("logistic", [20, 21])
    scales = top_down_scales(s, 0.7)
    ledger = fm_ledger(s, scales)
    eps = ledger.epsilon(0.0)
    per = {k: ledger.epsilon(0.0, party=k) for k in (0, 1)}
    assert eps == pytest.approx(0.7)  # Theorem 1
    # at δ > 0 the PLD of the composed Laplace releases gives a smaller ε, never a larger one
    assert ledger.epsilon(1e-6) <= 0.7 + 1e-9
    for k in (0, 1):  # Theorem 2: eps^(k) = Δ^(k)/Δ_f eps
        assert per[k] == pytest.approx(party_sensitivity(s, k) / global_sensitivity(s) * 0.7)
        assert per[k] < 0.7


def test_bottom_up_budget_respects_every_partys_choice():
    s = block_sensitivities("linear", [3, 4, 5])
    chosen = [0.5, 1.0, 2.0]
    ledger = fm_ledger(s, bottom_up_scales(s, chosen))
    eps = ledger.epsilon(0.0)
    per = {k: ledger.epsilon(0.0, party=k) for k in range(3)}
    for k in range(3):
        assert per[k] <= chosen[k] + 1e-12
    assert per[0] == pytest.approx(0.5)  # the tightest party spends its whole budget
    # global epsilon = sum of what the blocks spend (basic composition of the Laplace releases)
    offers = [e / 3 for e in chosen]
    want = sum(min(offers[a], offers[b]) for a, b in s)
    assert eps == pytest.approx(want)


def test_bottom_up_to_a_target_spends_exactly_the_target():
    s = block_sensitivities("logistic", [3, 4, 5])
    scales = target_bottom_up_scales(s, 2.0)
    assert sum(s[b] / scales[b] for b in s) == pytest.approx(2.0)  # independent: Σ Δ_G / b_G
    assert fm_ledger(s, scales).epsilon(0.0) == pytest.approx(2.0)


def test_bad_inputs_raise_config_errors():
    with pytest.raises(ConfigError, match="task must be"):
        block_sensitivities("poisson", [2])
    with pytest.raises(ConfigError, match="bounds\\[1\\] must be > 0"):
        block_sensitivities("linear", [2, 0])
    with pytest.raises(ConfigError, match="epsilon must be > 0"):
        top_down_scales(block_sensitivities("linear", [2]), 0.0)
    with pytest.raises(ConfigError, match="one value per data party"):
        bottom_up_scales(block_sensitivities("linear", [2, 2]), [1.0])
