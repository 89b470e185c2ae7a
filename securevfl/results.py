"""What a method's ``fit`` returns, and the typed run statistics reports read.

Methods fill :class:`RunStats` with named fields; the experiment writes them to the record's
``stats`` object and reports read those names, never a method's private ``extra`` keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotation only: results sit below the privacy layer
    from securevfl.privacy.events import PrivacyReport


@dataclass
class RunStats:
    """Named statistics of one run; ``None`` / empty where a method does not measure them.

    Per-epoch lists have one entry per epoch run. ``phases_s`` / ``phases_bytes`` break a
    protocol's cost into named phases (e.g. encrypt, multiply, open) for the perf report.
    """

    epoch_s: list[float] = field(default_factory=list)  # wall seconds of each training epoch
    epoch_cpu_s: list[float] = field(default_factory=list)  # CPU seconds of each epoch
    epoch_loss: list[float] = field(default_factory=list)  # mean training loss per epoch
    epoch_accuracy: list[float] = field(default_factory=list)  # training accuracy per epoch
    step_ms: dict[str, float] = field(default_factory=dict)  # per-step cost by component
    phases_s: dict[str, float] = field(default_factory=dict)
    phases_bytes: dict[str, int] = field(default_factory=dict)
    setup_s: float | None = None  # one-off setup (key generation, field set-up)
    truncated: bool = False  # trained fewer epochs than asked (time cap); see epoch_s
    warnings: list[str] = field(default_factory=list)  # one line each, also printed
    # party -> peak resident memory (ru_maxrss) of the process that ran it, at the end of the run;
    # in-process every party shares one process (and one figure)
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    # party -> resident memory of that process when the run started (imports done): peak minus
    # this is what the run itself (data, model, protocol) took
    start_rss_bytes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record's ``stats`` object: only the fields that were filled."""
        return {k: v for k, v in asdict(self).items() if v not in (None, [], {}, False)}


@dataclass
class ModelPart:
    """One party's share of a trained model, as plain arrays (what ``--save`` writes).

    ``kind`` says how the parts score a row together: ``"linear"`` (each party sends
    ``T(X_k) @ w_k``; the label holder adds ``bias`` and applies ``meta["link"]``) or
    ``"splitnn"`` (each party sends ``bottom(X_k)``; the label holder aggregates and runs
    ``head``). ``meta`` holds the public scoring facts (layer shapes, link, input transform).
    """

    kind: str
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class FitResult:
    """What ``fit`` returns on each process; fields are ``None`` where not held."""

    test_scores: np.ndarray | None
    train_s: float
    privacy: PrivacyReport | None = None
    fingerprints: dict[int, str] = field(default_factory=dict)
    stats: RunStats = field(default_factory=RunStats)
    extra: dict[str, Any] = field(default_factory=dict)  # method-specific facts
    # party -> its trained part (only parties living here); None: the method exports no model,
    # and ``model_refusal`` says why in one line
    model: dict[int, ModelPart] | None = None
    model_refusal: str | None = None
