"""The audit's statistics: small pure functions (tested against independent computations).

A distinguishing test between neighbouring datasets D0 and D1 with false-positive rate FPR and
false-negative rate FNR bounds the ε of any (ε, δ)-DP mechanism from below: DP implies
FPR + e^ε·FNR ≥ 1 - δ and FNR + e^ε·FPR ≥ 1 - δ (Kairouz, Oh & Viswanath 2015), so
ε ≥ log((1 - δ - FNR) / FPR). With finite trials the rates are replaced by Clopper-Pearson upper
bounds, each at 1 - α/2, so the lower bound on ε holds with confidence 1 - α.

The one-run bound (Steinke, Nasr & Jagielski, NeurIPS 2023, Theorem 3 with δ = 0): with m
canaries each included with probability 1/2 and r guesses of which v are right, an ε-DP
mechanism makes P[v' ≥ v] ≤ P[Binomial(r, e^ε / (1 + e^ε)) ≥ v]; the bound is the largest ε
that the observed v rejects at level α.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from securevfl.errors import ConfigError, check_open_unit


def _check_counts(k: int, n: int) -> None:
    if n < 1 or not 0 <= k <= n:
        raise ConfigError(f"counts must satisfy 0 <= k <= n and n >= 1, got k={k}, n={n}")


def clopper_pearson_upper(k: int, n: int, *, alpha: float) -> float:
    """One-sided (1 - α) upper confidence bound on a binomial rate from k successes in n."""
    _check_counts(k, n)
    check_open_unit("alpha", alpha)
    if k == n:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def epsilon_from_rates(fpr: float, fnr: float, *, delta: float) -> float:
    """The smallest ε that (ε, δ)-DP allows for a test with these error rates (≥ 0)."""
    best = 0.0
    for a, b in ((fpr, fnr), (fnr, fpr)):  # either world may be called "positive"
        num = 1.0 - delta - b
        if a > 0 and num > 0:
            best = max(best, math.log(num / a))
        elif a == 0 and num > 0:
            return math.inf
    return best


def epsilon_lower_bound(
    false_pos: int, negatives: int, false_neg: int, positives: int, *, delta: float, alpha: float
) -> float:
    """ε lower bound at confidence 1 - α from a test's errors on held-out trials."""
    check_open_unit("delta", delta)
    fpr_u = clopper_pearson_upper(false_pos, negatives, alpha=alpha / 2)
    fnr_u = clopper_pearson_upper(false_neg, positives, alpha=alpha / 2)
    return epsilon_from_rates(fpr_u, fnr_u, delta=delta)


def one_run_epsilon_lower_bound(correct: int, guesses: int, *, alpha: float) -> float:
    """Steinke et al.'s one-run bound (δ = 0): the largest ε with
    P[Binomial(guesses, e^ε/(1+e^ε)) ≥ correct] ≤ α (0 if even ε = 0 is not rejected)."""
    _check_counts(correct, max(guesses, 1))
    check_open_unit("alpha", alpha)

    def tail(eps: float) -> float:
        p = 1.0 / (1.0 + math.exp(-eps))
        return float(stats.binom.sf(correct - 1, guesses, p))

    if guesses == 0 or tail(0.0) > alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while tail(hi) <= alpha and hi < 100:
        lo, hi = hi, hi * 2
    for _ in range(60):  # tail is increasing in ε: bisect for tail(ε) = α
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) <= alpha else (lo, mid)
    return lo


def fit_direction(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """A linear test from training trials of world 0 (``a``) and world 1 (``b``), rows = trials:
    diagonal linear discriminant (mean difference over a shrunk per-coordinate variance) and
    the midpoint threshold. Returns (weights, threshold); score > threshold says world 1."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = b.mean(axis=0) - a.mean(axis=0)
    var = (a.var(axis=0) + b.var(axis=0)) / 2
    var = var + max(float(var.mean()), 1e-300)  # shrink toward the mean variance
    w = diff / var
    thr = float((a @ w).mean() + (b @ w).mean()) / 2
    return w, thr


def best_threshold(
    s0: np.ndarray, s1: np.ndarray, *, delta: float, alpha: float, grid: int = 400
) -> float:
    """The threshold t ("score > t says world 1") whose ε bound on these (fitting) trials is
    largest: candidates are ``grid`` quantiles of the pooled scores. Chosen on trials that the
    bound itself never counts, so the held-out Clopper-Pearson bound stays valid."""
    s0, s1 = np.sort(np.asarray(s0, dtype=float)), np.sort(np.asarray(s1, dtype=float))
    if not len(s0) or not len(s1):
        raise ConfigError("choosing a threshold needs trials of both worlds")
    cand = np.unique(np.quantile(np.concatenate([s0, s1]), np.linspace(0, 1, grid)))
    fp = len(s0) - np.searchsorted(s0, cand, side="right")  # world 0 above t
    fn = np.searchsorted(s1, cand, side="right")  # world 1 at or below t
    bounds = [
        epsilon_lower_bound(int(a), len(s0), int(b), len(s1), delta=delta, alpha=alpha)
        for a, b in zip(fp, fn, strict=True)
    ]
    return float(cand[int(np.argmax(bounds))])
