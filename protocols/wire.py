"""What a peer's bytes may decode to: a small self-describing typed format, never pickle.

Every message a party receives is decoded here: payloads of our runtime, inputs handed to local
party processes, and MPyC's own secure-arithmetic messages (MPyC 0.11 pickles numpy share arrays
in ``input``/``output``/``_reshare`` and every ``transfer``; :func:`guard_mpyc_unpickling` makes
``mpyc.runtime`` encode and decode them with this format instead).

A payload is ``MAGIC`` then one item: a one-byte tag and a fixed layout per tag (little-endian
lengths). Decoding calls no constructor named by the peer, and nothing is allocated before its
size is checked against the bytes that remain:

- numeric/string arrays carry dtype (an allow-listed kind), shape and byte length; the length
  must equal ``prod(shape) * itemsize`` and fit in the payload before the array is made;
- every count (items of a container, ints in an object array) must fit in the bytes left;
- nesting is at most :data:`MAX_DEPTH` deep and an int at most :data:`MAX_INT_BYTES` long;
- every object made is charged its size; more than ``AMPLIFICATION * len(payload) + SLACK``
  in all is refused;
- a set or dict is built only once its keys' hashes are known not to collide (more than
  :data:`MAX_SHARED_HASH` keys on one hash value are refused): ints hash to themselves modulo
  2**61 - 1, so a peer could otherwise send keys that all land on one hash and make building
  the dict quadratic (an 844 KB message cost 35 s of CPU);
- string arrays and scalars hold only valid code points (numpy fails on others when read).

So no payload decodes to more than :data:`AMPLIFICATION` times its length (plus a small constant):
a peer cannot make a party allocate gigabytes from a few bytes. Anything else raises
:class:`WireError`: :func:`loads` turns every exception raised while decoding into one.
"""

from __future__ import annotations

import os
import re
import struct
import types
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "AMPLIFICATION",
    "DEFAULT_MAX_FRAME",
    "MAGIC",
    "MAX_DEPTH",
    "MAX_INT_BYTES",
    "SLACK",
    "WireError",
    "dumps",
    "guard_mpyc_unpickling",
    "loads",
]


class WireError(RuntimeError):
    """A peer sent bytes that are not a valid message (wrong type, wrong format, wrong run)."""


MAGIC = b"SVW\x01"
AMPLIFICATION = 16  # decoded bytes per payload byte, at most (plus SLACK)
SLACK = 1 << 20
MAX_DEPTH = 32
MAX_NDIM = 32
MAX_INT_BYTES = 1 << 16  # 524,288-bit ints; Paillier ciphertexts of a 4096-bit n are 1 KiB
MAX_SHARED_HASH = 8  # keys of one set/dict that may share a hash value (-1 and -2 do, legitimately)
MAX_CHARS = 1 << 20  # code points per item of a fixed-width string dtype
DEFAULT_MAX_FRAME = 256 << 20  # bytes per frame a party accepts; SECUREVFL_MAX_FRAME_MB changes it

# array dtypes a peer may name: bool, ints, floats, complex, fixed-width bytes/str; no objects,
# no structured or sub-array dtypes (their size is not what the string says)
_DTYPE = re.compile(r"^[<>|=]?(b1|[iu][1248]|f(2|4|8|16)|c(8|16|32)|[SU][0-9]{1,9})$")

_U8, _U32, _U64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<Q")
_F8, _C16 = struct.Struct("<d"), struct.Struct("<dd")

# tags
_NONE, _TRUE, _FALSE = b"N", b"T", b"F"
_INT, _BIGINT, _MPZ = b"i", b"I", b"m"
_FLOAT, _COMPLEX = b"f", b"c"
_STR, _BYTES, _BYTEARRAY = b"s", b"b", b"y"
_LIST, _TUPLE, _SET, _FROZENSET, _DICT = b"l", b"t", b"e", b"z", b"d"
_ARRAY, _INTARRAY, _OBJARRAY, _SCALAR = b"a", b"O", b"o", b"g"


# ---------------------------------------------------------------------------------- encoding


def dumps(obj: Any) -> bytes:
    """Serialize a payload to the bytes that are sent; unsupported types raise WireError."""
    out: list[bytes] = [MAGIC]
    _enc(obj, out, 0)
    return b"".join(out)


def _enc_int(v: int, out: list[bytes], tag: bytes = _INT) -> None:
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True) if v else b""
    if tag == _INT and len(raw) < 256:
        out += [_INT, _U8.pack(len(raw)), raw]
    else:
        if len(raw) > MAX_INT_BYTES:
            raise WireError(f"an int of {len(raw)} bytes exceeds the wire's {MAX_INT_BYTES}")
        out += [_BIGINT if tag == _INT else tag, _U32.pack(len(raw)), raw]


def _enc_shape(shape: tuple[int, ...], out: list[bytes]) -> None:
    out.append(_U8.pack(len(shape)))
    out += [_U64.pack(d) for d in shape]


def _enc_array(a: np.ndarray, out: list[bytes], depth: int) -> None:
    if a.dtype.hasobject:
        _enc_object_array(a, out, depth)
        return
    dt = a.dtype.str
    if not _DTYPE.match(dt):
        raise WireError(f"arrays of dtype {a.dtype} cannot be sent")
    # the array's own bytes (a uint8 view), copied once, by dumps's join: tobytes() would copy
    # them twice (an n-vector of a full batch is hundreds of MB)
    raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    out += [_ARRAY, _U8.pack(len(dt)), dt.encode(), b""]
    _enc_shape(a.shape, out)
    out += [_U64.pack(raw.nbytes), raw]


def _enc_object_array(a: np.ndarray, out: list[bytes], depth: int) -> None:
    flat = a.ravel()
    if flat.size and all(type(v) is int for v in flat):
        # MPyC's field arrays: Python ints, shipped as 64-bit limbs (numpy, no per-int loop)
        lo, hi = int(min(flat)), int(max(flat))
        bits = max(lo.bit_length(), hi.bit_length()) + 1  # + sign
        limbs = -(-bits // 64)
        if limbs * 8 <= MAX_INT_BYTES:
            mod = 1 << (64 * limbs)
            u = flat % mod if lo < 0 else flat  # two's complement over the limbs
            mask = (1 << 64) - 1
            parts = [((u >> (64 * k)) & mask).astype(np.uint64) for k in range(limbs)]
            out += [_INTARRAY, _U8.pack(limbs)]
            _enc_shape(a.shape, out)
            out.append(np.stack(parts).astype("<u8").tobytes())
            return
    out.append(_OBJARRAY)
    _enc_shape(a.shape, out)
    for v in flat:
        _enc(v, out, depth + 1)


def _enc(obj: Any, out: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError(f"payload nests deeper than {MAX_DEPTH} levels")
    t = type(obj)
    if obj is None:
        out.append(_NONE)
    elif t is bool:
        out.append(_TRUE if obj else _FALSE)
    elif t is int:
        _enc_int(obj, out)
    elif t is float:
        out += [_FLOAT, _F8.pack(obj)]
    elif t is complex:
        out += [_COMPLEX, _C16.pack(obj.real, obj.imag)]
    elif t is str:
        raw = obj.encode("utf-8", "surrogatepass")
        out += [_STR, _U32.pack(len(raw)), raw]
    elif t is bytes or t is bytearray or t is memoryview:
        raw = bytes(obj)
        out += [_BYTEARRAY if t is bytearray else _BYTES, _U32.pack(len(raw)), raw]
    elif t in _SEQ_TAGS:
        out += [_SEQ_TAGS[t], _U32.pack(len(obj))]
        for v in obj:
            _enc(v, out, depth + 1)
    elif t is dict:
        out += [_DICT, _U32.pack(len(obj))]
        for k, v in obj.items():
            _enc(k, out, depth + 1)
            _enc(v, out, depth + 1)
    elif t is np.ndarray:
        _enc_array(obj, out, depth)
    elif isinstance(obj, np.generic):
        dt = obj.dtype.str
        if not _DTYPE.match(dt):
            raise WireError(f"numpy scalars of dtype {obj.dtype} cannot be sent")
        out += [_SCALAR, _U8.pack(len(dt)), dt.encode(), obj.tobytes()]
    elif t.__module__.startswith("gmpy2") and t.__name__ == "mpz":
        _enc_int(int(obj), out, _MPZ)
    else:
        raise WireError(
            f"payload type {t.__module__}.{t.__qualname__} cannot be sent (builtin containers "
            "and scalars, numpy arrays and scalars only)"
        )


_SEQ_TAGS = {list: _LIST, tuple: _TUPLE, set: _SET, frozenset: _FROZENSET}


# ---------------------------------------------------------------------------------- decoding


class _Reader:
    """A cursor over the payload that charges what is built against the byte budget."""

    __slots__ = ("buf", "pos", "budget", "mpz")

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0
        self.budget = AMPLIFICATION * len(buf) + SLACK
        self.mpz: Any = None

    def left(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n > self.left():
            raise WireError(
                f"malformed payload: {what} needs {n} bytes, {self.left()} remain "
                f"(at byte {self.pos} of {len(self.buf)})"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1, "a length")[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4, "a length"))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8, "a length"))[0]

    def charge(self, nbytes: int, what: str) -> None:
        """Refuse before building ``what`` if it would pass the amplification budget."""
        self.budget -= nbytes
        if self.budget < 0:
            raise WireError(
                f"payload of {len(self.buf)} bytes would decode to more than "
                f"{AMPLIFICATION}x its size (at {what}): refused"
            )

    def count(self, n: int, min_bytes: int, what: str) -> int:
        if n * min_bytes > self.left():
            raise WireError(
                f"malformed payload: {what} claims {n} items, only {self.left()} bytes remain"
            )
        return n

    def shape(self) -> tuple[int, ...]:
        ndim = self.u8()
        if ndim > MAX_NDIM:
            raise WireError(f"malformed payload: array of {ndim} dimensions (max {MAX_NDIM})")
        return tuple(self.u64() for _ in range(ndim))

    def dtype(self) -> np.dtype:
        s = bytes(self.take(self.u8(), "a dtype")).decode("ascii", "replace")
        if not _DTYPE.match(s):
            raise WireError(f"payload names dtype {s!r}, not an allowed array dtype")
        if s.lstrip("<>|=")[0] in "SU" and not 0 < int(s.lstrip("<>|=")[1:]) <= MAX_CHARS:
            raise WireError(f"payload names dtype {s!r}: strings of 1..{MAX_CHARS} items only")
        return np.dtype(s)


def _check_code_points(raw: memoryview, dt: np.dtype) -> None:
    """numpy stores UTF-32 units unchecked and fails (SystemError) when it reads one that is
    not a code point: refuse such arrays here."""
    if dt.kind == "U" and len(raw):
        units = np.frombuffer(raw, dtype=dt.byteorder.replace("|", "=") + "u4")
        if int(units.max()) > 0x10FFFF:
            raise WireError("malformed payload: a string array holds a value that is no code point")


def _no_colliding_hashes(keys: list[Any], what: str) -> None:
    """Refuse keys of which more than MAX_SHARED_HASH share one hash value, before a set or dict
    is built from them: inserting k keys of one hash costs k comparisons each (quadratic).
    Sorting the hash values costs n log n and hashes nothing the peer chose (they are ints)."""
    hashes = sorted(hash(k) for k in keys)  # an unhashable key raises TypeError: a WireError
    run = 1
    for a, b in zip(hashes, hashes[1:]):
        run = run + 1 if a == b else 1
        if run > MAX_SHARED_HASH:
            raise WireError(
                f"malformed payload: {what} whose keys share one hash value more than "
                f"{MAX_SHARED_HASH} times (colliding keys make building it quadratic)"
            )


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d  # Python ints: no overflow to a small product
    return n


def _dec_int(r: _Reader, n: int) -> int:
    if n > MAX_INT_BYTES:
        raise WireError(f"payload holds an int of {n} bytes (max {MAX_INT_BYTES})")
    r.charge(32 + n, "an int")
    return int.from_bytes(r.take(n, "an int"), "little", signed=True)


def _dec(r: _Reader, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"payload nests deeper than {MAX_DEPTH} levels")
    tag = bytes(r.take(1, "a tag"))
    if tag == _NONE:
        return None
    if tag == _TRUE or tag == _FALSE:
        return tag == _TRUE
    if tag == _INT:
        return _dec_int(r, r.u8())
    if tag == _BIGINT:
        return _dec_int(r, r.u32())
    if tag == _MPZ:
        if r.mpz is None:
            import gmpy2  # noqa: PLC0415  (only where a peer sends one)

            r.mpz = gmpy2.mpz
        return r.mpz(_dec_int(r, r.u32()))
    if tag == _FLOAT:
        r.charge(24, "a float")
        return _F8.unpack(r.take(8, "a float"))[0]
    if tag == _COMPLEX:
        r.charge(32, "a complex")
        return complex(*_C16.unpack(r.take(16, "a complex")))
    if tag == _STR:
        raw = r.take(r.u32(), "a str")
        r.charge(80 + 4 * len(raw), "a str")  # up to 4 bytes per code point in memory
        try:
            return str(raw, "utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise WireError("malformed payload: a str is not UTF-8") from None
    if tag == _BYTES or tag == _BYTEARRAY:
        raw = r.take(r.u32(), "bytes")
        r.charge(64 + len(raw), "bytes")
        return bytes(raw) if tag == _BYTES else bytearray(raw)
    if tag in _SEQ_TYPES:
        n = r.count(r.u32(), 1, "a container")
        r.charge(64 + 8 * n + (216 + 16 * n if tag in (_SET, _FROZENSET) else 0), "a container")
        items = [_dec(r, depth + 1) for _ in range(n)]
        if tag in (_SET, _FROZENSET):
            _no_colliding_hashes(items, "a set")
        return _SEQ_TYPES[tag](items)
    if tag == _DICT:
        n = r.count(r.u32(), 2, "a dict")
        r.charge(64 + 48 * n, "a dict")
        pairs = [(_dec(r, depth + 1), _dec(r, depth + 1)) for _ in range(n)]
        _no_colliding_hashes([k for k, _ in pairs], "a dict")
        return dict(pairs)
    if tag == _ARRAY:
        dt = r.dtype()
        shape = r.shape()
        nbytes = r.u64()
        if nbytes != _size(shape) * dt.itemsize:
            raise WireError(
                f"malformed payload: array of shape {shape} and dtype {dt.str} must have "
                f"{_size(shape) * dt.itemsize} bytes, says {nbytes}"
            )
        raw = r.take(nbytes, "an array")  # checked against what remains before allocating
        r.charge(128 + nbytes, "an array")
        _check_code_points(raw, dt)
        return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
    if tag == _INTARRAY:
        limbs = r.u8()
        shape = r.shape()
        n = _size(shape)
        if limbs < 1 or limbs * 8 > MAX_INT_BYTES:
            raise WireError(f"malformed payload: int array of {limbs} limbs")
        raw = r.take(8 * limbs * n, "an int array")
        r.charge(128 + n * (40 + 8 * limbs), "an int array")
        parts = np.frombuffer(raw, dtype="<u8").reshape(limbs, n).astype(object)
        v = parts[0]
        for k in range(1, limbs):
            v = v + (parts[k] << (64 * k))
        top = 1 << (64 * limbs - 1)
        if n and max(v) >= top:  # negative values were sent in two's complement
            v = np.where(v >= top, v - (top << 1), v)
        return np.asarray(v, dtype=object).reshape(shape)
    if tag == _OBJARRAY:
        shape = r.shape()
        n = r.count(_size(shape), 1, "an object array")
        r.charge(128 + 8 * n, "an object array")
        out_arr = np.empty(n, dtype=object)
        for i in range(n):
            out_arr[i] = _dec(r, depth + 1)
        return out_arr.reshape(shape)
    if tag == _SCALAR:
        dt = r.dtype()
        r.charge(64 + dt.itemsize, "a numpy scalar")
        raw = r.take(dt.itemsize, "a numpy scalar")
        _check_code_points(raw, dt)
        return np.frombuffer(raw, dtype=dt)[0]
    raise WireError(f"malformed payload: unknown tag {tag!r} at byte {r.pos - 1}")


_SEQ_TYPES: dict[bytes, Callable[[list[Any]], Any]] = {
    _LIST: lambda x: x,
    _TUPLE: tuple,
    _SET: set,
    _FROZENSET: frozenset,
}


def loads(data: bytes | bytearray | memoryview, *, max_bytes: int | None = None) -> Any:
    """Decode received bytes; anything malformed, oversized or amplifying raises WireError.

    ``max_bytes``: refuse a payload longer than this before reading it.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise WireError(f"a payload must be bytes, got {type(data).__name__}")
    buf = memoryview(data).cast("B")
    if max_bytes is not None and len(buf) > max_bytes:
        raise WireError(f"a payload of {len(buf)} bytes exceeds the limit of {max_bytes}")
    if bytes(buf[: len(MAGIC)]) != MAGIC:
        raise WireError(
            f"malformed payload: not a securevfl wire message (starts {bytes(buf[:8])!r})"
        )
    r = _Reader(buf[len(MAGIC) :])
    try:
        obj = _dec(r, 0)
    except WireError:
        raise
    except RecursionError:
        raise WireError("malformed payload: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001  (whatever a crafted payload trips: one WireError)
        raise WireError(f"malformed payload ({type(exc).__name__}: {str(exc)[:200]})") from None
    if r.left():
        raise WireError(f"malformed payload: {r.left()} bytes after the message")
    return obj


def max_frame_from_env() -> int:
    """The frame limit: ``SECUREVFL_MAX_FRAME_MB`` (MiB) if set, else :data:`DEFAULT_MAX_FRAME`."""
    raw = os.environ.get("SECUREVFL_MAX_FRAME_MB", "").strip()
    if not raw:
        return DEFAULT_MAX_FRAME
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not 0 < mb <= 4095:  # MPyC frames carry a 32-bit length
        raise WireError(f"SECUREVFL_MAX_FRAME_MB must be a number in (0, 4095], got {raw!r}")
    return int(mb * (1 << 20))


def guard_mpyc_unpickling(
    on_violation: Callable[[str], None], *, max_bytes: int | None = None
) -> None:
    """Make ``mpyc.runtime`` encode and decode its messages with this format, not pickle.

    Every party of our runs installs it, so both ends speak the same format. ``max_bytes``
    (default :func:`max_frame_from_env`) bounds every frame a peer sends this party, MPyC's
    messages and ours (:mod:`protocols.mpyc_net` refuses a larger frame from its header, before
    buffering it); a runtime may change ``mpc._securevfl_max_frame`` later (a limit derived
    from the run spec once its sizes are known). ``on_violation(reason)`` is called before the
    error is raised: MPyC decodes inside its own tasks, where an exception would only be logged
    while the party waits on, so the caller must be told directly (to abort the run).
    """
    import mpyc.runtime as mrt

    if max_bytes is None:
        max_bytes = max_frame_from_env()
    mrt.mpc._securevfl_max_frame = max_bytes
    mrt.mpc._securevfl_on_violation = on_violation

    def guarded_loads(data: bytes, *args: Any, **kwargs: Any) -> Any:
        try:  # the limit now (a runtime lowers it once the run's sizes are known)
            return loads(data, max_bytes=mrt.mpc._securevfl_max_frame)
        except WireError as exc:
            on_violation(f"a peer sent an MPyC message that is not allowed: {exc}")
            raise

    shim = types.SimpleNamespace(dumps=lambda obj, *a, **k: dumps(obj), loads=guarded_loads)
    mrt.pickle = shim  # type: ignore[assignment]  (mpyc.runtime calls pickle.* via this name)


def decoded_budget(nbytes: int) -> int:
    """The most a payload of ``nbytes`` may decode to (what :func:`loads` charges against)."""
    return AMPLIFICATION * max(0, nbytes - len(MAGIC)) + SLACK
