"""ECDH private set intersection over Curve25519 (X25519, RFC 7748), star-shaped for K parties.

Every party holds a list of distinct IDs (bytes). Party 0, the active party, learns which of
its rows every other party also holds; every party learns which of ITS rows are in the common
intersection and one agreed order of them, so all parties can reorder their rows alike.

* Hash to the group: ``H(id) = SHA-256(domain || id)`` with bit 255 cleared, read as an X25519
  u-coordinate (a point of Curve25519 or of its twist, both of prime order times a cofactor of
  8 or 4; Curve25519 is twist-secure). Nobody knows a discrete log relation between two hashed
  IDs (a random oracle into the group, not ``hash * base point``, which would let a receiver
  test ID guesses by ratios). Blinding is X25519 itself: the scalar is clamped to a multiple of
  8, which removes every cofactor component, and ``X25519(a, X25519(b, u)) = X25519(b,
  X25519(a, u))`` because clamped scalars multiply (SecretFlow's ECDH-PSI over Curve25519 is the
  same construction).
* Party 0 draws a secret scalar ``a`` (32 bytes from OS entropy), party k draws ``b_k``. Each
  party k sends its own ``b_k*H(Y_k)`` in a random order to party 0 (one gather), and party 0
  sends ``a*H(X)`` in a random order to every k (one broadcast).
* At the same time party 0 computes ``a*b_k*H(Y_k)`` and party k re-blinds party 0's points,
  ``b_k*a*H(X)`` (in the order received), which it sends back (one gather). Party 0 compares
  the doubly blinded sets: equal points are equal IDs. The intersection over all k is put in a
  random order and party 0 tells each k only the positions of ITS shuffled points in it.

What each party learns (semi-honest): party 0 learns every |Y_k| and, for each of its rows,
which parties hold that ID (the pairwise intersections); party k learns |X|, the size of the
common intersection and which of its rows are in it. Nobody sees an ID outside the
intersection. Blinded points travel as one packed bytes blob (32 bytes each); a point from a peer
must be a canonical u-coordinate (< 2^255 - 19) and must not be one of the u-coordinates of
small order (:data:`SMALL_ORDER`, checked before any backend multiplies: crypto_mb returned a
non-zero product for u = p - 1, which OpenSSL refuses), else :class:`PSIError`.

Two interchangeable backends compute X25519 (same bytes, tests compare them): Intel's
multi-buffer ``crypto_mb`` (``mbx_x25519_mb8``: eight points per call in AVX-512 IFMA lanes,
from the ``ipp-crypto`` wheel, ~6x OpenSSL's speed per point) where it loads and passes the
RFC 7748 test vector, else OpenSSL's X25519 through ``cryptography``. Both release the GIL, so
chunks run on ``workers`` threads.

Nothing here imports ``securevfl``: the caller hands a transport (``here``, ``send``,
``broadcast``, ``gather``; the securevfl runtime has them and meters every payload).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import os
import sys
import sysconfig
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

POINT_BYTES = 32
DOMAIN = b"securevfl/psi/v2/x25519/"
CHUNK = 8192  # IDs per thread task: amortises the task overhead, small for progress
GIL_INTERVAL_S = 2e-4  # GIL switch interval while crypto threads run (see _short_gil_waits)
# RFC 7748, 5.2, first test vector: (scalar, u) -> X25519(scalar, u); a backend must match it
KAT = (
    bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4"),
    bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"),
    bytes.fromhex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"),
)


class PSIError(RuntimeError):
    """A PSI run cannot complete (malformed or invalid points from a peer); never a wrong set."""


class Transport(Protocol):
    """What the protocol needs of a runtime (securevfl's Runtime has exactly these)."""

    n_parties: int

    def here(self, k: int) -> bool: ...

    def send(self, value: Any, *, src: int, dst: int) -> Any: ...

    def broadcast(self, value: Any, *, src: int, dsts: Iterable[int] | None = None) -> Any: ...

    def gather(self, values: Mapping[int, Any], *, dst: int) -> dict[int, Any] | None: ...


# --------------------------------------------------------------------------- X25519 backends


def _openssl_mult(scalar: bytes, points: bytes) -> bytes:
    """X25519(scalar, u) for each packed u, one OpenSSL call each (releases the GIL)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    exchange, public = X25519PrivateKey.from_private_bytes(scalar).exchange, X25519PublicKey
    try:
        return b"".join(
            exchange(public.from_public_bytes(points[o : o + POINT_BYTES]))
            for o in range(0, len(points), POINT_BYTES)
        )
    except ValueError:  # OpenSSL refuses an all-zero result: a small-order point
        raise PSIError("a peer sent a small-order point (its X25519 product is zero)") from None


class _CryptoMB:
    """Intel crypto_mb's ``mbx_x25519_mb8`` through cffi (ABI mode: nothing to compile)."""

    def __init__(self, lib_dir: Path) -> None:
        import cffi

        # the wheel's library needs Intel's compiler runtime (intel-cmplr-lib-rt) and has no
        # rpath: load those first, globally, so the dynamic loader finds them by soname
        for name in ("libintlc.so.5", "libimf.so", "libsvml.so", "libirng.so"):
            if (lib_dir / name).exists():
                ctypes.CDLL(str(lib_dir / name), mode=ctypes.RTLD_GLOBAL)
        self.ffi = cffi.FFI()
        # each argument is an array of 8 pointers; passed as uint64 addresses (same ABI)
        self.ffi.cdef(
            "uint64_t mbx_x25519_mb8(uint64_t *out, uint64_t *sk, uint64_t *pk);"
            "int mbx_is_crypto_mb_applicable(uint64_t features);"
        )
        self.lib = self.ffi.dlopen(str(lib_dir / "libcrypto_mb.so.13"))
        if not self.lib.mbx_is_crypto_mb_applicable(0):  # 0: this CPU's features
            raise OSError("crypto_mb needs AVX-512 IFMA, which this CPU lacks")

    def mult(self, scalar: bytes, points: bytes) -> bytes:
        n = len(points) // POINT_BYTES
        if n == 0:
            return b""
        m = -(-n // 8) * 8  # whole calls of 8 lanes; the padding lanes repeat point 0
        src = np.empty((m, POINT_BYTES), np.uint8)
        src[:n] = np.frombuffer(points, np.uint8).reshape(n, POINT_BYTES)
        src[n:] = src[0]
        out = np.empty_like(src)
        sk = np.frombuffer(scalar, np.uint8).copy()
        sk_ptrs = np.full(8, sk.ctypes.data, np.uint64)
        step = np.arange(m, dtype=np.uint64) * POINT_BYTES
        in_ptrs, out_ptrs = src.ctypes.data + step, out.ctypes.data + step
        cast, f = self.ffi.cast, self.lib.mbx_x25519_mb8
        sp = cast("uint64_t *", sk_ptrs.ctypes.data)
        ip, op = cast("uint64_t *", in_ptrs.ctypes.data), cast("uint64_t *", out_ptrs.ctypes.data)
        status = 0
        for j in range(0, m, 8):  # cdata pointer arithmetic: 8 lanes (addresses) a call
            status |= f(op + j, sp, ip + j)
        lanes = [(status >> (4 * i)) & 0xF for i in range(8)]  # 4 status bits per lane
        if any(v & ~4 for v in lanes):
            raise PSIError(f"crypto_mb's X25519 failed (status {status:#x})")
        # 4: what crypto_mb reports for a low-order point (u = 0, u = 1: tests/test_psi.py)
        if any(lanes) or not out[:n].any(axis=1).all():
            raise PSIError("a peer sent a small-order point (its X25519 product is zero)")
        return out[:n].tobytes()


def _crypto_mb_dirs() -> list[Path]:
    """Where pip puts the ipp-crypto wheel's libraries (its data scheme: <prefix>/lib)."""
    env = os.environ.get("SECUREVFL_CRYPTO_MB", "").strip()
    if env:
        return [] if env.lower() in ("0", "off", "no") else [Path(env)]
    dirs = [Path(sysconfig.get_path("data")) / "lib", Path(sys.prefix) / "lib"]
    return list(dict.fromkeys(dirs))


_BACKEND: tuple[str, Callable[[bytes, bytes], bytes]] | None = None


def backend() -> tuple[str, Callable[[bytes, bytes], bytes]]:
    """``(name, mult)``: crypto_mb where it loads and passes the RFC 7748 vector, else OpenSSL.
    ``SECUREVFL_CRYPTO_MB=off`` forces OpenSSL; ``=DIR`` looks for libcrypto_mb.so.13 in DIR."""
    global _BACKEND
    if _BACKEND is None:
        chosen: tuple[str, Callable[[bytes, bytes], bytes]] = ("openssl", _openssl_mult)
        for d in _crypto_mb_dirs():
            if not (d / "libcrypto_mb.so.13").exists():
                continue
            try:
                mb = _CryptoMB(d)
                if mb.mult(KAT[0], KAT[1]) == KAT[2]:
                    chosen = ("crypto_mb", mb.mult)
                    break
            except (ImportError, OSError, AttributeError, PSIError):  # no cffi/runtime, old CPU
                continue
        _BACKEND = chosen  # set once, whole: a thread never sees a half-made choice
    return _BACKEND


def new_scalar() -> bytes:
    """A secret blinding scalar: 32 bytes of OS entropy (X25519 clamps it to 2^254 + 8k)."""
    return os.urandom(32)


def _short_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 where it has one: on short inputs it skips OpenSSL's per-call
    EVP set-up (1M IDs: ~0.8 s instead of ~1.1 s); the same function, hashlib's otherwise."""
    for name in ("_sha2", "_sha256"):  # CPython 3.12+, 3.11
        try:
            return importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
    return hashlib.sha256


_SHA256 = _short_sha256()


def hash_ids(ids: Sequence[bytes]) -> bytes:
    """``H(id)`` for each id, packed: SHA-256(domain || id) with bit 255 cleared (RFC 7748 u)."""
    sha = _SHA256
    raw = bytearray(b"".join([sha(DOMAIN + i).digest() for i in ids]))
    np.frombuffer(raw, np.uint8)[POINT_BYTES - 1 :: POINT_BYTES] &= 0x7F
    return bytes(raw)


@contextlib.contextmanager
def _short_gil_waits() -> Iterator[None]:
    """A short GIL switch interval while crypto threads run (restored after).

    A crypto thread needs the GIL for a moment between two ~60 us calls of eight points; with
    the default 5 ms interval it can wait that long behind the thread that hashes IDs in Python
    at the same time, and a core idles.
    """
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, GIL_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@dataclass
class Crypto:
    """Runs the group operations in chunks of :data:`CHUNK` points on ``workers`` threads.

    Both backends release the GIL while they compute (cffi and OpenSSL calls), so threads use
    every core without the start-up and copying of worker processes; results keep their order.
    The calling thread hashes the next chunk of IDs while the workers blind the previous ones.
    """

    workers: int = 1
    progress: Callable[[int], None] | None = None  # called with the number of points done
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> Crypto:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker threads (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    @property
    def backend(self) -> str:
        """The X25519 implementation in use (``crypto_mb`` or ``openssl``)."""
        return backend()[0]

    def _run(self, blobs: Iterable[bytes], scalar: bytes) -> bytes:
        """``scalar * P`` for every point of every blob (made lazily, on this thread)."""
        mult = backend()[1]  # load once, before the threads race for it
        out: list[bytes] = []
        if self.workers <= 1:
            for blob in blobs:
                out.append(mult(scalar, blob))
                self._tick(len(out[-1]))
            return b"".join(out)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="psi")
        with _short_gil_waits():
            pending: deque[Future[bytes]] = deque()
            for blob in blobs:  # at most 2 chunks per worker queued: the rest is made lazily
                pending.append(self._pool.submit(mult, scalar, blob))
                while len(pending) > 2 * self.workers or (pending and pending[0].done()):
                    out.append(pending.popleft().result())
                    self._tick(len(out[-1]))
            while pending:
                out.append(pending.popleft().result())
                self._tick(len(out[-1]))
        return b"".join(out)

    def _tick(self, nbytes: int) -> None:
        if self.progress is not None:
            self.progress(nbytes // POINT_BYTES)

    def hash_blind(self, ids: Sequence[bytes], scalar: bytes) -> bytes:
        """``scalar * H(id)`` for each id, packed."""
        return self._run((hash_ids(ids[i : i + CHUNK]) for i in range(0, len(ids), CHUNK)), scalar)

    def reblind(self, blob: bytes, scalar: bytes) -> bytes:
        """``scalar * P`` for each packed point P (checked canonical first)."""
        check_blob(blob)
        step = CHUNK * POINT_BYTES
        return self._run((blob[i : i + step] for i in range(0, len(blob), step)), scalar)


_P = 2**255 - 19
# the canonical u-coordinates of points of order 1, 2, 4 or 8 on Curve25519 and its twist
# (0, 1, p - 1 and the two of order 8); X25519 of any of them is zero for every clamped scalar
SMALL_ORDER = tuple(
    u.to_bytes(POINT_BYTES, "little")
    for u in (
        0,
        1,
        _P - 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    )
)


def check_blob(blob: Any, count: int | None = None) -> int:
    """Number of points in a packed blob; PSIError unless it is bytes of whole points."""
    if not isinstance(blob, bytes | bytearray) or len(blob) % POINT_BYTES:
        size = len(blob) if isinstance(blob, bytes | bytearray) else type(blob).__name__
        raise PSIError(f"blinded points must be bytes of {POINT_BYTES}-byte points, got {size}")
    n = len(blob) // POINT_BYTES
    if count is not None and n != count:
        raise PSIError(f"expected {count} re-blinded points, got {n}")
    pts = np.frombuffer(blob, np.uint8).reshape(n, POINT_BYTES)
    # canonical u < p = 2^255 - 19 (little-endian): top bit clear, and not 7f ff..ff [ed, ff]
    high = pts[:, 31] >= 0x80
    over_p = (pts[:, 31] == 0x7F) & (pts[:, 1:31] == 0xFF).all(axis=1) & (pts[:, 0] >= 0xED)
    if (high | over_p).any():
        raise PSIError("a peer sent a point that is not a canonical X25519 u-coordinate (< p)")
    small = np.frombuffer(b"".join(SMALL_ORDER), np.uint8).reshape(-1, POINT_BYTES)
    # compare on the first 8 bytes (one int each), then whole points where those match
    heads = pts[:, :8].copy().view("<u8").ravel()
    hit = np.isin(heads, small[:, :8].copy().view("<u8").ravel())
    if hit.any() and any(bytes(p) in SMALL_ORDER for p in pts[hit]):
        raise PSIError("a peer sent a small-order point (its X25519 product is zero)")
    return n


def _as_keys(blob: bytes) -> np.ndarray:
    # fixed-width byte strings: numpy sorts/compares them by memcmp (all are 32 bytes long)
    return np.frombuffer(blob, dtype=f"S{POINT_BYTES}")


def _sorted_words(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Each point's first 8 bytes as an integer, sorted, and the order that sorts them."""
    words = np.frombuffer(blob, "<u8")[:: POINT_BYTES // 8]
    order = np.argsort(words)  # ties (a shared prefix) go to whole points: no stable sort needed
    return words[order], order


def match_points(x: bytes, y: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(ix, iy)`` of the points that ``x`` and ``y`` (packed) have in common.

    Sorts 8-byte prefixes instead of 32-byte strings (1M x 1M: ~0.25 s instead of ~0.9 s), then
    compares the whole points of every match. Two points sharing a prefix (chance ~n^2 / 2^65)
    send it to the whole-point intersection; a blob that repeats a point is refused (PSIError).
    """
    (wx, ox), (wy, oy) = _sorted_words(x), _sorted_words(y)
    if (wx[1:] == wx[:-1]).any() or (wy[1:] == wy[:-1]).any():
        return _match_whole(x, y)
    at = np.minimum(np.searchsorted(wy, wx), max(len(wy) - 1, 0))
    hit = wy[at] == wx if len(wy) else np.zeros(len(wx), dtype=bool)
    ix, iy = ox[hit], oy[at[hit]]
    if not (_as_keys(x)[ix] == _as_keys(y)[iy]).all():
        return _match_whole(x, y)
    return ix, iy


def _match_whole(x: bytes, y: bytes) -> tuple[np.ndarray, np.ndarray]:
    if repeats_a_point(x) or repeats_a_point(y):
        raise PSIError("a set of blinded points repeats a point (its IDs must be distinct)")
    _, ix, iy = np.intersect1d(_as_keys(x), _as_keys(y), assume_unique=True, return_indices=True)
    return ix, iy


def _os_rng() -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(os.urandom(32), "little"))


def repeats_a_point(blob: bytes) -> bool:
    """Whether a packed blob holds some point twice (prefixes sorted; whole points only where
    two prefixes agree): equal IDs give equal blinded points, distinct ones do not (~2^-250)."""
    words, _ = _sorted_words(blob)
    if not (words[1:] == words[:-1]).any():
        return False
    keys = _as_keys(blob)
    return len(np.unique(keys)) != len(keys)


# --------------------------------------------------------------------------- the protocol


def psi_star(
    tp: Transport,
    ids: Mapping[int, Sequence[bytes]],
    *,
    parties: Sequence[int] | None = None,
    crypto: Crypto | None = None,
) -> dict[int, np.ndarray]:
    """Run PSI among ``parties`` (default all of ``tp``; the first is the active party).

    ``ids[k]`` is set where party k lives (distinct byte strings). Returns, for every local party,
    the indices of its rows in the intersection, all parties' lists in the same agreed order
    (a random one, so it reveals no party's row order).
    """
    if crypto is None:
        with Crypto() as own_crypto:
            return psi_star(tp, ids, parties=parties, crypto=own_crypto)
    parties = list(range(tp.n_parties) if parties is None else parties)
    if len(parties) < 2:
        raise ValueError(f"PSI needs >= 2 parties, got {len(parties)}")
    active, others = parties[0], parties[1:]
    scalars = {k: new_scalar() for k in parties if tp.here(k)}
    perms: dict[int, np.ndarray] = {}

    def blind_own(k: int) -> bytes:
        blob = crypto.hash_blind(ids[k], scalars[k])
        if repeats_a_point(blob):  # checked before anything is sent: cheaper than set(ids)
            raise ValueError(f"party {k}'s IDs must be distinct, got duplicates")
        # sent in a random order, so positions reveal nothing: the points are permuted, not the
        # IDs before hashing (same result, a numpy gather instead of 1M Python lookups)
        perms[k] = _os_rng().permutation(len(ids[k]))
        return np.frombuffer(blob, np.uint8).reshape(-1, POINT_BYTES)[perms[k]].tobytes()

    # every party blinds its own IDs first: with one process per party this runs in parallel
    own = {k: blind_own(k) for k in parties if tp.here(k)}

    # round 1: each party k sends b_k*H(Y_k), shuffled, and party 0 a*H(X) to every k; then
    # party 0 re-blinds the b_k*H(Y_k) while every k re-blinds a*H(X), at the same time
    theirs_at = tp.gather({k: own.get(k) for k in others}, dst=active)
    mine = tp.broadcast(own.get(active), src=active, dsts=others)
    ab_y: dict[int, bytes] = {}
    if tp.here(active):
        for k in others:
            ab_y[k] = crypto.reblind(theirs_at[k], scalars[active])

    # round 2: each party k returns b_k*a*H(X), in the order received
    replies: dict[int, Any] = {k: None for k in others}  # every sender keyed (networked gather)
    for k in others:
        if tp.here(k):
            check_blob(mine)
            replies[k] = crypto.reblind(mine, scalars[k])
    got = tp.gather(replies, dst=active)

    # party 0: match, intersect over all k, agree a random order
    positions: dict[int, np.ndarray | None] = {k: None for k in others}
    out: dict[int, np.ndarray] = {}
    if tp.here(active):
        n_x = len(ids[active])
        in_all = np.ones(n_x, dtype=bool)  # indexed by party 0's send position
        pos_at: dict[int, np.ndarray] = {}
        for k in others:
            back = got[k]
            check_blob(back, n_x)
            ix, iy = match_points(back, ab_y[k])
            where = np.full(n_x, -1, dtype=np.int64)
            where[ix] = iy
            pos_at[k] = where
            in_all &= where >= 0
        common = np.flatnonzero(in_all)
        common = common[_os_rng().permutation(len(common))]
        out[active] = perms[active][common]
        # uint32 halves the bytes of the last round; fine below 2^32 rows
        positions = {
            k: pos_at[k][common].astype(np.uint32 if len(ab_y[k]) < 2**37 else np.int64)
            for k in others
        }

    # round 3: each party k learns which of its sent positions are kept, in the agreed order
    for k in others:
        pos = tp.send(positions[k], src=active, dst=k)
        if tp.here(k):
            n_k = len(ids[k])
            if not isinstance(pos, np.ndarray) or pos.dtype.kind not in "iu" or pos.ndim != 1:
                what = (
                    f"dtype {pos.dtype}, {pos.ndim} dims"
                    if isinstance(pos, np.ndarray)
                    else (type(pos).__name__)
                )
                raise PSIError(
                    f"party {k} got positions from party {active} that are not a list of row "
                    f"numbers ({what})"
                )
            if len(pos) and (int(pos.min()) < 0 or int(pos.max()) >= n_k):
                raise PSIError(f"party {k} got positions outside its {n_k} rows")
            seen = np.zeros(n_k, dtype=bool)
            seen[pos] = True
            if int(seen.sum()) != len(pos):
                raise PSIError(f"party {k} got repeated positions")
            out[k] = perms[k][pos.astype(np.int64)]
    return out
