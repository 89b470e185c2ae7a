"""Mechanisms, privacy events and the one accountant interface."""

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
from securevfl.privacy.mechanisms import CALIBRATIONS, classic_gaussian_sigma, gaussian_sigma
from securevfl.privacy.randomized_response import rr_event

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
