"""ECDH private set intersection over ristretto255 (libsodium), star-shaped for K parties.

Every party holds a list of distinct IDs (bytes). Party 0, the active party, learns which of
its rows every other party also holds; every party learns which of ITS rows are in the common
intersection and one agreed order of them, so all parties can reorder their rows alike.

* Hash to the group: ``H(id) = ristretto255_from_hash(SHA-512(domain || id))`` (libsodium's
  Elligator map), so nobody knows a discrete log relation between two hashed IDs. (Hashing to a
  scalar times the base point would let a receiver test ID guesses by ratios.)
* Party 0 draws a secret scalar ``a`` from OS entropy, sends ``a*H(X)`` in a random order to
  every data party k (one broadcast).
* Party k draws ``b_k``; it re-blinds party 0's points, ``b_k*a*H(X)`` (in the order received),
  and sends them back with its own ``b_k*H(Y_k)`` shuffled (one gather).
* Party 0 computes ``a*b_k*H(Y_k)`` and compares the doubly blinded sets: equal points are equal
  IDs (scalar multiplication commutes). The intersection over all k is put in a random order
  and party 0 tells each k only the positions of ITS shuffled points that are in it.

What each party learns (semi-honest): party 0 learns every |Y_k| and, for each of its rows,
which parties hold that ID (the pairwise intersections); party k learns |X|, the size of the
common intersection and which of its rows are in it. Nobody sees an ID outside the
intersection. Blinded points travel as one packed bytes blob (32 bytes each).

Nothing here imports ``securevfl``: the caller hands a transport (``here``, ``send``,
``broadcast``, ``gather``; the securevfl runtime has them and meters every payload).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any, Protocol

import numpy as np
import rbcl


def _drop_rbcl_temp_file() -> None:
    """rbcl writes its bundled libsodium to a fresh temporary file at every import and never
    removes it (~2.8 MB per process, worker processes included). The library is loaded by then;
    on POSIX the file can go at once."""
    path = getattr(getattr(rbcl, "_sodium", None), "_name", None)
    if os.name == "posix" and isinstance(path, str) and path.startswith(tempfile.gettempdir()):
        try:
            os.unlink(path)
        except OSError:
            pass


_drop_rbcl_temp_file()

POINT_BYTES = 32
DOMAIN = b"securevfl/psi/v1/ristretto255/"
CHUNK = 8192  # IDs per worker task: big enough to amortise task overhead, small for progress


class PSIError(RuntimeError):
    """A PSI run cannot complete (malformed or invalid points from a peer); never a wrong set."""


class Transport(Protocol):
    """What the protocol needs of a runtime (securevfl's Runtime has exactly these)."""

    n_parties: int

    def here(self, k: int) -> bool: ...

    def send(self, value: Any, *, src: int, dst: int) -> Any: ...

    def broadcast(self, value: Any, *, src: int, dsts: Iterable[int] | None = None) -> Any: ...

    def gather(self, values: Mapping[int, Any], *, dst: int) -> dict[int, Any] | None: ...


# --------------------------------------------------------------------------- group operations


def new_scalar() -> bytes:
    """A secret blinding scalar, uniform mod the group order, from libsodium's OS entropy."""
    return rbcl.crypto_core_ristretto255_scalar_random()


def _hash_blind(ids: Sequence[bytes], scalar: bytes) -> bytes:
    """``scalar * H(id)`` for each id, packed."""
    from_hash, mult, sha = (
        rbcl.crypto_core_ristretto255_from_hash,
        rbcl.crypto_scalarmult_ristretto255,
        hashlib.sha512,
    )
    return b"".join(mult(scalar, from_hash(sha(DOMAIN + i).digest())) for i in ids)


def _reblind(blob: bytes, scalar: bytes) -> bytes:
    """``scalar * P`` for each packed point P; raises PSIError on an invalid point."""
    mult = rbcl.crypto_scalarmult_ristretto255
    try:
        return b"".join(
            mult(scalar, blob[o : o + POINT_BYTES]) for o in range(0, len(blob), POINT_BYTES)
        )
    except (RuntimeError, ValueError, TypeError) as exc:  # libsodium rejects non-canonical points
        raise PSIError(
            f"a peer sent a point that is not a valid ristretto255 element: {exc}"
        ) from None


@dataclass
class Crypto:
    """Runs the group operations in chunks, on ``workers`` processes when > 1.

    libsodium's scalar multiplication (~37 us) dwarfs the Python call around it (~1 us), so the
    lever at 1M IDs is using every core, not removing the loop. Workers are spawned (not forked:
    the caller may hold torch threads), once per protocol run (``with Crypto(...)`` or
    :meth:`close`), and only ever see one party's own data and scalar.
    """

    workers: int = 1
    progress: Callable[[int], None] | None = None  # called with the number of points done
    _pool: ProcessPoolExecutor | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> Crypto:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _map(self, fn: Callable[..., bytes], chunks: list[Any], scalar: bytes) -> bytes:
        out: list[bytes] = []
        if self.workers <= 1 or len(chunks) <= 1:
            for c in chunks:
                out.append(fn(c, scalar))
                self._tick(len(out[-1]))
            return b"".join(out)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=get_context("spawn"))
        for part in self._pool.map(fn, chunks, [scalar] * len(chunks)):
            out.append(part)
            self._tick(len(part))
        return b"".join(out)

    def _tick(self, nbytes: int) -> None:
        if self.progress is not None:
            self.progress(nbytes // POINT_BYTES)

    def hash_blind(self, ids: Sequence[bytes], scalar: bytes) -> bytes:
        chunks = [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]
        return self._map(_hash_blind, chunks, scalar)

    def reblind(self, blob: bytes, scalar: bytes) -> bytes:
        check_blob(blob)
        step = CHUNK * POINT_BYTES
        chunks = [blob[i : i + step] for i in range(0, len(blob), step)]
        return self._map(_reblind, chunks, scalar)


def check_blob(blob: Any, count: int | None = None) -> int:
    """Number of points in a packed blob; PSIError unless it is bytes of whole points."""
    if not isinstance(blob, bytes | bytearray) or len(blob) % POINT_BYTES:
        size = len(blob) if isinstance(blob, bytes | bytearray) else type(blob).__name__
        raise PSIError(f"blinded points must be bytes of {POINT_BYTES}-byte points, got {size}")
    n = len(blob) // POINT_BYTES
    if count is not None and n != count:
        raise PSIError(f"expected {count} re-blinded points, got {n}")
    return n


def _as_keys(blob: bytes) -> np.ndarray:
    # fixed-width byte strings: numpy sorts/compares them by memcmp (all are 32 bytes long)
    return np.frombuffer(blob, dtype=f"S{POINT_BYTES}")


def _os_rng() -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(os.urandom(32), "little"))


def check_ids(ids: Sequence[bytes], party: int) -> None:
    """Reject duplicates: two equal blinded points could not be told apart."""
    if len(set(ids)) != len(ids):
        raise ValueError(f"party {party}'s IDs must be distinct, got duplicates")


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
        check_ids(ids[k], k)
        perms[k] = _os_rng().permutation(len(ids[k]))  # send order: positions reveal nothing
        return crypto.hash_blind([ids[k][i] for i in perms[k]], scalars[k])

    # every party blinds its own IDs first: with one process per party this runs in parallel
    own = {k: blind_own(k) for k in parties if tp.here(k)}

    # round 1: a*H(X), shuffled, to every data party
    mine = tp.broadcast(own.get(active), src=active, dsts=others)

    # round 2: each party k returns b_k*a*H(X) (same order) and its own b_k*H(Y_k), shuffled
    replies: dict[int, Any] = {k: None for k in others}  # every sender keyed (networked gather)
    for k in others:
        if tp.here(k):
            check_blob(mine)
            replies[k] = (crypto.reblind(mine, scalars[k]), own[k])
    got = tp.gather(replies, dst=active)

    # party 0: match, intersect over all k, agree a random order
    positions: dict[int, np.ndarray | None] = {k: None for k in others}
    out: dict[int, np.ndarray] = {}
    if tp.here(active):
        n_x = len(ids[active])
        in_all = np.ones(n_x, dtype=bool)  # indexed by party 0's send position
        pos_at: dict[int, np.ndarray] = {}
        for k in others:
            back, theirs = got[k]
            check_blob(back, n_x)
            check_blob(theirs)
            ab_y = crypto.reblind(theirs, scalars[active])
            _, ix, iy = np.intersect1d(
                _as_keys(back), _as_keys(ab_y), assume_unique=True, return_indices=True
            )
            where = np.full(n_x, -1, dtype=np.int64)
            where[ix] = iy
            pos_at[k] = where
            in_all &= where >= 0
        common = np.flatnonzero(in_all)
        common = common[_os_rng().permutation(len(common))]
        out[active] = perms[active][common]
        # uint32 halves the bytes of the last round; fine below 2^32 rows
        positions = {
            k: pos_at[k][common].astype(np.uint32 if len(got[k][1]) < 2**37 else np.int64)
            for k in others
        }

    # round 3: each party k learns which of its sent positions are kept, in the agreed order
    for k in others:
        pos = tp.send(positions[k], src=active, dst=k)
        if tp.here(k):
            pos = np.asarray(pos)
            n_k = len(ids[k])
            if pos.ndim != 1 or (len(pos) and (pos.min() < 0 or pos.max() >= n_k)):
                raise PSIError(f"party {k} got positions outside its {n_k} rows")
            if len(np.unique(pos)) != len(pos):
                raise PSIError(f"party {k} got repeated positions")
            out[k] = perms[k][pos.astype(np.int64)]
    return out
