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

from securevfl.errors import ProtocolError


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


_PHASE_KEYS = {"bytes_total", "messages", "rounds", "sent", "received"}


def check_peer_report(
    report: Any, *, peer: int, own: Meter, n_parties: int, frame_limit: int
) -> None:
    """Refuse a peer's meter report (what it says it sent) that cannot be true of this run.

    A networked process meters only the messages it sends, so a peer's report must name only
    itself as sender, bytes that add up, and counts this run allows: no more rounds per phase
    than this party took part in (every party calls every primitive), no more messages than one
    per round to each other party (or, where the secure products send many per round, twice
    what this party sent there), no message over the frame limit. A forged report (a record
    of 39,490,038,560 bytes in 81,000,080 messages) is a ProtocolError naming the peer.
    """

    def bad(why: str) -> ProtocolError:
        return ProtocolError(f"party {peer} sent a meter report that cannot be true: {why}")

    if type(report) is not dict or len(report) > 64:
        raise bad("not a dict of at most 64 phases")
    for name, d in report.items():
        if type(name) is not str or type(d) is not dict or set(d) != _PHASE_KEYS:
            raise bad(f"phase {str(name)[:40]!r} is not a dict of {sorted(_PHASE_KEYS)}")
        counts = [d["bytes_total"], d["messages"], d["rounds"]]
        sent, received = d["sent"], d["received"]
        if type(sent) is not dict or type(received) is not dict:
            raise bad(f"phase {name!r}: sent/received are not dicts")
        counts += [*sent, *sent.values(), *received, *received.values()]
        if any(type(v) is not int or v < 0 for v in counts):
            raise bad(f"phase {name!r}: a count or party that is not a non-negative int")
        if set(sent) - {peer}:
            raise bad(f"phase {name!r}: bytes sent by other parties {sorted(sent)}")
        dsts = set(received)
        if dsts - set(range(n_parties)) or peer in dsts:
            raise bad(f"phase {name!r}: receivers {sorted(dsts)} outside this run")
        if sum(received.values()) != sum(sent.values()) or d["bytes_total"] > sum(sent.values()):
            raise bad(f"phase {name!r}: bytes sent and received do not add up")
        mine = own.phases.get(name)
        rounds = mine.rounds if mine is not None else 0
        if d["rounds"] > rounds:
            raise bad(f"phase {name!r}: {d['rounds']} rounds, this party took part in {rounds}")
        cap = max(rounds * (n_parties - 1), 2 * (mine.messages if mine is not None else 0))
        if d["messages"] > cap:
            raise bad(f"phase {name!r}: {d['messages']} messages in {rounds} rounds (max {cap})")
        if sum(sent.values()) > d["messages"] * frame_limit:
            raise bad(
                f"phase {name!r}: {sum(sent.values())} bytes in {d['messages']} messages of at "
                f"most {frame_limit} bytes"
            )


def merge_reports(rt: Any, reports: dict[int, Any], *, frame_limit: int) -> Meter:
    """The run's meter from every process's report (``rt.collect(rt.meter.export(), ...)``):
    this process's own as it is, each peer's checked by :func:`check_peer_report` first."""
    merged, seen = Meter(), set()
    for k, report in sorted(reports.items()):
        if id(report) in seen:  # in-process: one report stands for every party
            continue
        seen.add(id(report))
        if not rt.here(k):
            check_peer_report(
                report, peer=k, own=rt.meter, n_parties=rt.n_parties, frame_limit=frame_limit
            )
        merged.merge(report)
    return merged
