"""Byte metering: the channel counts the serialized bytes of every payload that crosses a party
boundary, per sender and receiver, plus messages and rounds.

A *message* is one payload from one sender to one receiver. A *round* is one call of a
communication primitive (send, broadcast, gather): the messages of a round travel in parallel.
Counts are kept per phase (e.g. ``setup``, ``train``, ``eval``) so one-off costs such as shipping
keys can be reported apart from per-epoch traffic.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PhaseCounts:
    bytes_total: int = 0
    messages: int = 0
    rounds: int = 0
    sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    received: dict[int, int] = field(default_factory=lambda: defaultdict(int))


class Meter:
    """Counts what this process sent and received (all parties, in-process)."""

    def __init__(self) -> None:
        self.phase = "train"
        self.phases: dict[str, PhaseCounts] = defaultdict(PhaseCounts)

    @contextmanager
    def in_phase(self, name: str):
        """Attribute traffic inside the block to phase ``name``."""
        old, self.phase = self.phase, name
        try:
            yield
        finally:
            self.phase = old

    def message(self, *, src: int, dst: int, nbytes: int, count_bytes: bool = True) -> None:
        c = self.phases[self.phase]
        c.messages += 1
        if count_bytes:
            c.bytes_total += nbytes
        c.sent[src] += nbytes
        c.received[dst] += nbytes

    def round(self) -> None:
        self.phases[self.phase].rounds += 1

    def merge(self, other: dict[str, Any]) -> None:
        """Add counts reported by another process (networked runtime: each meters what it sent)."""
        for name, d in other.items():
            c = self.phases[name]
            c.bytes_total += d["bytes_total"]
            c.messages += d["messages"]
            c.rounds = max(c.rounds, d["rounds"])
            for k, v in d["sent"].items():
                c.sent[int(k)] += v
            for k, v in d["received"].items():
                c.received[int(k)] += v

    def export(self) -> dict[str, Any]:
        return {
            name: {
                "bytes_total": c.bytes_total,
                "messages": c.messages,
                "rounds": c.rounds,
                "sent": dict(c.sent),
                "received": dict(c.received),
            }
            for name, c in self.phases.items()
        }

    def summary(self, n_parties: int) -> dict[str, Any]:
        """The ``comm`` field of a result record."""
        total = PhaseCounts()
        for c in self.phases.values():
            total.bytes_total += c.bytes_total
            total.messages += c.messages
            total.rounds += c.rounds
            for k, v in c.sent.items():
                total.sent[k] += v
            for k, v in c.received.items():
                total.received[k] += v
        return {
            "bytes_total": total.bytes_total,
            "bytes_by_party": {
                str(k): {"sent": total.sent.get(k, 0), "received": total.received.get(k, 0)}
                for k in range(n_parties)
            },
            "messages": total.messages,
            "rounds": total.rounds,
            "by_phase": {
                name: {"bytes": c.bytes_total, "messages": c.messages, "rounds": c.rounds}
                for name, c in sorted(self.phases.items())
            },
        }
