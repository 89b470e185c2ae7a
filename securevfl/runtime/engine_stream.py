"""A party's secure-product input pulled from its Dask engine block by block (fm-vfl, issue 44).

fm-vfl's cross-party product M_aᵀM_b is a sum over the training rows, so the MPC may read
them in any order all parties share. A party whose table stays on its engine
(:class:`~securevfl.engine.EngineRows`) hands the product its rows in TABLE order (the
training rows of block 1, then of block 2, ...), each block selected, mapped (fm-vfl's row
bounds) and fixed-point encoded on a worker and brought into the party process only when the
protocol reaches it, :data:`PREFETCH` blocks ahead; the label holder puts its label column in
front of each block in the same order. So the party process holds a few blocks of encoded rows,
never the n x d input (at 30M rows, d = 21 an int64 copy is 4.7 GiB). The opened product is
exact integer arithmetic, so it does not depend on the order: the same integers as the rows in
the view's order (the in-memory path).

Every party must read the rows in the same order; :func:`row_order` is the tag the parties
compare before the product (fm-vfl refuses a run whose data parties disagree).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.engine import EngineRows, wait_for
from securevfl.errors import ProtocolError
from securevfl.runtime.secure_products import StreamedInput

PREFETCH = 2  # blocks computed on the workers ahead of the one the protocol reads (and
# before it starts: the first blocks are on their way while the parties meet for the product)


def row_order(X: Any) -> str:
    """How a party's product input orders its rows: ``table`` (streamed from its engine) or
    ``view`` (the view's own order, an array in the process)."""
    return "table" if isinstance(X, EngineRows) else "view"


def _block_and_sums(
    block: np.ndarray, keep: np.ndarray, frac_bits: int, front: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The kept rows of one block, fixed-point encoded, with their own sums from the same
    read (on a worker): Xᵀ X and Xᵀ front (None without a front column)."""
    from protocols.shamir_products import encode_fixed  # noqa: PLC0415

    X = block[keep]
    return encode_fixed(X, frac_bits), X.T @ X, None if front is None else X.T @ front


class EngineInput(StreamedInput):
    """``rows``' training rows as the product's encoded input, streamed in table order.

    ``front``: a column in the view's order (the label holder's label vector), put in front of
    each block's columns. Read it with consecutive slices ``M[s:e]`` (the protocol's row
    blocks) or whole (:meth:`whole`, the in-process runtime's party processes)."""

    def __init__(
        self, rows: EngineRows, frac_bits: int, timeout: float, front: np.ndarray | None = None
    ) -> None:
        from dask import delayed  # noqa: PLC0415

        table, n = rows.table, int(rows.table.shape[0])
        if table.numblocks[1] > 1:
            table = table.rechunk({1: -1})
        mask = np.zeros(n, dtype=bool)
        mask[rows.rows] = True
        starts = np.cumsum((0, *table.chunks[0]))
        self.engine, self.timeout, self.frac_bits = rows.engine, float(timeout), frac_bits
        self._front = None
        if front is not None:  # the view-ordered column at the table's positions, then kept
            full = np.zeros(n, dtype=np.float64)
            full[rows.rows] = front
            self._front = full[mask]
        kept = np.cumsum(
            [0, *(int(mask[starts[i] : starts[i + 1]].sum()) for i in range(len(starts) - 1))]
        )
        self._tasks = [
            (b, mask[starts[i] : starts[i + 1]], int(kept[i]), int(kept[i + 1]))
            for i, b in enumerate(table.to_delayed().ravel())
        ]
        self._delayed = delayed
        d = int(table.shape[1])
        self.gram = np.zeros((d, d))  # Σ over the blocks read so far of their Xᵀ X
        self.xtv = None if front is None else np.zeros(d)  # and of Xᵀ front
        self.shape = (len(rows.rows), int(table.shape[1]) + (front is not None))
        self._futures: dict[int, Any] = {}
        self._next_block = 0  # the next block to bring in
        self._pulled = 0  # rows brought in so far
        self._buf = np.zeros((0, self.shape[1]), dtype=np.int64)
        self._at = 0  # the stream row of _buf[0]
        for i in range(PREFETCH + 1):  # the workers start now, while the parties meet
            self._submit(i)

    def _submit(self, i: int) -> None:
        if i < len(self._tasks) and i not in self._futures:
            block, keep, a, b = self._tasks[i]
            front = None if self._front is None else self._front[a:b]
            task = self._delayed(_block_and_sums)(block, keep, self.frac_bits, front)
            self._futures[i] = self.engine.client.compute(task)

    def _pull(self) -> np.ndarray:
        """The next block's encoded rows (waits at most the timeout), its next ones started."""
        i = self._next_block
        for j in range(i, i + PREFETCH + 1):
            self._submit(j)
        what = f"block {i} of the product's input"
        got, gram, xtv = wait_for(self._futures.pop(i), self.timeout, what)
        self._next_block += 1
        self.gram += gram
        if xtv is not None:
            self.xtv += xtv
        start, self._pulled = self._pulled, self._pulled + len(got)
        if self._front is None:
            return got
        v = self._front[start : self._pulled]
        from protocols.shamir_products import encode_fixed  # noqa: PLC0415

        return np.hstack([encode_fixed(v, self.frac_bits)[:, None], got])

    def __getitem__(self, rows: slice) -> np.ndarray:
        s, e = rows.start or 0, min(self.shape[0], rows.stop)
        if s != self._at:
            raise ProtocolError(
                f"the streamed input is read in order: rows from {self._at}, got {s}"
            )
        parts = [self._buf]
        have = len(self._buf)
        while (have < e - s or e == self.shape[0]) and self._next_block < len(self._tasks):
            parts.append(self._pull())  # to the last block at the end: its sums are needed
            have += len(parts[-1])
        buf = parts[0] if len(parts) == 1 else np.concatenate(parts)
        out, self._buf, self._at = buf[: e - s], buf[e - s :], e
        return out

    def whole(self) -> np.ndarray:
        """Every row at once (from the start; the stream is spent after)."""
        return self[0 : self.shape[0]]

    def sums(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(Xᵀ X, Xᵀ front) of the training rows (float64, summed block by block in table
        order), once every block has been read: the party's own coefficients come from the
        same pass as its product input."""
        if self._next_block < len(self._tasks) or self._futures:
            raise ProtocolError(
                f"the product's input was read to block {self._next_block} of "
                f"{len(self._tasks)}: its sums are not complete"
            )
        return self.gram, self.xtv
