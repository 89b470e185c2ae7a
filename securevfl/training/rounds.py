"""The public round plan of a split-NN run with a server: which rows, which clients, per round.

*sync*: every client takes part in every round (one minibatch of the shared order per round).
*async* (VAFL / VFL-CZOFO): one client, drawn uniformly by the run's shared generator, is active
per round; the server completes the batch from its table of the other clients' latest embeddings.
An entry of the table is *stale* by the number of rounds since its client sent it; with a bound
S > 0, a client whose entries for the round's rows are older than S rounds refreshes them in that
round (sends fresh embeddings, gets nothing back), so every embedding the server uses is at most S
rounds old. The plan depends only on public sizes and the shared seed, so every party computes it
and the accountant can count each client's releases before training starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from securevfl.errors import ConfigError
from securevfl.rng import make_rng
from securevfl.training.batching import minibatches

SCHEDULES = ("sync", "async")


@dataclass(frozen=True)
class Round:
    """One round: the rows, the clients that get a reply, the clients that only refresh."""

    idx: np.ndarray
    active: tuple[int, ...]
    refresh: tuple[int, ...] = ()
    staleness: int = 0  # the oldest table entry the server uses this round (rounds)

    @property
    def senders(self) -> tuple[int, ...]:
        return tuple(sorted(self.active + self.refresh))


def plan_rounds(
    n_train: int,
    batch_size: int,
    epochs: int,
    clients: int,
    *,
    schedule: str,
    seed: int,
    max_staleness: int = 0,
) -> list[Round]:
    """Every round of the run, in order (``max_staleness`` 0: unbounded)."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {list(SCHEDULES)}, got {schedule!r}")
    if max_staleness < 0:
        raise ConfigError(f"max_staleness must be >= 0, got {max_staleness}")
    everyone = tuple(range(clients))
    pick = make_rng(seed, purpose="rounds/active")
    stamp = np.zeros((clients, n_train), dtype=np.int64)  # round 0: the table's first fill
    out: list[Round] = []
    t = 0
    for epoch in range(epochs):
        for idx in minibatches(n_train, batch_size, seed=seed, epoch=epoch):
            t += 1
            if schedule == "sync":
                out.append(Round(idx, everyone))
                continue
            k = int(pick.integers(clients))
            age = {j: int(t - stamp[j, idx].min()) for j in everyone if j != k}
            refresh = tuple(j for j, a in age.items() if max_staleness and a > max_staleness)
            used = max((a for j, a in age.items() if j not in refresh), default=0)
            for j in (k, *refresh):
                stamp[j, idx] = t
            out.append(Round(idx, (k,), refresh, used))
    return out


def releases_per_client(plan: list[Round], clients: int) -> list[int]:
    """Rows each client sends in training rounds (the table's first fill not included)."""
    rows = [0] * clients
    for r in plan:
        for k in r.senders:
            rows[k] += len(r.idx)
    return rows


def curve_marks(n_rounds: int, points: int) -> set[int]:
    """The rounds after which the accuracy curve is measured: ``points`` evenly spread."""
    return {int(round(n_rounds * (i + 1) / points)) for i in range(points)} if points > 0 else set()
