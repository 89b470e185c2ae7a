"""Dense r-bit packing of non-negative integer vectors (what secure aggregation sends)."""

from __future__ import annotations

import numpy as np

MAX_BITS = 32
_WEIGHTS = np.ldexp(1.0, np.arange(MAX_BITS))  # 2^j, j < 32, exact in float64


class PackError(ValueError):
    """A packed payload does not have the length its values need."""


def packed_bytes(count: int, bits: int) -> int:
    """Bytes of ``count`` values packed at ``bits`` bits each."""
    return -(-count * bits // 8)


def pack_bits(values: np.ndarray, bits: int) -> bytes:
    """Pack non-negative integers < 2^bits into ceil(n*bits/8) bytes (little-endian bit order)."""
    wide = bits > 16
    v = np.ascontiguousarray(np.asarray(values).ravel(), dtype="<u4" if wide else "<u2")
    # the low ``bits`` bits of each little-endian word, then re-packed densely
    b = np.unpackbits(
        v.view(np.uint8).reshape(-1, 4 if wide else 2), axis=1, count=bits, bitorder="little"
    )
    return np.packbits(b, bitorder="little").tobytes()


def unpack_bits(data: bytes, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``count`` integers as uint64."""
    return unpack_sum([data], bits, count)


def unpack_sum(payloads: list[bytes], bits: int, count: int) -> np.ndarray:
    """The elementwise sum (uint64, not reduced) of several :func:`pack_bits` payloads.

    Bit planes are summed across payloads first and weighted by 2^j once: exact in float64,
    whose sums stay below len(payloads) * 2^bits <= 2^53.
    """
    need = packed_bytes(count, bits)
    for data in payloads:
        if len(data) != need:
            raise PackError(
                f"packed payload must be {need} bytes for {count} values of {bits} "
                f"bits, got {len(data)}"
            )
    if not payloads or count == 0:
        return np.zeros(count, dtype=np.uint64)
    if len(payloads) << bits > 1 << 53:  # float64 would round: one payload at a time
        return sum(
            (unpack_sum([d], bits, count) for d in payloads[1:]),
            unpack_sum(payloads[:1], bits, count),
        )
    raw = np.frombuffer(b"".join(payloads), dtype=np.uint8).reshape(len(payloads), need)
    planes = np.unpackbits(raw, axis=1, count=count * bits, bitorder="little")
    ones = planes.reshape(len(payloads), count, bits).sum(axis=0, dtype=np.uint32)
    return (ones @ _WEIGHTS[:bits]).astype(np.uint64)
