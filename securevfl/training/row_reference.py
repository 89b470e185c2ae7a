"""Delta coding of a client's uplink against the value the server last decoded for each row.

A client sends the embedding of a training row once per epoch. From the second visit of a row
on, the client sends the difference between its new embedding and the value the server decoded
at the previous visit, quantised at ``bits`` (the first visit: the embedding itself, at the
uplink's own width). Both ends keep that decoded value per row: the server because it decoded
it, the client because decoding is deterministic given the bytes it sent. Each difference is
taken against what the server really holds, so the quantisation error of one visit is carried
into the next difference instead of accumulating (error feedback). Between visits a row's
embedding moves by a fraction of its spread across rows, so the same bits buy a finer step.

Which rows have a reference depends only on the public round plan, so both ends agree on
whether a message is a difference without a flag on the wire.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from protocols.compress import decode

Encoder = Callable[[np.ndarray, int], bytes]


class RowReferences:
    """One party's copy of the per-row decoded values, for each client it sends or receives."""

    def __init__(self, n_rows: int, full_bits: int, delta_bits: int) -> None:
        self.n_rows, self.full_bits, self.delta_bits = n_rows, full_bits, delta_bits
        self.values: dict[int, np.ndarray] = {}
        self.seen: dict[int, np.ndarray] = {}

    def _is_delta(self, k: int, idx: np.ndarray) -> bool:
        return k in self.seen and bool(self.seen[k][idx].all())

    def send(self, k: int, idx: np.ndarray, rows: np.ndarray, enc: Encoder) -> bytes:
        """Client k's message for ``rows`` (its embeddings of rows ``idx``)."""
        if self._is_delta(k, idx):
            msg = enc(rows - self.values[k][idx], self.delta_bits)
        else:
            msg = enc(rows, self.full_bits)
        self.receive(k, idx, msg)  # what the server will hold for these rows
        return msg

    def receive(self, k: int, idx: np.ndarray, msg: bytes) -> np.ndarray:
        """The embeddings of rows ``idx`` that client k's message ``msg`` carries."""
        got = decode(msg)
        if self._is_delta(k, idx):
            got = self.values[k][idx] + got
        if k not in self.values:
            self.values[k] = np.zeros((self.n_rows, got.shape[1]))
            self.seen[k] = np.zeros(self.n_rows, dtype=bool)
        self.values[k][idx] = got
        self.seen[k][idx] = True
        return got
