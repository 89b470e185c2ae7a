"""PBM-VFL's privacy record under the release-once schedule (``training.release_once``).

What a training row costs, per passive party (unit ``party-row``): its P coordinates through PBM
and secure aggregation once (P releases of PBM's dominating pair, ``pbm_accountant``) and its
``bottom_epochs`` DP-SGD releases (Gaussian). A test row: its P coordinates once, at scoring.
Rows are disjoint and the scoring model is post-processing of training releases, so the run's ε
is the larger of the two (``with_test_rows``); a test row's is below.

A test row's one release gets the whole target on its own: its beta is calibrated apart
(``calibrate_test_beta``, PLD of the dominating pair: one release, where RDP's conversion is
loosest), on the 2^-12 grid at the training b; the scoring model does not change with it.

Unit ``sample`` (the row in every passive party's block and its label): P releases of PBM's
sample-unit pair over the secure sum (every sender's input may move), every sender's DP-SGD
releases, and the label's randomized response (``rr_event``, its exact pmf pair), composed at
the same RDP orders. Every event is listed in the record's ``releases`` (party None: the sample
accountant), so composing the list independently reproduces both units.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from securevfl.context import RunContext
from securevfl.methods.release_options import bottom_events, release_record
from securevfl.privacy import calibration_cache
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.dp_bottom import with_test_rows
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.pbm import _GRID_BITS, grid_levels
from securevfl.privacy.pbm_accountant import pbm_event, pbm_ledger
from securevfl.privacy.randomized_response import rr_event
from securevfl.training.release_once import ReleaseOncePlan

_CACHE_KIND = "pbm-test-beta"
# the code a test-row calibration depends on: a change to any of these invalidates the cache
_CODE = (
    "securevfl.methods.pbm_release_once",
    "securevfl.privacy.pbm_accountant",
    "securevfl.privacy.pbm",
    "securevfl.privacy.accountant",
    "securevfl.privacy.events",
)


def pbm_release_once_report(
    ctx: RunContext,
    plan: ReleaseOncePlan,
    *,
    b: int,
    beta: float,
    senders: list[int],
    delta: float,
    test_beta: float | None = None,
) -> PrivacyReport:
    """The record's ``privacy`` of a release-once PBM-VFL run with these ``senders``
    (``test_beta``: a test row's release, default ``beta``)."""
    M, P = len(senders), int(ctx.spec.embedding_dim)
    grads = bottom_events(plan)
    whole = pbm_event("sample", b=b, beta=beta, n_parties=M)
    # a training row: per sender one use (P coordinates) and its DP-SGD releases (one
    # accountant shared by the senders: their events are identical)
    ledger = pbm_ledger(
        b=b, beta=beta, n_parties=M, dim=P, uses=1, parties=senders, kind="rdp", extra_events=grads
    )
    ledger.compose(None, whole, P)
    for ev in grads:
        ledger.compose(None, ev, M)
    ledger.compose(None, rr_event(plan.label_epsilon, int(ctx.info.n_classes or 2)))
    # a test row: one use per sender; the sample unit sees the secure sum of all of them once
    tb = beta if test_beta is None else test_beta
    test = PrivacyLedger("party-row", kind="pld")
    one_t = pbm_event("party-row", b=b, beta=tb, n_parties=M)
    for k in senders:
        test.compose(k, one_t, P, sample=False)
    test.compose(None, pbm_event("sample", b=b, beta=tb, n_parties=M), P)
    j_lo, j_hi = grid_levels(beta)
    report = ledger.report(
        delta,
        target_epsilon=float(ctx.spec.epsilon),
        extra={
            **release_record(ctx, plan),
            "bottom": "dp",
            "sampler": {
                "b": b,
                "beta": beta,
                "p_levels": [j_lo / (1 << _GRID_BITS), j_hi / (1 << _GRID_BITS)],
                "pmf": "exact Binomial(b, j / 2^12)",
            },
            "test_sampler": {"b": b, "beta": tb, "accountant": "pld (dp_accounting)"},
            "secure_sum_parties": M,
            # one sender (K = 2): its PBM output is sent as it is (``PBMSecAggHooks``)
            "secure_aggregation": M > 1,
            "releases_per_row": {"train": 1, "test": 1},
        },
    )
    report = with_test_rows(report, test, delta)
    eps = coalition_epsilon(b=b, beta=beta, test_beta=tb, dim=P, grads=grads, delta=delta)
    return dataclasses.replace(
        report, extra={**report.extra, "coalition_epsilon": {COALITION: eps}}
    )


# the coalition the headline does not cover (``privacy.coalitions``): the server with every
# other data party knows their PBM trials, so a party's release carries its own trials only
COALITION = "server with the other data parties"


def coalition_epsilon(
    *, b: int, beta: float, test_beta: float, dim: int, grads: list, delta: float
) -> float:
    """A party's party-row ε against :data:`COALITION`: its quantized vector is PBM with one
    party's b trials (``n_parties=1``) instead of the sum of all M; a training row's release
    composed with its bottom's DP-SGD releases (RDP, as the headline), a test row's alone
    (PLD); the larger of the two, as the headline's ``with_test_rows``."""
    train = pbm_ledger(
        b=b, beta=beta, n_parties=1, dim=dim, uses=1, parties=[0], kind="rdp", extra_events=grads
    )
    test = PrivacyLedger("party-row", kind="pld")
    test.compose(0, pbm_event("party-row", b=b, beta=test_beta, n_parties=1), dim, sample=False)
    return max(train.epsilon(delta, party=0), test.epsilon(delta, party=0))


def calibrate_test_beta(
    target: float, *, b: int, n_parties: int, dim: int, delta: float, floor: float
) -> float:
    """The largest beta on the 2^-12 grid (<= 1/4) whose one release of a row (``dim``
    coordinates, PLD) is (``target``, ``delta``)-DP in the party-row unit; ``floor``: the
    training beta, whose one release is below the target (it carries the gradient releases
    too), where the search starts. Within 2% of the target or at a grid neighbour of it."""
    from securevfl.privacy.pbm_accountant import pbm_epsilon

    def eps(level: int) -> float:
        return pbm_epsilon(
            "party-row",
            b=b,
            beta=level / (1 << _GRID_BITS),
            n_parties=n_parties,
            dim=dim,
            uses=1,
            delta=delta,
            kind="pld",
        )

    lo = max(1, int(round(floor * (1 << _GRID_BITS))))
    hi = (1 << _GRID_BITS) // 4  # beta = 1/4
    # a pure function of public inputs: kept on disk (JSON) and reused only after one fresh
    # evaluation at the cached level confirms its ε and that it meets the target
    inputs = {"target": float(target), "b": int(b), "n_parties": int(n_parties),
              "dim": int(dim), "delta": float(delta), "floor": float(floor)}  # fmt: skip
    key = calibration_cache.entry_key(_CACHE_KIND, inputs, _CODE)
    entry = calibration_cache.load(_CACHE_KIND, key)
    if entry is not None:
        level, eps_c = entry.get("level"), entry.get("epsilon")
        if type(level) is int and type(eps_c) is float and lo <= level <= hi:
            e = eps(level)
            if math.isclose(e, eps_c, rel_tol=1e-9) and e <= target:
                return level / (1 << _GRID_BITS)
    level, e = _search(eps, target, lo, hi)
    if level is None:  # the PLD figure above the RDP one: keep the training beta
        return floor
    calibration_cache.store(_CACHE_KIND, key, {"level": level, "epsilon": e})
    return level / (1 << _GRID_BITS)


def _search(eps: Any, target: float, lo: int, hi: int) -> tuple[int | None, float]:
    """The largest grid level in [lo, hi] meeting ``target`` (within 2% or a grid neighbour)
    and its ε; None where even ``lo`` is above the target."""
    e_lo = eps(lo)
    if e_lo > target:
        return None, e_lo
    e_hi = eps(hi)
    if e_hi <= target:
        return hi, e_hi
    step = 0
    while hi - lo > 1 and e_lo < 0.98 * target:
        # interpolate (ε grows about linearly in beta), every other step bisect (progress)
        guess = lo + (target - e_lo) * (hi - lo) / (e_hi - e_lo) if step % 2 == 0 else None
        mid = (lo + hi) // 2 if guess is None else min(hi - 1, max(lo + 1, int(guess)))
        step += 1
        e_mid = eps(mid)
        if e_mid <= target:
            lo, e_lo = mid, e_mid
        else:
            hi, e_hi = mid, e_mid
    return lo, e_lo
