"""A ledger that records every release in several ledgers (a run's total and one part's own)."""

from __future__ import annotations

from typing import Any

from securevfl.privacy.accountant import PrivacyLedger


class TeeLedger(PrivacyLedger):
    """Composes each release into every ledger given (their unit is the first one's)."""

    def __init__(self, *ledgers: PrivacyLedger) -> None:
        super().__init__(ledgers[0].unit)
        self.ledgers = ledgers

    def compose(
        self, party: int | None, event: Any, count: int = 1, *, sample: bool = True
    ) -> None:
        for led in self.ledgers:
            led.compose(party, event, count, sample=sample)
