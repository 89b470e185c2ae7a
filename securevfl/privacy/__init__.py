"""Mechanisms, privacy events and accountants."""

from securevfl.privacy.events import (
    GaussianEvent,
    LaplaceEvent,
    PrivacyReport,
    PureDPEvent,
)
from securevfl.privacy.mechanisms import (
    classic_gaussian_epsilon,
    classic_gaussian_sigma,
    clip_rows,
    gaussian_noise,
    laplace_noise,
)

__all__ = [
    "GaussianEvent",
    "LaplaceEvent",
    "PrivacyReport",
    "PureDPEvent",
    "classic_gaussian_epsilon",
    "classic_gaussian_sigma",
    "clip_rows",
    "gaussian_noise",
    "laplace_noise",
]
