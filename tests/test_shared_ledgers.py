"""Ledgers shared within a process answer like a new ledger of the same releases and refuse a
compose (a release added to one would reach the next run of the same setting)."""

from __future__ import annotations

import pytest
from dp_accounting import dp_event

from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import PureDpEvent
from securevfl.privacy.shared_ledgers import composed_epsilon, shared_ledger


def test_a_shared_ledger_answers_as_a_new_one_and_refuses_a_compose():
    ops = ((0, dp_event.GaussianDpEvent(2.0), 3, True), (None, PureDpEvent(0.5), 1, True))
    shared = shared_ledger("party-row", ops)
    fresh = PrivacyLedger("party-row")
    for party, event, count, sample in ops:
        fresh.compose(party, event, count, sample=sample)
    assert shared is shared_ledger("party-row", ops)  # one object per process
    assert shared.epsilon(1e-5) == fresh.epsilon(1e-5)
    assert shared.by_unit(1e-5) == fresh.by_unit(1e-5)
    with pytest.raises(TypeError, match="read only"):
        shared.compose(0, PureDpEvent(1.0))
    assert shared.epsilon(1e-5) == fresh.epsilon(1e-5)


def test_composed_epsilon_is_the_accountants():
    events = ((dp_event.GaussianDpEvent(3.0), 2), (PureDpEvent(0.25), 1))
    ledger = PrivacyLedger("sample")
    for event, count in events:
        ledger.compose(None, event, count)
    assert composed_epsilon(events, 1e-5) == ledger.epsilon(1e-5)
