"""PBM-VFL's calibration and privacy report: beta (and b) for a target epsilon on the sampler's
2^-12 grid, and the record's ``privacy`` (party-row headline over every release, sample unit,
the per-row-only figure of the seed paper)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from dp_accounting import dp_event

from securevfl.errors import ConfigError
from securevfl.privacy import calibration_cache
from securevfl.privacy.accountant import Accountant, calibrate
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.pbm import _GRID_BITS, grid_levels
from securevfl.privacy.pbm_accountant import pbm_epsilon, pbm_event, pbm_ledger

_CACHE_KIND = "pbm-beta"
# the code a calibration depends on: a change to any of these invalidates the cache
_CODE = (
    "securevfl.privacy.pbm_calibration",
    "securevfl.privacy.pbm_accountant",
    "securevfl.privacy.pbm",
    "securevfl.privacy.accountant",
    "securevfl.privacy.events",
)


def _grid_beta(level: int) -> float:
    return level / (1 << _GRID_BITS)


def calibrate_beta(
    target: float,
    *,
    b: int,
    n_parties: int,
    dim: int,
    uses: int,
    delta: float,
    extra_events: Sequence[dp_event.DpEvent] = (),
) -> tuple[int, float]:
    """(b, beta) whose party-row epsilon(delta) is <= ``target`` and within 2% of it.

    The answer is a pure function of these public inputs, so it is kept on disk
    (``calibration_cache``, JSON) and a later call with the same inputs and code reuses it after
    one evaluation of the accountant at the cached (b, beta) confirms its epsilon is what the
    entry says and meets the target: a bad entry is recomputed, never trusted (``_cached``).

    The search (``_search_beta``): first the largest beta on the 2^-12 grid at the given b
    (``_largest_level``: from the Gaussian approximation's beta, a bracket narrowed by
    interpolation, each step one exact evaluation; about 4 instead of the 10 of a plain
    bisection, the costly part being one dominating pair per level). Where one grid step of
    beta moves epsilon by more than 2% (small beta), beta goes one step up and b down: the
    largest b' <= b meeting the target, by integer bisection (epsilon grows with b), trying up
    to 16 levels up. An error if none gets within 2%."""

    def eps_at(level: int, trials: int) -> float:
        return pbm_epsilon(
            "party-row",
            b=trials,
            beta=_grid_beta(level),
            n_parties=n_parties,
            dim=dim,
            uses=uses,
            delta=delta,
            kind="rdp",
            extra_events=extra_events,
        )

    inputs = {
        "target": float(target),
        "b": int(b),
        "n_parties": int(n_parties),
        "dim": int(dim),
        "uses": int(uses),
        "delta": float(delta),
        "extra_events": [repr(ev) for ev in extra_events],
    }
    key = calibration_cache.entry_key(_CACHE_KIND, inputs, _CODE)
    hit = _cached(calibration_cache.load(_CACHE_KIND, key), target, b, eps_at)
    if hit is not None:
        return hit
    guess = _gaussian_guess(target, b, n_parties, dim * uses, delta, extra_events)
    b_out, level, eps = _search_beta(target, b, eps_at, guess)
    calibration_cache.store(
        _CACHE_KIND, key, {"b": b_out, "level": level, "epsilon": eps, "target": float(target)}
    )
    return b_out, _grid_beta(level)


def _cached(
    entry: dict[str, Any] | None, target: float, b: int, eps_at: Callable[[int, int], float]
) -> tuple[int, float] | None:
    """A cache entry's (b, beta) if it is well-formed and one evaluation of the accountant at
    it gives the entry's epsilon, within [0.98 target, target]; else None (recompute)."""
    if entry is None:
        return None
    b_c, level, eps_c = entry.get("b"), entry.get("level"), entry.get("epsilon")
    if not (type(b_c) is int and type(level) is int and type(eps_c) is float):
        return None
    if not (1 <= b_c <= b and 1 <= level <= 1 << (_GRID_BITS - 2)):
        return None
    eps = eps_at(level, b_c)  # the check: the figure the run will report, computed afresh
    if not (math.isclose(eps, eps_c, rel_tol=1e-9) and 0.98 * target <= eps <= target):
        return None
    return b_c, _grid_beta(level)


_TOP = 1 << (_GRID_BITS - 2)  # beta <= 1/4


def _gaussian_guess(
    target: float,
    b: int,
    n_parties: int,
    releases: int,
    delta: float,
    extra_events: Sequence[dp_event.DpEvent],
) -> float:
    """A starting level for the search (only a guess: the search checks every step exactly):
    beta whose Gaussian approximation of the secure sum meets ``target``. The sum of bM trials
    has sd ~ sqrt(bM)/2; one party's row moves b of them by 2 beta, so the noise multiplier is
    sqrt(M / b) / (4 beta)."""

    def eps_of(z: float) -> float:
        acc = Accountant("rdp").compose(dp_event.GaussianDpEvent(z), releases)
        for ev in extra_events:
            acc.compose(ev)
        return acc.get_epsilon(delta)

    z_lo = math.sqrt(n_parties / b)  # beta = 1/4
    try:
        z, _ = calibrate(eps_of, target, lo=z_lo, hi=z_lo * _TOP, rel_tol=0.01, what="z")
    except ConfigError:  # out of reach even at level 1: start there
        return 1.0
    return (1 << _GRID_BITS) * math.sqrt(n_parties / b) / (4.0 * z)


def _largest_level(
    target: float, b: int, eps_at: Callable[[int, int], float], guess: float
) -> tuple[int, float]:
    """(level, epsilon): the largest grid level in [1, _TOP] whose epsilon at ``b`` is <=
    ``target`` (epsilon grows with the level), or (1, its epsilon > target) if none. A bracket
    [lo, hi] (epsilon(lo) <= target < epsilon(hi)) narrowed from ``guess`` by interpolation in
    log-log (epsilon is close to a power of beta), halved geometrically when that stalls."""
    lo, e_lo, hi, e_hi = 0, 0.0, _TOP + 1, math.inf  # virtual ends: levels 0 and _TOP + 1
    nxt = min(_TOP, max(1, round(guess)))
    while hi - lo > 1:
        e = eps_at(nxt, b)
        width = hi - lo if 0 < lo and hi <= _TOP else None  # None: an end was virtual
        if e <= target:
            lo, e_lo = nxt, e
        else:
            hi, e_hi = nxt, e
        if hi - lo <= 1:
            break
        if 0 < lo and hi <= _TOP and e_lo > 0:  # both ends real: interpolate
            t = (math.log(target) - math.log(e_lo)) / (math.log(e_hi) - math.log(e_lo))
            est = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))
        else:  # one end virtual: step by the power law eps ~ level from the real one
            est = nxt * target / e if e > 0 else 2.0 * nxt
        if width is not None and 2 * (hi - lo) > width:  # no halving: bisect instead
            est = math.sqrt(max(lo, 1) * min(hi, _TOP))
        # evaluate just below the estimate: the next step often brackets with est's neighbour
        nxt = min(hi - 1, max(lo + 1, math.floor(est)))
    if lo == 0:
        return 1, e_hi
    return lo, e_lo


def _search_beta(
    target: float, b: int, eps_at: Callable[[int, int], float], guess: float
) -> tuple[int, int, float]:
    """(b, grid level of beta, epsilon) by the search ``calibrate_beta`` describes."""

    level, eps = _largest_level(target, b, eps_at, guess)
    if 0.98 * target <= eps <= target:
        return b, level, eps
    # coarser grid steps: a few levels up, each with the largest b' <= b meeting the target
    start = level if eps > target else level + 1
    for up in range(start, min(level + 17, (1 << (_GRID_BITS - 2)) + 1)):
        lo_b, hi_b = 0, b  # eps_at(up, lo_b) <= target < eps_at(up, hi_b), eps(b = 0) = 0
        best = 0.0
        if eps_at(up, b) <= target:
            continue  # cannot happen above the bisection's level; keeps the invariant
        while hi_b - lo_b > 1:
            mid = (lo_b + hi_b) // 2
            e = eps_at(up, mid)
            lo_b, hi_b, best = (mid, hi_b, e) if e <= target else (lo_b, mid, best)
        if lo_b >= 1 and best >= 0.98 * target:
            return lo_b, up, best
    raise ConfigError(
        f"epsilon {target:g} cannot be met within 2% at b <= {b}: beta on the 2^-12 grid gives "
        f"{eps:.4g} at beta = {_grid_beta(level):g} (beta <= 1/4), more at the next level; "
        "change --b"
    )


def pbm_report(
    *,
    b: int,
    beta: float,
    n_parties: int,
    dim: int,
    epochs: int,
    delta: float,
    parties: list[int],
    n_rows: tuple[int, int],
    outside_guarantee: list[str],
    target_epsilon: float | None = None,
    grad_events: Sequence[dp_event.DpEvent] | None = None,
) -> PrivacyReport:
    """The record's ``privacy`` for PBM-VFL: party-row headline, sample unit, RDP cross-check.

    ``grad_events`` (DP bottoms: one row's gradient releases over the run): a row's own
    releases count — E uses, +1 for its scoring under private eval (composed with the training
    ones: conservative, as test rows are not training rows) — with the gradient releases
    composed at the same RDP orders. None (exact bottoms): every release of the party's rows
    counts (E·n_train + n_test uses; each may depend on any row through the bottom model)."""
    M, P, E = n_parties, dim, epochs
    n_train, n_test = n_rows
    per_row_dp = grad_events is not None
    grads = list(grad_events or ())
    every = E + (1 if n_test else 0) if per_row_dp else E * n_train + n_test
    # the headline by RDP (a PLD of so many compositions is costly)
    ledger = pbm_ledger(
        b=b,
        beta=beta,
        n_parties=M,
        dim=P,
        uses=every,
        parties=parties,
        kind="rdp",
        extra_events=grads,
    )
    per_row = dict(b=b, beta=beta, n_parties=M, dim=P, uses=E, delta=delta, kind="rdp")
    j_lo, j_hi = grid_levels(beta)
    report = ledger.report(
        delta,
        outside_guarantee=outside_guarantee,
        target_epsilon=target_epsilon,
        extra={
            "bottom": "dp" if per_row_dp else "exact",
            "releases_per_party": P * every,
            "sampler": {
                "b": b,
                "beta": beta,
                "p_levels": [j_lo / (1 << _GRID_BITS), j_hi / (1 << _GRID_BITS)],
                "pmf": "exact Binomial(b, j / 2^12)",
            },
            "releases_per_row": {"train": P * E, "test": P if n_test else 0},
        },
    )
    if not per_row_dp:
        report.extra["per_row_only"] = {
            "party-row": pbm_epsilon("party-row", **per_row),
            "sample": pbm_epsilon("sample", **per_row),
            "note": "a row's own releases only (the seed paper's figure): not a guarantee, "
            "the bottom models carry each row into the later releases of other rows",
        }
    # one sample changes every party's rows: M parties' releases compose (an upper bound)
    sample = Accountant("rdp").compose(pbm_event("sample", b=b, beta=beta, n_parties=M), P * every)
    for ev in grads:
        sample.compose(ev, M)
    report.extra["by_unit"] = {"party-row": report.epsilon, "sample": sample.get_epsilon(delta)}
    return report


def void_on_dropouts(report: PrivacyReport, dropouts: int) -> PrivacyReport:
    """The report of a run whose secure aggregation recovered ``dropouts`` party dropouts: a
    recovered round sums fewer parties' PBM noise than the accountant's M assumes, so the figure
    no longer covers it (ε voided, the reason listed)."""
    return dataclasses.replace(
        report,
        epsilon=None,
        outside_guarantee=(
            *report.outside_guarantee,
            f"secure aggregation recovered {dropouts} party dropout(s): those "
            "sums hold fewer parties' PBM noise than the accountant assumes",
        ),
    )
