"""Lossless entropy coding of quantiser codes: an adaptive range coder (arithmetic coding).

The quantiser of ``protocols.compress`` packs every code at ``bits`` bits, but the codes of one
message are far from uniform (clipped embeddings are bell-shaped; a 2-bit reply of loss
differences puts most rows on the two middle levels), so a message carries fewer bits of
information than it spends. This stage codes the ``count`` codes of one message, each in
[0, 2^bits), into fewer bytes and back, exactly.

Model: adaptive frequency counts, one table per message, which both ends start from the public
alphabet size alone (every count 1) and update identically after each symbol (+``INCREMENT``;
halved when the total would pass ``MAX_TOTAL``). Nothing about the model crosses the channel
and messages do not depend on each other (a lost or reordered message loses nothing else).

Coder: the interval [low, low + range) is kept at 32 bits of precision and rescaled a byte at a
time; ``low`` is a Python integer that simply grows, so a carry propagates by integer addition
(no carry cache). The coder ends on the number in the final interval with the most trailing
zero bits and drops trailing zero bytes, which the decoder reads back as zeros.
"""

from __future__ import annotations

import numpy as np

MAX_CODED_BITS = 8  # alphabets up to 256 symbols (linear search per symbol)
INCREMENT = 24  # count added per symbol seen: fast adaptation on messages of a few hundred codes
MAX_TOTAL = 1 << 16  # the total stays below 2^16, so range // total keeps >= 8 bits
_TOP = 1 << 32
_BOTTOM = 1 << 24


class EntropyError(ValueError):
    """An alphabet the coder does not take, or a payload it cannot decode."""


class _Model:
    """Adaptive counts over ``size`` symbols (the same sequence of states at both ends)."""

    def __init__(self, size: int) -> None:
        self.freq = [1] * size
        self.total = size

    def cum(self, s: int) -> int:
        return sum(self.freq[:s])

    def find(self, v: int) -> tuple[int, int]:
        """The symbol whose cumulative interval holds ``v``, and its cumulative start."""
        c = 0
        for s, f in enumerate(self.freq):
            if v < c + f:
                return s, c
            c += f
        return len(self.freq) - 1, c - self.freq[-1]

    def update(self, s: int) -> None:
        self.freq[s] += INCREMENT
        self.total += INCREMENT
        if self.total > MAX_TOTAL - INCREMENT:
            self.freq = [(f + 1) // 2 for f in self.freq]
            self.total = sum(self.freq)


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or int(bits) != bits or not 1 <= bits <= MAX_CODED_BITS:
        raise EntropyError(f"bits must be an integer in 1..{MAX_CODED_BITS}, got {bits!r}")
    return int(bits)


def encode_codes(codes: np.ndarray, bits: int) -> bytes:
    """Code the integers ``codes`` (each in [0, 2^bits)) losslessly; the length is not stored
    (the receiver knows it from the message's shape)."""
    bits = _check_bits(bits)
    syms = np.asarray(codes).ravel()
    if syms.size and (syms.min() < 0 or syms.max() >= 1 << bits):
        raise EntropyError(f"codes must lie in [0, {1 << bits}), got [{syms.min()}, {syms.max()}]")
    model = _Model(1 << bits)
    low, rng, shifts = 0, _TOP, 0
    for s in syms.tolist():
        r = rng // model.total
        low += r * model.cum(s)
        rng = r * model.freq[s]
        while rng < _BOTTOM:
            low <<= 8
            rng <<= 8
            shifts += 1
        model.update(s)
    # the number in [low, low + rng) with the most trailing zero bits
    width = 32 + 8 * shifts
    for k in range(width, -1, -1):
        x = -(-low >> k) << k
        if x < low + rng:
            break
    return x.to_bytes(width // 8, "big").rstrip(b"\0")  # x < low + rng <= 2^width


def decode_codes(data: bytes, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`encode_codes`: ``count`` codes as an int64 array."""
    bits = _check_bits(bits)
    if count < 0:
        raise EntropyError(f"count must be >= 0, got {count}")
    model = _Model(1 << bits)
    buf = bytes(data)
    pos = 4
    code = int.from_bytes(buf[:4].ljust(4, b"\0"), "big")
    rng = _TOP
    out = np.empty(count, dtype=np.int64)
    for i in range(count):
        r = rng // model.total
        v = code // r
        if v >= model.total:
            raise EntropyError("coded payload is malformed (value outside the model's range)")
        s, c = model.find(v)
        code -= r * c
        rng = r * model.freq[s]
        while rng < _BOTTOM:
            code = (code << 8) | (buf[pos] if pos < len(buf) else 0)
            pos += 1
            rng <<= 8
        out[i] = s
        model.update(s)
    if pos < len(buf):
        raise EntropyError(f"coded payload has {len(buf) - pos} bytes past its {count} codes")
    return out
