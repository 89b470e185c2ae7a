"""The largest MPyC share message of a secure-products job, from its public shapes.

A party of the secure products (:mod:`protocols.mpyc_party`, or a networked securevfl party)
refuses any frame over a limit derived from this bound (:func:`job_frame_limit`), before the
bytes are buffered (:mod:`protocols.mpyc_net`). A share message carries at most:

- ``rns``: one row block (:data:`protocols.rns_blocks.BLOCK_ROWS` rows) of one party's matrix,
  each entry ``len(rns.PRIMES)`` residues packed as float32 (4 bytes each);
- ``vectorized`` / ``naive`` (MPyC's own arithmetic): the whole matrix (``n`` rows), each entry
  one element of the 57-bit field, at most 16 bytes in the wire format (a Python int's tag,
  length and bytes, or one 8-byte limb of an int array).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocols import rns
from protocols.rns_blocks import BLOCK_ROWS

__all__ = ["FIELD_ENTRY_BYTES", "MAX_FRAME", "SLACK_BYTES", "job_frame_limit", "share_bound"]

FIELD_ENTRY_BYTES = 16
SLACK_BYTES = 1 << 20  # handshake, seeds, the opened blocks, wire headers
MAX_FRAME = (4 << 30) - 1  # MPyC frames carry a 32-bit length


def share_bound(shapes: Mapping[Any, Sequence[int]]) -> int:
    """Bytes of the largest share message of a job whose parties hold ``shapes`` (rows, cols)."""
    if not shapes:
        return 0
    n = max(int(s[0]) for s in shapes.values())
    cols = max(int(s[1]) for s in shapes.values())
    rns_block = min(n, BLOCK_ROWS) * cols * 4 * len(rns.PRIMES)
    field = n * cols * FIELD_ENTRY_BYTES
    return max(rns_block, field) + 4096  # + the wire header of the message


def job_frame_limit(shapes: Mapping[Any, Sequence[int]]) -> int:
    """The frame limit of a secure-products job: twice :func:`share_bound` plus 1 MiB."""
    return min(2 * share_bound(shapes) + SLACK_BYTES, MAX_FRAME)
