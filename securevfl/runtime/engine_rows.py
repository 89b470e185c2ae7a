"""A minibatch's rows brought into the party process from its table on the Dask engine.

HE-VFL encodes each minibatch's rows into plaintexts (CKKS or Paillier), so a party whose
table stays on its engine (:class:`~securevfl.engine.EngineRows`) needs those rows in its
process; a minibatch's products (X w, Xᵀ g) are then cheaper on the rows alone than as a
pass over every block that sends back an n-vector. :class:`RowGather` takes the rows on the
workers: a task per block that holds any of them computes that block and returns only those
rows, which the party assembles in the minibatch's order.

The minibatch order is public (the shared seed), so a party may :meth:`RowGather.plan` an
epoch's minibatches: a gather then brings the asked one and the planned ones after it, up to
:data:`GATHER_ROWS` rows and a quarter of the view, in one pass over the blocks. So an epoch
costs about n_train / GATHER_ROWS passes instead of one per minibatch, and the party process
holds at most that many rows of its table (never the whole of it), as a worker holds a block.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

# rows of a table on the engine one gather brings into the party process at most (a
# minibatch and the planned ones after it): 10 MiB of float64 at d = 40, a quarter of a block
GATHER_ROWS = 32_768


def small(batch: int, view: int) -> bool:
    """Whether a minibatch of ``batch`` of a view's ``view`` rows is gathered for its products:
    at most :data:`GATHER_ROWS` rows and a quarter of the view (a larger one is a pass)."""
    return batch <= min(GATHER_ROWS, view // 4)


class RowGather:
    """Minibatches' rows of a party's tables on its engine (``client``: its cluster)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        # per table (its Dask name): the planned minibatches' table positions, and where each
        # one is in the plan by its key
        self._plans: dict[str, tuple[list[np.ndarray], dict[bytes, int]]] = {}
        self._held: dict[bytes, np.ndarray] = {}  # the last gather's rows, by key

    def plan(self, X: Any, batches: list[np.ndarray]) -> None:
        """The view ``X``'s minibatches (indices of its rows) asked for next, in order."""
        wave = [np.asarray(X.rows[i], dtype=np.int64) for i in batches]
        self._plans[X.table.name] = (wave, {_key(X.table, p): j for j, p in enumerate(wave)})

    def rows(self, X: Any, idx: np.ndarray) -> np.ndarray:
        """X[idx] (read-only), in the minibatch's order: held from the last gather, else
        gathered with the planned minibatches after it."""
        pos = np.asarray(X.rows[idx], dtype=np.int64)
        key = _key(X.table, pos)
        hit = self._held.get(key)
        if hit is None:
            wave = self._wave(X, pos, key)
            self._held = {}  # the last gather's rows go before the next come in
            got = self._gather(X.table, wave)
            self._held = {_key(X.table, p): r for p, r in zip(wave, got, strict=True)}
            hit = self._held[key]
        return hit

    def clear(self) -> None:
        self._plans.clear()
        self._held = {}

    def _wave(self, X: Any, pos: np.ndarray, key: bytes) -> list[np.ndarray]:
        """``pos`` and the planned minibatches after it that fit one gather."""
        planned, where = self._plans.get(X.table.name, ([], {}))
        first = where.get(key)
        wave = [pos]
        if first is None:  # not planned: this minibatch alone
            return wave
        budget, taken = max(len(pos), min(GATHER_ROWS, len(X) // 4)), len(pos)
        for p in planned[first + 1 :]:
            if taken + len(p) > budget:
                break
            wave.append(p)
            taken += len(p)
        return wave

    def _gather(self, table: Any, wave: list[np.ndarray]) -> list[np.ndarray]:
        """The table's rows at each array of positions in ``wave``, from one pass over the
        blocks that hold any of them."""
        from dask import delayed

        if table.numblocks[1] > 1:  # one block of rows, every column
            table = table.rechunk({1: -1})
        pos = np.concatenate(wave)
        order = np.argsort(pos, kind="stable")
        ordered = pos[order]
        starts = np.cumsum((0, *table.chunks[0]))
        cut = np.searchsorted(ordered, starts)  # block i holds ordered[cut[i] : cut[i + 1]]
        blocks = table.to_delayed().ravel()
        hit = [i for i in range(len(blocks)) if cut[i + 1] > cut[i]]
        tasks = [delayed(_take)(blocks[i], ordered[cut[i] : cut[i + 1]] - starts[i]) for i in hit]
        out = np.empty((len(pos), table.shape[1]), dtype=np.float64)
        for i, got in zip(hit, self.client.compute(tasks, sync=True), strict=True):
            out[order[cut[i] : cut[i + 1]]] = got
        out.flags.writeable = False  # held for the minibatch's later products
        return np.split(out, np.cumsum([len(p) for p in wave])[:-1])


def _take(block: np.ndarray, local: np.ndarray) -> np.ndarray:
    """The block's rows at ``local`` (on a worker: only these travel)."""
    return np.ascontiguousarray(block[local])


def _key(table: Any, pos: np.ndarray) -> bytes:
    """Rows by their table (its Dask name) and positions: a 16-byte digest."""
    name = hashlib.blake2b(table.name.encode(), digest_size=16).digest()
    return hashlib.blake2b(pos.tobytes(), digest_size=16, key=name).digest()
