"""Party views: everything one party held during a run, for attacks and privacy audits.

A :class:`ViewRecorder` attached to a runtime (``rt.view``) keeps every payload that party
received, exactly as the runtime delivered it (deserialized from the bytes that crossed the
channel: ciphertexts stay ciphertexts, masked values stay masked), tagged with the training
batch, phase and sender; plus the party's own data, its final local model and (at the label
holder) its output scores. Off by default: a runtime without a recorder only checks
``rt.view is None`` once per message.

The threat model is what a semi-honest party, or an eavesdropper on its links, holds; attacks
read a recorded :class:`View` and never another party's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Received:
    """One payload as delivered to the recording party."""

    seq: int  # delivery order
    batch: int | None  # id of the training batch in progress (see ``View.batches``), or None
    phase: str  # the meter's phase: setup, train, tuning, eval, ...
    sender: int
    payload: Any


@dataclass(frozen=True)
class Derived:
    """A value the recording party computed from what it received (e.g. the gradient it
    unmasked, or its zeroth-order gradient estimate), tagged like a delivery."""

    batch: int | None
    phase: str
    what: str
    value: Any


@dataclass(frozen=True)
class Batch:
    """A minibatch the recording party took part in: the rows it indexed (it knows them, since
    it indexes its own block with them), the trainer's step and the phase."""

    id: int
    step: int
    phase: str
    rows: np.ndarray


@dataclass
class View:
    """What party ``party`` held at the end of a run."""

    party: int
    received: list[Received] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    derived: list[Derived] = field(default_factory=list)  # what it computed from replies
    models: list[Any] = field(default_factory=list)  # local models kept by trainers, in order
    own: Any = None  # the party's PartyView (its columns; labels only at the label holder)
    info: Any = None  # PublicInfo of the run
    spec: Any = None  # RunSpec of the run
    outputs: np.ndarray | None = None  # the label holder's test scores

    @property
    def model(self) -> Any:
        """The last local model a trainer kept (the final one), or None."""
        return self.models[-1] if self.models else None

    def train_batches(self) -> list[Batch]:
        return [b for b in self.batches if b.phase == "train"]

    def messages_of(self, batch: Batch, *, sender: int | None = None) -> list[Received]:
        return [
            r
            for r in self.received
            if r.batch == batch.id
            and r.phase == batch.phase
            and (sender is None or r.sender == sender)
        ]

    def derived_of(self, batch: Batch, what: str) -> list[Any]:
        return [
            d.value
            for d in self.derived
            if d.batch == batch.id and d.phase == batch.phase and d.what == what
        ]

    def summary(self) -> dict[str, Any]:
        """Counts by phase and sender (for a result record)."""
        counts: dict[str, dict[str, int]] = {}
        for r in self.received:
            by = counts.setdefault(r.phase, {})
            by[str(r.sender)] = by.get(str(r.sender), 0) + 1
        return {
            "party": self.party,
            "received": counts,
            "batches": len(self.batches),
            "derived": {
                w: sum(d.what == w for d in self.derived) for w in {d.what for d in self.derived}
            },
            "model": type(self.model).__name__ if self.model is not None else None,
        }


class ViewRecorder:
    """Attached to a runtime as ``rt.view``: the runtime calls :meth:`received` on delivery."""

    def __init__(self, party: int) -> None:
        self.view = View(party=party)
        self._batch: int | None = None

    @property
    def party(self) -> int:
        return self.view.party

    def received(self, *, src: int, dst: int, phase: str, payload: Any) -> None:
        if dst != self.view.party or src == dst:
            return
        seq = len(self.view.received)
        self.view.received.append(Received(seq, self._batch, phase, src, payload))

    def mark_batch(self, step: int, rows: np.ndarray, phase: str) -> None:
        self._batch = len(self.view.batches)
        self.view.batches.append(Batch(self._batch, step, phase, np.asarray(rows).copy()))

    def keep_local(self, what: str, value: Any, phase: str) -> None:
        self.view.derived.append(Derived(self._batch, phase, what, value))

    def keep_model(self, model: Any) -> None:
        self.view.models.append(model)
