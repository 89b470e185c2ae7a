"""Lossy compressors for split-NN messages, serialized to the exact bytes that are sent.

Two compressors, composable: the uniform ``bits``-bit quantiser with the message's min/max
(``bits`` = 32: float32, uncompressed) and top-k sparsification (keep the ``k`` entries of largest
magnitude, indices packed at ceil(log2 n) bits). A message is one self-describing ``bytes``:

    kind u8 | bits u8 | ndim u8 | shape u32 x ndim | body
    kind 0 (raw):       float32 x n
    kind 1 (uniform):   lo f32 | hi f32 | codes packed at ``bits`` bits (protocols.bitpack)
    kind 2 (top-k):     k u32 | indices packed at ceil(log2 n) bits | a kind-0/1 body of k values
    kind 3 (coded):     lo f32 | hi f32 | the kind-1 codes entropy-coded (protocols.entropy)

Quantiser error: nearest rounding to 2^bits - 1 equal steps of [lo, hi], so each entry moves by
at most (hi - lo) / (2 (2^bits - 1)). Top-k: the dropped entries are the smallest in magnitude.

``entropy=True`` (bits <= 8, no top-k) adds a lossless stage: the codes are range-coded with an
adaptive model both ends derive from ``bits`` alone (``protocols.entropy``); the sender keeps the
kind-1 body instead when coding would not make it shorter, so the message is never longer and
decodes to exactly the same values. Its size then depends on the values (``encoded_size`` gives
the kind-0/1/2 size, an upper bound).

Two choices change only how the sender picks the codes (the format and the decoder are the same):

* ``rounding="stochastic"``: round up with probability equal to the fractional position between
  the two neighbouring levels, so E[decode(encode(x))] = x for x in [lo, hi] (unbiased; each
  entry moves by less than one step). A receiver's linear use of the values (the ZO estimate is
  linear in the loss differences) then stays unbiased.
* ``clip=True``: [lo, hi] = mean ∓ c_b · std instead of min/max, with c_b the half-range of the
  MSE-optimal uniform quantiser of a Gaussian (Max, 1960): at 2-4 bits min/max spends most levels
  on a few outliers. Entries outside are clamped (their error is no longer bounded by a step).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from protocols.bitpack import pack_bits, packed_bytes, unpack_bits
from protocols.entropy import MAX_CODED_BITS, EntropyError, decode_codes, encode_codes

RAW, UNIFORM, TOPK, CODED = 0, 1, 2, 3
FLOAT_BITS = 32
_HEAD = struct.Struct("<BBB")
_RANGE = struct.Struct("<ff")  # lo rounded down, hi up: the float32 range still covers x
_COUNT = struct.Struct("<I")
ROUNDINGS = ("nearest", "stochastic")
# half-range / std of the MSE-optimal uniform quantiser of N(0, 1) with 2^b levels (Max 1960):
# (2^b - 1) / 2 times its optimal step; wider than min/max of a message is never used
CLIP_SIGMAS = {1: 0.798, 2: 1.494, 3: 2.051, 4: 2.514, 5: 2.916, 6: 3.279, 7: 3.613, 8: 3.927}


class CompressError(ValueError):
    """A compressor parameter or a received payload is invalid."""


def check_bits(bits: int) -> int:
    """Quantiser width: 1..16 bits, or 32 (float32, no quantisation)."""
    if isinstance(bits, bool) or int(bits) != bits or not (1 <= bits <= 16 or bits == FLOAT_BITS):
        raise CompressError(f"bits must be an integer in 1..16 or 32, got {bits!r}")
    return int(bits)


def index_bits(n: int) -> int:
    """Bits of one top-k index into ``n`` entries."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1


def max_error(lo: float, hi: float, bits: int) -> float:
    """The largest |x - decode(encode(x))| of the uniform quantiser on [lo, hi] (bits = 32:
    float32 rounding, half an ulp of the largest magnitude)."""
    if bits == FLOAT_BITS:
        return max(abs(lo), abs(hi)) * 2.0**-24
    return (hi - lo) / (2 * ((1 << bits) - 1))


def quant_range(x: np.ndarray, bits: int, clip: bool = False) -> tuple[float, float]:
    """The [lo, hi] the quantiser spans for the flat vector ``x`` (see the module docstring),
    as the float32 pair that is sent (8 bytes, not 16: a tenth of a 2-bit reply)."""
    if not x.size:
        return 0.0, 0.0
    lo, hi = float(x.min()), float(x.max())
    if clip and bits in CLIP_SIGMAS:
        m, c = float(x.mean()), CLIP_SIGMAS[bits] * float(x.std())
        lo, hi = max(lo, m - c), min(hi, m + c)
    lo32, hi32 = np.float32(lo), np.float32(hi)
    lo32 = np.nextafter(lo32, np.float32(-np.inf)) if float(lo32) > lo else lo32
    hi32 = np.nextafter(hi32, np.float32(np.inf)) if float(hi32) < hi else hi32
    return float(lo32), float(hi32)


def _codes(
    x: np.ndarray, bits: int, rounding: str, clip: bool, rng: np.random.Generator | None
) -> tuple[bytes, np.ndarray]:
    """The packed range and the quantiser codes of the flat vector ``x``."""
    lo, hi = quant_range(x, bits, clip)
    levels = (1 << bits) - 1
    span = hi - lo
    if span == 0:
        codes = np.zeros(x.size)
    else:
        pos = np.clip((x - lo) / span * levels, 0, levels)
        if rounding == "stochastic":
            # floor, then up with the fractional part's probability: unbiased within [lo, hi]
            codes = np.floor(pos) + (rng.random(x.size) < pos - np.floor(pos))
        else:
            codes = np.rint(pos)
    return _RANGE.pack(lo, hi), np.clip(codes, 0, levels).astype(np.int64)


def _values(
    x: np.ndarray,
    bits: int,
    rounding: str = "nearest",
    clip: bool = False,
    rng: np.random.Generator | None = None,
) -> bytes:
    """A kind-0 or kind-1 body for the flat vector ``x``."""
    if bits == FLOAT_BITS:
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    head, codes = _codes(x, bits, rounding, clip, rng)
    return head + pack_bits(codes, bits)


def _read_values(body: memoryview, bits: int, count: int) -> tuple[np.ndarray, int]:
    """Decode ``count`` values from the front of ``body``; return them and the bytes used."""
    if bits == FLOAT_BITS:
        need = 4 * count
        if len(body) < need:
            raise CompressError(f"float32 body must hold {need} bytes, got {len(body)}")
        return np.frombuffer(body[:need], dtype="<f4").astype(np.float64), need
    need = _RANGE.size + packed_bytes(count, bits)
    if len(body) < need:
        raise CompressError(f"quantised body must hold {need} bytes, got {len(body)}")
    lo, hi = _RANGE.unpack_from(body)
    codes = unpack_bits(bytes(body[_RANGE.size : need]), bits, count).astype(np.float64)
    return lo + codes * ((hi - lo) / ((1 << bits) - 1)), need


def encode(
    x: np.ndarray,
    *,
    bits: int = FLOAT_BITS,
    topk: int | None = None,
    rounding: str = "nearest",
    clip: bool = False,
    rng: np.random.Generator | None = None,
    entropy: bool = False,
) -> bytes:
    """Compress ``x`` (any shape) to the bytes that are sent.

    ``topk``: keep that many entries of largest magnitude (None: all, no index overhead);
    ``rounding``/``clip``: see the module docstring (``rng`` draws the stochastic rounding);
    ``entropy``: range-code the quantiser's codes where that is shorter (bits <= 8, no top-k).
    """
    bits = check_bits(bits)
    if rounding not in ROUNDINGS or (rounding == "stochastic" and rng is None):
        raise CompressError(f"rounding must be one of {list(ROUNDINGS)} (stochastic: with an rng)")
    how = {"rounding": rounding, "clip": clip, "rng": rng}
    a = np.asarray(x, dtype=np.float64)
    flat = a.ravel()
    if a.ndim > 255 or any(s >= 1 << 32 for s in a.shape):
        raise CompressError(f"shape must have < 256 axes of < 2^32 entries, got {a.shape}")
    shape = struct.pack(f"<{a.ndim}I", *a.shape)
    if topk is not None and topk < flat.size:
        if int(topk) != topk or topk < 0:
            raise CompressError(f"topk must be an integer >= 0, got {topk!r}")
        keep = np.sort(np.argpartition(-np.abs(flat), int(topk) - 1)[: int(topk)]) if topk else []
        keep = np.asarray(keep, dtype=np.int64)
        return (
            _HEAD.pack(TOPK, bits, a.ndim)
            + shape
            + _COUNT.pack(len(keep))
            + pack_bits(keep, index_bits(flat.size))
            + _values(flat[keep], bits, **how)
        )
    if entropy and bits <= MAX_CODED_BITS:
        head, codes = _codes(flat, bits, rounding, clip, rng)
        coded = encode_codes(codes, bits)
        if len(coded) < packed_bytes(codes.size, bits):
            return _HEAD.pack(CODED, bits, a.ndim) + shape + head + coded
        return _HEAD.pack(UNIFORM, bits, a.ndim) + shape + head + pack_bits(codes, bits)
    kind = RAW if bits == FLOAT_BITS else UNIFORM
    return _HEAD.pack(kind, bits, a.ndim) + shape + _values(flat, bits, **how)


def _header(view: memoryview) -> tuple[int, int, tuple[int, ...]]:
    """A message's kind, bits and shape, read from its header alone."""
    if len(view) < _HEAD.size:
        raise CompressError(
            f"a compressed message must hold >= {_HEAD.size} bytes, got {len(view)}"
        )
    kind, bits, ndim = _HEAD.unpack_from(view)
    check_bits(bits)
    if kind not in (RAW, UNIFORM, TOPK, CODED) or len(view) < _HEAD.size + 4 * ndim:
        raise CompressError(f"message kind must be 0..3 with a full shape, got kind {kind}")
    return kind, bits, struct.unpack_from(f"<{ndim}I", view, _HEAD.size)


def message_shape(data: bytes) -> tuple[int, ...]:
    """The shape a message decodes to, read from its header without decoding it (a receiver
    checks it against the shape it expects before :func:`decode` allocates anything)."""
    return _header(memoryview(data))[2]


def decode(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode` (up to the compression error): a float64 array."""
    view = memoryview(data)
    kind, bits, shape = _header(view)
    off = _HEAD.size + 4 * len(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if kind == CODED:
        if bits > MAX_CODED_BITS or len(view) < off + _RANGE.size:
            raise CompressError(f"a coded message must have bits <= {MAX_CODED_BITS} and a range")
        lo, hi = _RANGE.unpack_from(view, off)
        try:
            codes = decode_codes(bytes(view[off + _RANGE.size :]), bits, n)
        except EntropyError as e:
            raise CompressError(str(e)) from None
        return (lo + codes * ((hi - lo) / ((1 << bits) - 1))).reshape(shape)
    if kind != TOPK:
        vals, used = _read_values(view[off:], bits, n)
        if off + used != len(view):
            raise CompressError(f"message must be {off + used} bytes, got {len(view)}")
        return vals.reshape(shape)
    (k,) = _COUNT.unpack_from(view, off)
    off += _COUNT.size
    ib = packed_bytes(k, index_bits(n))
    idx = unpack_bits(bytes(view[off : off + ib]), index_bits(n), k).astype(np.int64)
    vals, used = _read_values(view[off + ib :], bits, k)
    if off + ib + used != len(view) or (k and idx.max() >= n):
        raise CompressError(f"top-k message of {k} of {n} entries is malformed")
    out = np.zeros(n)
    out[idx] = vals
    return out.reshape(shape)


def encoded_size(shape: tuple[int, ...], *, bits: int = FLOAT_BITS, topk: int | None = None) -> int:
    """Bytes :func:`encode` produces for an array of ``shape`` (independent of its values)."""
    n = int(np.prod(shape, dtype=np.int64))
    head = _HEAD.size + 4 * len(shape)

    def body(count: int) -> int:
        return 4 * count if bits == FLOAT_BITS else _RANGE.size + packed_bytes(count, bits)

    if topk is not None and topk < n:
        return head + _COUNT.size + packed_bytes(topk, index_bits(n)) + body(topk)
    return head + body(n)
