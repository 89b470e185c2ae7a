"""Privacy questions a process asks again: ledgers and compositions shared by public inputs.

Every run of one setting (a benchmark's seeds, a suite's cells, a test module) calibrates its
noise and reports its ε at the same public points, and each answer composes a PLD anew
(0.1-2 CPU-s). Here a ledger built from the same compose operations is one object per process,
so its accountants keep their answers (``Accountant`` answers a query once per state), and a
composition's ε is computed once per process. The answers are the accountant's own, for the
same releases in the same order: nothing is read from outside the process, and a shared ledger
is never composed onto (its builders pass every operation up front).
"""

from __future__ import annotations

import functools

from dp_accounting import dp_event

from securevfl.privacy.accountant import Accountant, PrivacyLedger

# one compose operation of a PrivacyLedger: (party or None, event, count, into the sample unit)
Op = tuple[int | None, dp_event.DpEvent, int, bool]


class SharedLedger(PrivacyLedger):
    """A ledger whose releases are fixed when it is built: a compose onto it raises, since the
    next run of the same setting would carry the release (its record's ε would be wrong)."""

    def __init__(self, unit: str, ops: tuple[Op, ...]) -> None:
        super().__init__(unit)
        for party, event, count, sample in ops:
            super().compose(party, event, count, sample=sample)

    def compose(self, *args, **kwargs) -> None:
        raise TypeError("a shared ledger is read only: build a PrivacyLedger to compose onto")


@functools.lru_cache(maxsize=256)
def shared_ledger(unit: str, ops: tuple[Op, ...]) -> SharedLedger:
    """The ledger of ``ops`` in ``unit``, one object per process for these operations: read it
    (``report``, ``epsilon``, ``by_unit``); a compose onto it raises."""
    return SharedLedger(unit, ops)


@functools.lru_cache(maxsize=1024)
def composed_epsilon(events: tuple[tuple[dp_event.DpEvent, int], ...], delta: float) -> float:
    """ε(δ) of ``events`` ((event, count) in composition order) on one PLD accountant, once per
    process for these releases."""
    acc = Accountant()
    for event, count in events:
        acc.compose(event, count)
    return acc.get_epsilon(delta)
