"""PBM-VFL's calibration and privacy report: beta (and b) for a target epsilon on the sampler's
2^-12 grid, and the record's ``privacy`` (party-row headline over every release, sample unit,
the per-row-only figure of the seed paper)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dp_accounting import dp_event

from securevfl.errors import ConfigError
from securevfl.privacy.accountant import Accountant, calibrate
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.pbm import _GRID_BITS, grid_levels
from securevfl.privacy.pbm_accountant import pbm_epsilon, pbm_event, pbm_ledger


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

    First the largest beta on the 2^-12 grid at the given b, by bisection (``calibrate``) over
    the noise parameter 1/beta. Where one grid step of beta moves epsilon by more than 2% (small
    beta), beta goes one step up and b down: the largest b' <= b meeting the target, by integer
    bisection (epsilon grows with b), trying up to 16 levels up. An error if none gets within
    2%."""

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

    def eps_of(s: float) -> float:
        return eps_at(max(1, int((1 << _GRID_BITS) / s)), b)

    if eps_at(1, b) > target:  # even the smallest beta is too much at this b: fewer trials
        s, eps = float(1 << _GRID_BITS), eps_at(1, b)
    else:
        s, eps = calibrate(eps_of, target, lo=4.0, hi=float(1 << _GRID_BITS), what="1/beta")
    level = max(1, int((1 << _GRID_BITS) / s))
    if 0.98 * target <= eps <= target:
        return b, _grid_beta(level)
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
            return lo_b, _grid_beta(up)
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
