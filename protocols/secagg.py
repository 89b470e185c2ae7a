"""Pairwise-mask secure aggregation: protocol 0 of Bonawitz et al. (2016), as PBM-VFL uses it.

M parties each hold a vector of non-negative integers q_m (PBM outputs in [0, b]); an
honest-but-curious server must learn sum_m q_m and nothing else.

* Setup: every party makes an X25519 key pair and sends its public key to the server, which
  relays all of them (with a fresh session id) to every party. Each pair (i, j) then holds the
  same X25519 shared secret, stretched by HKDF-SHA256 (session id and pair ids bound in) into a
  pair key.
* Per aggregation (round id, batch id): the pair key is expanded by HKDF (round and batch bound
  in) into an AES-256-CTR key whose keystream gives one r-bit mask per value. For many small
  batches per round (a training epoch) a party may instead ``prepare_round``: one HKDF key per
  (pair, round) and one keystream for the whole round, each batch taking the disjoint segment at
  its ``offset``; the batch id and offset travel in the header, the server checks both, and a
  party refuses to reuse a segment (segments must come in increasing order).
* Party i adds the masks it shares with every j > i and subtracts those it shares with j < i,
  modulo 2^r, so all masks cancel in the server's sum. r is the smallest number of bits
  holding the largest possible sum, ``bound = b*M``; masked values are sent bit-packed at r bits
  each (not int64).
* Protocol 0 has no dropout recovery: if any party's masked vector is missing (or is for another
  round, batch or session), the masks cannot cancel, so the server aborts the round with an
  error naming the party instead of returning a wrong sum.

Nothing here imports ``securevfl``: the caller moves the bytes (and meters them).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAX_BITS = 32  # masks are drawn as uint32 words; 2^r divides 2^32, so they stay uniform
_HEADER = struct.Struct(">16sIQQQI")  # session, party, round, batch, offset, count
HEADER_BYTES = _HEADER.size
_PAIR_INFO = b"securevfl/secagg/v1/pair"
_ROUND_INFO = b"securevfl/secagg/v1/round"
_STREAM_INFO = b"securevfl/secagg/v1/round-stream"
NO_OFFSET = (1 << 64) - 1  # header offset of a batch keyed on its own (round, batch) ids
_WEIGHTS = np.ldexp(1.0, np.arange(MAX_BITS))  # 2^j, j < 32, exact in float64
_ZERO_NONCE = bytes(16)  # every (pair, round, batch) gets its own AES key, so a fixed nonce is safe


class SecAggError(RuntimeError):
    """Secure aggregation could not complete; never a wrong sum."""


class SecAggAbort(SecAggError):
    """A party's masked values are missing or do not belong to this round: the round aborts."""

    def __init__(self, message: str, party: int | None = None) -> None:
        super().__init__(message)
        self.party = party


def modulus_bits(bound: int) -> int:
    """Smallest r with 2^r > bound, so every sum in [0, bound] is recovered exactly mod 2^r.

    The paper writes ceil(log2(bM)); for bM a power of two that misses the top value bM itself
    (all parties at q = b), hence ``bound.bit_length()`` = ceil(log2(bM + 1)).
    """
    if int(bound) < 1:
        raise ValueError(f"bound must be >= 1, got {bound}")
    r = int(bound).bit_length()
    if r > MAX_BITS:
        raise ValueError(f"bound must be < 2^{MAX_BITS}, got {bound}")
    return r


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
    need = -(-count * bits // 8)
    for data in payloads:
        if len(data) != need:
            raise SecAggError(
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


def _round_mask(pair_key: bytes, *, round_id: int, batch_id: int, count: int) -> np.ndarray:
    """uint32 masks of one (pair, round, batch): AES-256-CTR keystream, HKDF-derived key."""
    return _keystream(pair_key, _ROUND_INFO + struct.pack(">QQ", round_id, batch_id), count)


def _keystream(
    pair_key: bytes, info: bytes, count: int, word: np.dtype | str = "<u4"
) -> np.ndarray:
    """``count`` words (uint32, or uint16 if ``word`` says so) of AES-256-CTR keystream under
    HKDF(pair_key, info)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(pair_key)
    enc = Cipher(algorithms.AES(key), modes.CTR(_ZERO_NONCE)).encryptor()
    dtype = np.dtype(word)
    stream = enc.update(bytes(dtype.itemsize * count)) + enc.finalize()
    # full words: callers add them mod 2^32 (2^16) and reduce mod 2^r (2^r divides it) once
    return np.frombuffer(stream, dtype=dtype)


class SecAggParty:
    """One client of protocol 0: key agreement, then masking of one integer vector per round."""

    def __init__(
        self, index: int, n_parties: int, *, bits: int, private_key: X25519PrivateKey | None = None
    ) -> None:
        if n_parties < 2:
            raise ValueError(f"n_parties must be >= 2 for secure aggregation, got {n_parties}")
        if not 0 <= index < n_parties:
            raise ValueError(f"index must be in [0, {n_parties}), got {index}")
        if not 1 <= bits <= MAX_BITS:
            raise ValueError(f"bits must be in [1, {MAX_BITS}], got {bits}")
        self.index, self.n_parties, self.bits = index, n_parties, bits
        self._word = np.dtype("<u2" if bits <= 16 else "<u4")
        self._sk = private_key or X25519PrivateKey.generate()
        self._pair_keys: dict[int, bytes] = {}
        self.session: bytes | None = None

    @property
    def public_key(self) -> bytes:
        """The 32-byte X25519 public key this party publishes through the server."""
        return self._sk.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    def agree(self, public_keys: Mapping[int, bytes], session: bytes) -> None:
        """Derive a pair key with every other party from the relayed public keys."""
        missing = [j for j in range(self.n_parties) if j != self.index and j not in public_keys]
        if missing:
            raise SecAggAbort(
                f"key agreement aborted: no public key from party {missing[0]}", missing[0]
            )
        if len(session) != 16:
            raise SecAggError(f"session id must be 16 bytes, got {len(session)}")
        self.session = bytes(session)
        for j in range(self.n_parties):
            if j == self.index:
                continue
            shared = self._sk.exchange(X25519PublicKey.from_public_bytes(bytes(public_keys[j])))
            lo, hi = min(self.index, j), max(self.index, j)
            self._pair_keys[j] = HKDF(
                algorithm=hashes.SHA256(),
                length=32,
                salt=self.session,
                info=_PAIR_INFO + struct.pack(">II", lo, hi),
            ).derive(shared)

    def prepare_round(self, round_id: int, total: int) -> None:
        """Precompute the net signed mask of a round for ``total`` values (all its batches)."""
        if self.session is None:
            raise SecAggError(f"party {self.index} must run key agreement before masking")
        # words of the masked values' width (uint16 when r <= 16, both ends of every pair agree
        # as r is common): uniform mod 2^16, hence mod 2^r
        net = np.zeros(total, dtype=self._word)
        for j, key in self._pair_keys.items():
            m = _keystream(key, _STREAM_INFO + struct.pack(">Q", round_id), total, self._word)
            if self.index < j:
                net += m
            else:
                net -= m
        self._round = (round_id, net, [0])  # [next free offset]

    def mask(
        self, values: np.ndarray, *, round_id: int, batch_id: int, offset: int | None = None
    ) -> bytes:
        """Header + the masked values (q + sum of signed pair masks mod 2^r) packed at r bits.

        ``offset`` given: use segment [offset, offset + n) of the prepared round's keystream.
        """
        if self.session is None:
            raise SecAggError(f"party {self.index} must run key agreement before masking")
        q = np.asarray(values).ravel()
        # one reduction: read as unsigned, a negative value is huge, so max >> r catches it too
        if q.size and (
            q.dtype.kind not in "iu" or q.view(f"u{q.dtype.itemsize}").max() >> self.bits
        ):
            raise SecAggError(
                f"values must be integers in [0, 2^{self.bits}), got range "
                f"[{q.min()}, {q.max()}] of dtype {q.dtype}"
            )
        if offset is None:
            y = q.astype("<u4")
            for j, key in self._pair_keys.items():
                m = _round_mask(key, round_id=round_id, batch_id=batch_id, count=q.size)
                # i < j adds, i > j subtracts (uint32 wraps mod 2^32): pair masks cancel in the sum
                if self.index < j:
                    y += m
                else:
                    y -= m
        else:
            y = q.astype(self._word)
            y += self._segment(round_id, offset, q.size)
        # y mod 2^r: packing keeps each word's low r bits (2^r divides the word's modulus)
        header = _HEADER.pack(
            self.session,
            self.index,
            round_id,
            batch_id,
            NO_OFFSET if offset is None else offset,
            q.size,
        )
        return header + pack_bits(y, self.bits)

    def _segment(self, round_id: int, offset: int, n: int) -> np.ndarray:
        rnd = getattr(self, "_round", None)
        if rnd is None or rnd[0] != round_id:
            raise SecAggError(
                f"party {self.index} must prepare round {round_id} before masking at an offset"
            )
        _, net, used = rnd
        if offset < 0 or offset + n > len(net):
            raise SecAggError(
                f"offset range [{offset}, {offset + n}) must lie in the prepared "
                f"round of {len(net)} values"
            )
        # segments must come in increasing order: a reused segment would let the server subtract
        # two masked vectors, and the monotone rule excludes that in O(1) per batch
        if offset < used[0]:
            raise SecAggError(
                f"mask segment [{offset}, {offset + n}) of round {round_id} "
                f"overlaps one already used (next free offset is {used[0]})"
            )
        used[0] = offset + n
        return net[offset : offset + n]


class SecAggServer:
    """The aggregator of protocol 0: relays public keys, then unmasks the sum of each round."""

    def __init__(self, n_parties: int, *, bits: int, session: bytes | None = None) -> None:
        if n_parties < 2:
            raise ValueError(f"n_parties must be >= 2 for secure aggregation, got {n_parties}")
        if not 1 <= bits <= MAX_BITS:
            raise ValueError(f"bits must be in [1, {MAX_BITS}], got {bits}")
        self.n_parties, self.bits = n_parties, bits
        self.session = bytes(session) if session is not None else os.urandom(16)

    def relay(self, public_keys: Mapping[int, bytes | None]) -> dict[int, bytes]:
        """Check every party published a 32-byte key; return the table sent back to all."""
        out = {}
        for k in range(self.n_parties):
            pk = public_keys.get(k)
            if pk is None:
                raise SecAggAbort(f"key agreement aborted: party {k} published no public key", k)
            if len(pk) != 32:
                raise SecAggAbort(
                    f"key agreement aborted: party {k}'s public key must be 32 "
                    f"bytes, got {len(pk)}",
                    k,
                )
            out[k] = bytes(pk)
        return out

    def unmask(
        self,
        messages: Mapping[int, bytes | None],
        *,
        round_id: int,
        batch_id: int,
        count: int,
        offset: int | None = None,
        expected: Iterable[int] | None = None,
    ) -> np.ndarray:
        """The sum over all parties (uint64, length ``count``), or SecAggAbort naming a party."""
        want = (self.session, round_id, batch_id, NO_OFFSET if offset is None else offset, count)
        bodies = []
        for k in range(self.n_parties) if expected is None else expected:
            msg = messages.get(k)
            where = f"secure aggregation round {round_id} batch {batch_id} aborted"
            if msg is None:
                raise SecAggAbort(
                    f"{where}: party {k} sent no masked values (protocol 0 has no "
                    "dropout recovery, the masks cannot cancel)",
                    k,
                )
            if len(msg) < _HEADER.size:
                raise SecAggAbort(f"{where}: party {k}'s message is truncated", k)
            session, party, r, b, off, n = _HEADER.unpack_from(msg)
            if party != k or (session, r, b, off, n) != want:
                raise SecAggAbort(
                    f"{where}: party {k}'s message is for session/party/round/"
                    f"batch/offset/count {session.hex()[:8]}/{party}/{r}/{b}/"
                    f"{off}/{n}",
                    k,
                )
            bodies.append(msg[_HEADER.size :])
        total = unpack_sum(bodies, self.bits, count)
        return total & np.uint64((1 << self.bits) - 1)
