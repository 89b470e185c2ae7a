"""Mechanisms, privacy events and the one accountant interface.

Names are imported on first use (``securevfl.lazy``): a module that needs only, say,
``securevfl.privacy.centring`` does not load dp_accounting (~1.4 s) with this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from securevfl.lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from securevfl.privacy.accountant import Accountant, PrivacyLedger, calibrate
    from securevfl.privacy.events import (
        UNITS,
        PMFPairDpEvent,
        PrivacyReport,
        PureDpEvent,
        gaussian_event,
        laplace_event,
        sampled_gaussian_event,
    )
    from securevfl.privacy.mechanisms import (
        CALIBRATIONS,
        classic_gaussian_sigma,
        gaussian_sigma,
    )
    from securevfl.privacy.randomized_response import rr_event

_EXPORTS = {
    "Accountant": "securevfl.privacy.accountant",
    "PrivacyLedger": "securevfl.privacy.accountant",
    "calibrate": "securevfl.privacy.accountant",
    "UNITS": "securevfl.privacy.events",
    "PMFPairDpEvent": "securevfl.privacy.events",
    "PrivacyReport": "securevfl.privacy.events",
    "PureDpEvent": "securevfl.privacy.events",
    "gaussian_event": "securevfl.privacy.events",
    "laplace_event": "securevfl.privacy.events",
    "sampled_gaussian_event": "securevfl.privacy.events",
    "CALIBRATIONS": "securevfl.privacy.mechanisms",
    "classic_gaussian_sigma": "securevfl.privacy.mechanisms",
    "gaussian_sigma": "securevfl.privacy.mechanisms",
    "rr_event": "securevfl.privacy.randomized_response",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "CALIBRATIONS",
    "UNITS",
    "Accountant",
    "PMFPairDpEvent",
    "PrivacyLedger",
    "PrivacyReport",
    "PureDpEvent",
    "calibrate",
    "classic_gaussian_sigma",
    "gaussian_event",
    "gaussian_sigma",
    "laplace_event",
    "rr_event",
    "sampled_gaussian_event",
]
