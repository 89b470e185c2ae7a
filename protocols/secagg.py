"""Secure aggregation with authenticated messages and dropout recovery (Bonawitz et al., CCS 2017).

M parties each hold a vector of non-negative integers q_m (PBM outputs in [0, b]); an
honest-but-curious server must learn sum_m q_m and nothing else, even when up to M - t parties
drop out after key agreement (t = ``threshold``, by default floor(M/2) + 1).

* Setup: every party (and the server) makes an X25519 key pair; the server relays all public
  keys with a fresh session id. HKDF-SHA256 (session, pair ids and the public parameters M, r, t
  bound in) turns each shared secret into: a *pair mask key* and a *channel key* for every pair
  of parties, and an *auth key* between each party and the server. The public keys themselves
  must reach the parties authentically (TLS with pinned certificates, as in the networked runtime,
  or a PKI): against an active man in the middle at setup no MAC helps.
* Masking (one aggregation = a (round, batch)): y_u = q_u + PRG(b_u) + sum_{v>u} m_uv -
  sum_{v<u} m_uv mod 2^r. The pair masks m_uv are AES-256-CTR keystreams under HKDF(pair key,
  round[, batch]); with ``prepare_round`` one keystream per (pair, round) whose disjoint segment
  at ``offset`` serves each batch. The *self mask* PRG(b_u) comes from a fresh seed b_u per
  aggregation, t-of-M Shamir-shared (``protocols.shamir``) to every party, each share sealed
  with AES-GCM under the channel key of the pair (sender, receiver, session, round, batch as
  associated data) and relayed by the server inside u's message.
* Every message is ``header | body | HMAC-SHA256(auth key, header | body)``. The header names kind,
  session, sender, receiver, round, batch, offset and count; the server accepts it only if all of
  them match the aggregation at hand and the tag verifies. A replayed body under a fresh header,
  a forged, truncated or extended message, or one that is not bytes aborts naming the party.
* Unmasking: the survivors S (valid masked messages) must number at least t, else the round
  aborts naming the dropped parties D. The server sends each survivor S and the shares addressed
  to it; the survivor answers with its shares of b_u for every u in S and, for every dropped u,
  the pair mask m_uv of this aggregation only: its 32-byte AES key (HKDF of the pair key,
  round and batch), or with ``prepare_round`` the packed segment of the round's stream. The
  survivor holds the pair key, and what it reveals is useless for any other aggregation, which
  is why no pair secret needs Shamir sharing here (Bonawitz et al. share the pairwise secret key
  instead, as their keys serve one aggregation). A party
  answers at most one request per aggregation, so the server never holds both b_u and u's pair
  masks for the same aggregation: a late message from a "dropped" party stays hidden by its self
  mask. The server reconstructs each b_u from t shares (checked against a second set of t when
  more answered), removes self masks and the dropped parties' pair masks, and returns the sum.
  Pair masks with a dropped party are known only to survivors, so with D non-empty every
  survivor must answer; without dropouts any t answers suffice.
* Consistency check (Bonawitz et al.'s ConsistencyCheck round, with pairwise MACs in place of
  signatures): before any unmasking, the server sends each survivor the survivor list S; each
  survivor u returns, for every other v in S, ``HMAC(vouch key of u and v, u > v | aggregation |
  S)``; the server forwards to v the vouches of all of S, and v answers only if each verifies over
  the S it was sent itself. A malicious server that sends different lists to different parties
  (to get the shares of b_u from some and u's pair masks from others, i.e. u's input) gets no
  answer: the server cannot make the vouch of u for another list. The request also carries each
  dealer's commitment to the recipient's share, so a responder names a dealer whose share does
  not match its commitment before answering (an honest responder is never blamed for it).

What each protocol resists: a server that deviates in any way learns nothing beyond the sum of
the survivors (it can still abort or drop parties); dealers and responders that deviate are
named (a forged share, reveal, or dealing) and never change the sum silently; parties that
collude with the server learn what their own inputs and the sum imply (t > M / 2 keeps two
disjoint groups of t from vouching for two lists).

Nothing here imports ``securevfl``: the caller moves the bytes (and meters them).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from hmac import compare_digest
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from protocols import shamir
from protocols.bitpack import MAX_BITS, pack_bits, packed_bytes, unpack_bits, unpack_sum

__all__ = [
    "HEADER_BYTES",
    "MAX_BITS",
    "SERVER",
    "SHARE_RECORD_BYTES",
    "TAG_BYTES",
    "SecAggAbort",
    "SecAggError",
    "SecAggParty",
    "SecAggServer",
    "aggregate_round",
    "default_threshold",
    "modulus_bits",
    "pack_bits",
    "unpack_bits",
    "unpack_sum",
]

SERVER = 0xFFFFFFFF  # the server's id in headers (parties are 0..M-1)
MASKED, REQUEST, RESPONSE, CHECK, VOUCH = 1, 2, 3, 4, 5
_KINDS = {
    MASKED: "masked values",
    REQUEST: "unmasking request",
    RESPONSE: "unmasking response",
    CHECK: "survivor list",
    VOUCH: "vouch for the survivor list",
}
_HEADER = struct.Struct(">B16sIIQQQI")  # kind, session, sender, receiver, round, batch, off, count
HEADER_BYTES = _HEADER.size
TAG_BYTES = 32
_NONCE = 12
SHARE_RECORD_BYTES = _NONCE + shamir.SHARE_BYTES + 16  # nonce | AES-GCM(share) | GCM tag
NO_OFFSET = (1 << 64) - 1  # header offset of a batch keyed on its own (round, batch) ids
_V = b"securevfl/secagg/v2/"
_ZERO_NONCE = bytes(16)  # every AES-CTR key is used for one keystream only
_COMMIT = 32  # SHA-256 commitments in the masked message


def _commit(
    what: bytes, session: bytes, dealer: int, other: int, round_id: int, batch_id: int, data: bytes
) -> bytes:
    """SHA-256 commitment to ``data`` with domain separation (what, session, parties, aggregation).

    The committed values are uniform 255/256-bit secrets (a seed, a Shamir share, a pair key) or
    carry a secret 256-bit nonce (a mask segment), so the hash hides them from the server."""
    head = _V + b"commit/" + what + b"|" + session
    return hashlib.sha256(
        head + struct.pack(">IIQQ", dealer, other, round_id, batch_id) + data
    ).digest()


class SecAggError(RuntimeError):
    """Secure aggregation could not complete; never a wrong sum."""


class SecAggAbort(SecAggError):
    """The round aborts because of the named party (missing, malformed or unauthentic message).

    ``party`` is the first party named (``SERVER`` for the server), ``parties`` all of them.
    """

    def __init__(self, message: str, party: int | None = None, parties: Sequence[int] = ()):
        super().__init__(message)
        self.party = party
        self.parties = tuple(parties) or ((party,) if party is not None else ())


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


def default_threshold(n_parties: int) -> int:
    """floor(M/2) + 1 shares: a majority, so two disjoint survivor sets cannot both unmask."""
    return n_parties // 2 + 1


def _check_params(n_parties: int, bits: int, threshold: int | None) -> int:
    if n_parties < 2:
        raise ValueError(f"n_parties must be >= 2 for secure aggregation, got {n_parties}")
    if not 1 <= bits <= MAX_BITS:
        raise ValueError(f"bits must be in [1, {MAX_BITS}], got {bits}")
    t = default_threshold(n_parties) if threshold is None else int(threshold)
    # t >= 2: the server must never unmask a "sum" of a single party's input
    if not 2 <= t <= n_parties:
        raise ValueError(f"threshold must be in [2, {n_parties}], got {threshold}")
    return t


def _hkdf(secret: bytes, info: bytes, salt: bytes | None = None) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


def _keystream(key: bytes, info: bytes, count: int, word: str, start: int = 0) -> np.ndarray:
    """Words ``start .. start+count`` of the AES-256-CTR keystream under HKDF(key, info)."""
    return _aes_stream(_hkdf(key, info), count, word, start)


def _aes_stream(aes_key: bytes, count: int, word: str, start: int = 0) -> np.ndarray:
    """Words ``start .. start+count`` of the AES-256-CTR keystream under ``aes_key``."""
    dtype = np.dtype(word)
    first, skip = divmod(start * dtype.itemsize, 16)  # CTR seeks: block i uses counter i
    enc = Cipher(algorithms.AES(aes_key), modes.CTR(first.to_bytes(16, "big"))).encryptor()
    stream = enc.update(bytes(skip + dtype.itemsize * count))[skip:]
    # full words: callers add them mod 2^16 / 2^32 and reduce mod 2^r (2^r divides it) once
    return np.frombuffer(stream, dtype=dtype)


def _mac(key: bytes, data: bytes) -> bytes:
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(data)
    return h.finalize()


@dataclass(frozen=True)
class _Header:
    kind: int
    session: bytes
    sender: int
    receiver: int
    round_id: int
    batch_id: int
    offset: int
    count: int


def _open(
    msg: Any, key: bytes, want: _Header, size: int | None, where: str, party: int, who: str
) -> bytes:
    """The body of an authentic message matching ``want`` (and ``size`` bytes long in all), or
    SecAggAbort naming ``party``. Checks cheap facts first so the error says what is wrong."""
    if not isinstance(msg, bytes | bytearray):
        raise SecAggAbort(
            f"{where}: {who} sent a value of type {type(msg).__name__}, not bytes", party
        )
    msg = bytes(msg)
    if len(msg) < HEADER_BYTES + TAG_BYTES:
        raise SecAggAbort(f"{where}: {who}'s message is truncated ({len(msg)} bytes)", party)
    got = _Header(*_HEADER.unpack_from(msg))
    if got != want:
        raise SecAggAbort(
            f"{where}: {who}'s message is a {_KINDS.get(got.kind, f'kind {got.kind}')} for "
            f"session/sender/receiver/round/batch/offset/count {got.session.hex()[:8]}/"
            f"{got.sender}/{got.receiver}/{got.round_id}/{got.batch_id}/{got.offset}/{got.count}, "
            f"expected a {_KINDS[want.kind]} for {want.session.hex()[:8]}/{want.sender}/"
            f"{want.receiver}/{want.round_id}/{want.batch_id}/{want.offset}/{want.count}",
            party,
        )
    if size is not None and len(msg) != size:
        what = "truncated" if len(msg) < size else "extended"
        raise SecAggAbort(
            f"{where}: {who}'s message is {what} ({len(msg)} bytes, expected {size})", party
        )
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(msg[:-TAG_BYTES])
    try:
        h.verify(msg[-TAG_BYTES:])
    except InvalidSignature:
        raise SecAggAbort(
            f"{where}: {who}'s message fails authentication (forged, altered, or a body "
            "replayed under another header)",
            party,
        ) from None
    return msg[HEADER_BYTES:-TAG_BYTES]


def _params(n_parties: int, bits: int, threshold: int) -> bytes:
    # bound into every key: parties or a server with other parameters fail authentication
    return struct.pack(">III", n_parties, bits, threshold)


def _where(round_id: int, batch_id: int) -> str:
    return f"secure aggregation round {round_id} batch {batch_id} aborted"


class SecAggParty:
    """One client: key agreement, masking one integer vector per aggregation, unmasking help."""

    def __init__(
        self,
        index: int,
        n_parties: int,
        *,
        bits: int,
        threshold: int | None = None,
        private_key: X25519PrivateKey | None = None,
    ) -> None:
        self.threshold = _check_params(n_parties, bits, threshold)
        if not 0 <= index < n_parties:
            raise ValueError(f"index must be in [0, {n_parties}), got {index}")
        self.index, self.n_parties, self.bits = index, n_parties, bits
        self._word = "<u2" if bits <= 16 else "<u4"
        self._sk = private_key or X25519PrivateKey.generate()
        self._pair_keys: dict[int, bytes] = {}
        self._channels: dict[int, AESGCM] = {}
        self._auth: bytes | None = None
        self._pending: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._round: tuple[int, np.ndarray, list[int]] | None = None
        self._vouched: dict[tuple[int, int], list[int]] = {}  # survivor lists vouched for
        self.session: bytes | None = None

    @property
    def public_key(self) -> bytes:
        """The 32-byte X25519 public key this party publishes through the server."""
        return _raw(self._sk)

    def agree(self, public_keys: Mapping[int, bytes], session: bytes, server_key: bytes) -> None:
        """Derive pair mask keys, channel keys and the auth key with the server."""
        missing = [j for j in range(self.n_parties) if j != self.index and j not in public_keys]
        if missing:
            raise SecAggAbort(
                f"key agreement aborted: no public key from party {missing[0]}", missing[0]
            )
        if len(session) != 16:
            raise SecAggError(f"session id must be 16 bytes, got {len(session)}")
        self.session = bytes(session)
        params = _params(self.n_parties, self.bits, self.threshold)
        for j in range(self.n_parties):
            if j == self.index:
                continue
            shared = self._sk.exchange(X25519PublicKey.from_public_bytes(bytes(public_keys[j])))
            ids = struct.pack(">II", min(self.index, j), max(self.index, j)) + params
            self._pair_keys[j] = _hkdf(shared, _V + b"pair" + ids, self.session)
            self._channels[j] = AESGCM(_hkdf(shared, _V + b"channel" + ids, self.session))
        shared = self._sk.exchange(X25519PublicKey.from_public_bytes(bytes(server_key)))
        self._auth = _hkdf(shared, _V + b"auth" + struct.pack(">I", self.index) + params, session)

    def _require_keys(self) -> None:
        if self.session is None:
            raise SecAggError(f"party {self.index} must run key agreement before masking")

    def prepare_round(self, round_id: int, total: int) -> None:
        """Precompute the net signed pair mask of a round for ``total`` values (all batches)."""
        self._require_keys()
        # words of the masked values' width (uint16 when r <= 16, both ends of every pair agree
        # as r is common): uniform mod 2^16, hence mod 2^r
        net = np.zeros(total, dtype=self._word)
        for j, key in self._pair_keys.items():
            m = _keystream(key, _stream_info(round_id), total, self._word)
            if self.index < j:
                net += m
            else:
                net -= m
        self._round = (round_id, net, [0])  # [next free offset]

    def mask(
        self, values: np.ndarray, *, round_id: int, batch_id: int, offset: int | None = None
    ) -> bytes:
        """The authenticated masked message of one aggregation: header | q + PRG(b_u) + signed
        pair masks mod 2^r, packed at r bits | sealed Shamir shares of b_u | HMAC tag.

        ``offset`` given: the pair masks are segment [offset, offset + n) of the prepared round.
        """
        self._require_keys()
        q = np.asarray(values).ravel()
        # one reduction: read as unsigned, a negative value is huge, so max >> r catches it too
        if q.size and (
            q.dtype.kind not in "iu" or q.view(f"u{q.dtype.itemsize}").max() >> self.bits
        ):
            raise SecAggError(
                f"values must be integers in [0, 2^{self.bits}), got range "
                f"[{q.min()}, {q.max()}] of dtype {q.dtype}"
            )
        if (round_id, batch_id) in self._pending:
            raise SecAggError(
                f"party {self.index} already masked round {round_id} batch {batch_id}: "
                "a second masked input under the same masks would leak their difference"
            )
        if offset is None:
            y = q.astype("<u4")
            for j in self._pair_keys:
                m = self._pair_mask(j, round_id, batch_id, None, q.size)
                # i < j adds, i > j subtracts (uint32 wraps mod 2^32): pair masks cancel in the sum
                y += m if self.index < j else -m
        else:
            y = q.astype(self._word)
            y += self._segment(round_id, offset, q.size)
        seed = shamir.random_secret()
        y += _self_mask(seed, q.size, self.bits).astype(y.dtype)
        shares = shamir.share(seed, n_parties=self.n_parties, threshold=self.threshold)
        off = NO_OFFSET if offset is None else offset
        msg = _HEADER.pack(
            MASKED, self.session, self.index, SERVER, round_id, batch_id, off, q.size
        ) + pack_bits(y, self.bits)
        msg += b"".join(
            self._seal(j, shares[j], round_id, batch_id)
            for j in range(self.n_parties)
            if j != self.index
        )
        # commitments, bound by the tag before anyone knows who drops: the seed, every share of
        # it (a responder that alters one is named), and what this party would reveal of its
        # pair mask with each other party if that one dropped
        me, sess = self.index, self.session
        msg += _commit(b"seed", sess, me, me, round_id, batch_id, shamir.to_bytes(seed))
        msg += b"".join(
            _commit(b"share", sess, me, j, round_id, batch_id, shamir.to_bytes(shares[j]))
            for j in range(self.n_parties)
        )
        msg += b"".join(
            _commit(
                b"reveal",
                sess,
                me,
                j,
                round_id,
                batch_id,
                self._reveal(j, round_id, batch_id, off, q.size),
            )
            for j in range(self.n_parties)
            if j != me
        )
        self._pending[(round_id, batch_id)] = (shares[self.index], off, q.size)
        return msg + _mac(self._auth, msg)

    def vouch(self, check: Any) -> bytes:
        """Answer the server's survivor list of one aggregation (the consistency round) with a
        vouch for it to every other survivor; a second, different list is refused."""
        self._require_keys()
        if not isinstance(check, bytes | bytearray) or len(check) < HEADER_BYTES:
            raise SecAggAbort(
                f"party {self.index}: the server's survivor list is malformed", SERVER
            )
        h = _Header(*_HEADER.unpack_from(check))
        where = f"party {self.index}: {_where(h.round_id, h.batch_id)}"
        pend = self._pending.get((h.round_id, h.batch_id))
        if pend is None:
            raise SecAggAbort(f"{where}: a survivor list for an aggregation not masked", SERVER)
        _, off, n = pend
        want = _Header(CHECK, self.session, SERVER, self.index, h.round_id, h.batch_id, off, n)
        body = _open(check, self._auth, want, None, where, SERVER, "the server")
        surv = self._survivors(body, where)[0]
        old = self._vouched.setdefault((h.round_id, h.batch_id), surv)
        if old != surv:
            raise SecAggAbort(f"{where}: the server sent two survivor lists {old}, {surv}", SERVER)
        out = _HEADER.pack(VOUCH, self.session, self.index, SERVER, h.round_id, h.batch_id, off, n)
        out += b"".join(self._vouch_tag(self.index, v, h, surv) for v in surv if v != self.index)
        return out + _mac(self._auth, out)

    def _vouch_tag(self, u: int, v: int, h: _Header, surv: list[int]) -> bytes:
        """u's vouch to v for ``surv`` (one key per pair, the direction bound in)."""
        other = v if u == self.index else u
        key = _hkdf(self._pair_keys[other], _V + b"vouch")
        data = struct.pack(">IIQQQI", u, v, h.round_id, h.batch_id, h.offset, h.count)
        return _mac(key, self.session + data + struct.pack(f">{len(surv)}I", *surv))

    def _survivors(self, body: bytes, where: str) -> tuple[list[int], int]:
        """The survivor list at the start of a server's message, checked; and its byte length."""
        M, t = self.n_parties, self.threshold
        ns = struct.unpack_from(">I", body)[0] if len(body) >= 4 else 0
        if not t <= ns <= M or len(body) < 4 + 4 * ns:
            raise SecAggAbort(f"{where}: malformed survivor list ({ns}, need >= {t})", SERVER)
        surv = list(struct.unpack_from(f">{ns}I", body, 4))
        if surv != sorted(set(surv)) or self.index not in surv or surv[-1] >= M:
            raise SecAggAbort(f"{where}: invalid survivors {surv}", SERVER)
        return surv, 4 + 4 * ns

    def respond(self, request: Any) -> bytes:
        """Answer the server's unmasking request of one aggregation (once): shares of b_u for
        every survivor u, and the pair-mask segment shared with every dropped party; only if
        every other survivor vouched for the survivor list this party vouched for."""
        self._require_keys()
        if not isinstance(request, bytes | bytearray) or len(request) < HEADER_BYTES:
            raise SecAggAbort(
                f"party {self.index}: the server's unmasking request is malformed", SERVER
            )
        h = _Header(*_HEADER.unpack_from(request))
        where = f"party {self.index}: {_where(h.round_id, h.batch_id)}"
        pend = self._pending.get((h.round_id, h.batch_id))
        if pend is None:
            raise SecAggAbort(
                f"{where}: the server sent an unmasking request for an aggregation this party "
                "did not mask or already answered (a replay would reveal both masks)",
                SERVER,
            )
        own, off, n = pend
        want = _Header(REQUEST, self.session, SERVER, self.index, h.round_id, h.batch_id, off, n)
        body = _open(request, self._auth, want, None, where, SERVER, "the server")
        del self._pending[(h.round_id, h.batch_id)]  # only after authentication: no DoS by forgery
        surv, at = self._survivors(body, where)
        ns, me = len(surv), self.index
        if len(body) != at + (SHARE_RECORD_BYTES + 2 * _COMMIT) * (ns - 1):
            raise SecAggAbort(f"{where}: malformed request ({len(body)} bytes)", SERVER)
        if self._vouched.get((h.round_id, h.batch_id)) != surv:
            raise SecAggAbort(
                f"{where}: the request's survivor list {surv} is not the one this party vouched "
                f"for ({self._vouched.get((h.round_id, h.batch_id))})",
                SERVER,
            )
        others = [u for u in surv if u != me]
        recs = body[at : at + SHARE_RECORD_BYTES * (ns - 1)]
        coms = body[at + SHARE_RECORD_BYTES * (ns - 1) :][: _COMMIT * (ns - 1)]
        tags = body[at + (SHARE_RECORD_BYTES + _COMMIT) * (ns - 1) :]
        for i, u in enumerate(others):  # everyone was sent this list, or nobody answers
            if not compare_digest(tags[_COMMIT * i :][:_COMMIT], self._vouch_tag(u, me, h, surv)):
                raise SecAggAbort(
                    f"{where}: party {u} did not vouch for the survivor list {surv} (the server "
                    "sent parties different lists, or altered the vouch): nothing revealed",
                    SERVER,
                )
        shares = []
        for i, u in enumerate(others):
            rec = recs[SHARE_RECORD_BYTES * i :][:SHARE_RECORD_BYTES]
            try:
                pt = self._channels[u].decrypt(
                    rec[:_NONCE], rec[_NONCE:], self._aad(u, me, h.round_id, h.batch_id)
                )
                shares.append(shamir.from_bytes(pt))
            except (InvalidTag, ValueError):
                raise SecAggAbort(
                    f"{where}: party {u}'s share for party {me} fails authentication", u
                ) from None
            if (
                _commit(b"share", self.session, u, me, h.round_id, h.batch_id, pt)
                != coms[_COMMIT * i :][:_COMMIT]
            ):
                raise SecAggAbort(
                    f"{where}: party {u}'s share for party {me} does not match party {u}'s "
                    f"commitment (dealt wrongly by party {u})",
                    u,
                )
        shares.insert(surv.index(me), own)
        dropped = sorted(set(range(self.n_parties)) - set(surv))
        out = _HEADER.pack(
            RESPONSE, self.session, self.index, SERVER, h.round_id, h.batch_id, off, n
        )
        out += b"".join(shamir.to_bytes(s) for s in shares)
        for u in dropped:
            out += self._reveal(u, h.round_id, h.batch_id, off, n)
        return out + _mac(self._auth, out)

    def _reveal(self, j: int, round_id: int, batch_id: int, off: int, n: int) -> bytes:
        """What this party reveals of its pair mask with ``j`` if ``j`` drops (committed to in
        the masked message): a secret commitment nonce, then this aggregation's 32-byte pair
        key, or the packed segment of the round's stream (never the round key)."""
        info = _V + b"reveal-nonce" + struct.pack(">QQ", round_id, batch_id)
        nonce = _hkdf(self._pair_keys[j], info)
        if off == NO_OFFSET:
            return nonce + self._batch_key(j, round_id, batch_id)
        seg = self._pair_mask(j, round_id, batch_id, off, n)
        return nonce + pack_bits(seg & np.array((1 << self.bits) - 1, seg.dtype), self.bits)

    def _batch_key(self, j: int, round_id: int, batch_id: int) -> bytes:
        info = _V + b"batch" + struct.pack(">QQ", round_id, batch_id)
        return _hkdf(self._pair_keys[j], info)

    def _pair_mask(self, j: int, round_id: int, batch_id: int, offset: int | None, n: int):
        """m_ij of one aggregation: its own keystream, or the round stream's segment."""
        if offset is None:
            return _aes_stream(self._batch_key(j, round_id, batch_id), n, "<u4")
        return _keystream(self._pair_keys[j], _stream_info(round_id), n, self._word, offset)

    def _aad(self, sender: int, receiver: int, round_id: int, batch_id: int) -> bytes:
        return self.session + struct.pack(">IIQQ", sender, receiver, round_id, batch_id)

    def _seal(self, j: int, value: int, round_id: int, batch_id: int) -> bytes:
        nonce = os.urandom(_NONCE)  # random 96-bit nonces: far below the 2^32 messages per key
        ct = self._channels[j].encrypt(
            nonce, shamir.to_bytes(value), self._aad(self.index, j, round_id, batch_id)
        )
        return nonce + ct

    def _segment(self, round_id: int, offset: int, n: int) -> np.ndarray:
        rnd = self._round
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


def _stream_info(round_id: int) -> bytes:
    return _V + b"round-stream" + struct.pack(">Q", round_id)


def _self_mask(seed: int, n: int, bits: int) -> np.ndarray:
    """PRG(b_u): AES-256-CTR keystream under HKDF(seed); words of the masked values' width."""
    return _keystream(shamir.to_bytes(seed), _V + b"self", n, "<u2" if bits <= 16 else "<u4")


def _raw(sk: X25519PrivateKey) -> bytes:
    return sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass
class _Collected:
    round_id: int
    batch_id: int
    offset: int
    count: int
    survivors: list[int]
    dropped: list[int]
    bodies: dict[int, bytes]
    commits: dict[int, bytes]  # seed | M shares | M - 1 reveals, 32 bytes each, per survivor


class SecAggServer:
    """The aggregator: relays public keys, then per aggregation ``collect`` (masked messages in,
    survivor lists out), ``requests`` (vouches in, unmasking requests out) and ``finish``
    (responses in, the exact sum out) or SecAggAbort."""

    def __init__(
        self,
        n_parties: int,
        *,
        bits: int,
        threshold: int | None = None,
        session: bytes | None = None,
    ) -> None:
        self.threshold = _check_params(n_parties, bits, threshold)
        self.n_parties, self.bits = n_parties, bits
        self.session = bytes(session) if session is not None else os.urandom(16)
        self._sk = X25519PrivateKey.generate()
        self._auth: dict[int, bytes] = {}
        self._state: _Collected | None = None
        self._records: dict[int, bytes] = {}
        self.survivors: list[int] = []  # the parties summed by the last ``finish``

    @property
    def public_key(self) -> bytes:
        """The server's X25519 public key, relayed with the parties' keys."""
        return _raw(self._sk)

    def relay(self, public_keys: Mapping[int, Any]) -> dict[int, bytes]:
        """Check every party published a 32-byte key, derive the auth keys; return the table."""
        out = {}
        params = _params(self.n_parties, self.bits, self.threshold)
        for k in range(self.n_parties):
            pk = public_keys.get(k)
            if pk is None:
                raise SecAggAbort(f"key agreement aborted: party {k} published no public key", k)
            if not isinstance(pk, bytes | bytearray) or len(pk) != 32:
                raise SecAggAbort(
                    f"key agreement aborted: party {k}'s public key must be 32 bytes, got "
                    f"{len(pk) if isinstance(pk, bytes | bytearray) else type(pk).__name__}",
                    k,
                )
            out[k] = bytes(pk)
            shared = self._sk.exchange(X25519PublicKey.from_public_bytes(out[k]))
            info = _V + b"auth" + struct.pack(">I", k) + params
            self._auth[k] = _hkdf(shared, info, self.session)
        return out

    def _masked_size(self, count: int) -> int:
        return (
            HEADER_BYTES
            + packed_bytes(count, self.bits)
            + SHARE_RECORD_BYTES * (self.n_parties - 1)
            + _COMMIT * 2 * self.n_parties
            + TAG_BYTES
        )

    def collect(
        self,
        messages: Mapping[int, Any],
        *,
        round_id: int,
        batch_id: int,
        count: int,
        offset: int | None = None,
    ) -> dict[int, bytes]:
        """Check the masked messages; return the unmasking request for each survivor."""
        if not self._auth:
            raise SecAggError("the server must relay the public keys before aggregating")
        where, M = _where(round_id, batch_id), self.n_parties
        off = NO_OFFSET if offset is None else offset
        need, size = packed_bytes(count, self.bits), self._masked_size(count)
        bodies, records, commits = {}, {}, {}
        for k in range(M):
            msg = messages.get(k)
            if msg is None:
                continue  # a dropout, recovered below if few enough
            want = _Header(MASKED, self.session, k, SERVER, round_id, batch_id, off, count)
            body = _open(msg, self._auth[k], want, size, where, k, f"party {k}")
            recs = need + SHARE_RECORD_BYTES * (M - 1)
            bodies[k], records[k], commits[k] = body[:need], body[need:recs], body[recs:]
        surv = sorted(bodies)
        dropped = [k for k in range(M) if k not in bodies]
        if len(surv) < self.threshold:
            raise SecAggAbort(
                f"{where}: parties {dropped} sent no masked values; {len(surv)} remain, fewer "
                f"than the {self.threshold} needed to unmask (at most {M - self.threshold} "
                "may drop)",
                dropped[0],
                dropped,
            )
        self._state = _Collected(round_id, batch_id, off, count, surv, dropped, bodies, commits)
        self._records = records
        head = struct.pack(f">I{len(surv)}I", len(surv), *surv)
        out = {}
        for v in surv:  # the consistency round first: every survivor is sent the same list
            msg = _HEADER.pack(CHECK, self.session, SERVER, v, round_id, batch_id, off, count)
            out[v] = msg + head + _mac(self._auth[v], msg + head)
        return out

    def requests(self, vouches: Mapping[int, Any]) -> dict[int, bytes]:
        """The survivors' vouches for the survivor list in; each survivor's unmasking request
        out: the list, the shares dealt to it, the dealers' commitments to them, and every
        other survivor's vouch to it."""
        st = self._state
        if st is None:
            raise SecAggError("requests need a collected aggregation (call collect first)")
        where, surv, ns = _where(st.round_id, st.batch_id), st.survivors, len(st.survivors)
        size = HEADER_BYTES + _COMMIT * (ns - 1) + TAG_BYTES
        tags = {}
        for v in surv:
            if vouches.get(v) is None:
                raise SecAggAbort(f"{where}: party {v} sent no vouch for the survivor list", v)
            want = _Header(
                VOUCH, self.session, v, SERVER, st.round_id, st.batch_id, st.offset, st.count
            )
            tags[v] = _open(vouches[v], self._auth[v], want, size, where, v, f"party {v}")
        head = struct.pack(f">I{ns}I", ns, *surv)
        out = {}
        for v in surv:
            others = [u for u in surv if u != v]
            fwd = b"".join(
                self._records[u][(v - (v > u)) * SHARE_RECORD_BYTES :][:SHARE_RECORD_BYTES]
                for u in others
            )
            coms = b"".join(st.commits[u][_COMMIT * (1 + v) :][:_COMMIT] for u in others)
            vouched = b"".join(
                tags[u][_COMMIT * [w for w in surv if w != u].index(v) :][:_COMMIT] for u in others
            )
            msg = _HEADER.pack(
                REQUEST, self.session, SERVER, v, st.round_id, st.batch_id, st.offset, st.count
            )
            msg += head + fwd + coms + vouched
            out[v] = msg + _mac(self._auth[v], msg)
        return out

    def finish(self, responses: Mapping[int, Any]) -> np.ndarray:
        """The sum over the survivors (uint64, length ``count``), or SecAggAbort naming a party."""
        st, self._state = self._state, None
        if st is None:
            raise SecAggError("finish needs a collected aggregation (call collect first)")
        where = _where(st.round_id, st.batch_id)
        ns, nd, t = len(st.survivors), len(st.dropped), self.threshold
        need = packed_bytes(st.count, self.bits)
        # per dropped party: a commitment nonce, then the aggregation's 32-byte pair key or the
        # packed round segment
        reveal = 32 + (32 if st.offset == NO_OFFSET else need)
        size = HEADER_BYTES + shamir.SHARE_BYTES * ns + reveal * nd + TAG_BYTES
        got, missing = {}, []
        for v in st.survivors:
            msg = responses.get(v)
            if msg is None:
                missing.append(v)
                continue
            want = _Header(
                RESPONSE, self.session, v, SERVER, st.round_id, st.batch_id, st.offset, st.count
            )
            got[v] = _open(msg, self._auth[v], want, size, where, v, f"party {v}")
        if missing and (st.dropped or len(got) < t):
            why = (
                f"it holds the pair masks with dropped parties {st.dropped}"
                if st.dropped
                else f"fewer than {t} answered"
            )
            raise SecAggAbort(
                f"{where}: parties {missing} sent no unmasking response ({why})",
                missing[0],
                missing,
            )
        resp = sorted(got)
        M, sess, rb = self.n_parties, self.session, (st.round_id, st.batch_id)
        lam = shamir.lagrange_at_zero(resp[:t])
        lam2 = shamir.lagrange_at_zero(resp[-t:]) if len(resp) > t else None
        total = unpack_sum([st.bodies[u] for u in st.survivors], self.bits, st.count)
        for pos, u in enumerate(st.survivors):
            com = st.commits[u]
            shares = {}
            for v in resp:
                raw = got[v][32 * pos : 32 * pos + 32]
                # every share against the dealer's commitment: the responder that altered one is
                # named, with exactly t responders as with more
                if _commit(b"share", sess, u, v, *rb, raw) != com[_COMMIT * (1 + v) :][:_COMMIT]:
                    raise SecAggAbort(
                        f"{where}: party {v}'s share of party {u}'s self-mask seed does not match "
                        f"party {u}'s commitment (altered by party {v})",
                        v,
                    )
                try:
                    shares[v] = shamir.from_bytes(raw)
                except ValueError:
                    raise SecAggAbort(f"{where}: party {v} sent an invalid share", v) from None
            seed = shamir.reconstruct(shares, lam)
            # the shares are what u dealt; if they do not open u's committed seed (or disagree
            # among themselves), u dealt them wrongly
            if _commit(b"seed", sess, u, u, *rb, shamir.to_bytes(seed)) != com[:_COMMIT] or (
                lam2 is not None and shamir.reconstruct(shares, lam2) != seed
            ):
                raise SecAggAbort(
                    f"{where}: the shares party {u} dealt of its self-mask seed do not open its "
                    f"commitment (dealt wrongly by party {u})",
                    u,
                )
            total -= _self_mask(seed, st.count, self.bits).astype(np.uint64)
        for pos, u in enumerate(st.dropped):
            for v in st.survivors:
                start = 32 * ns + reveal * pos
                rec = got[v][start : start + reveal]
                at = _COMMIT * (1 + M + u - (u > v))  # v's reveal commitments skip v itself
                if _commit(b"reveal", sess, v, u, *rb, rec) != st.commits[v][at : at + _COMMIT]:
                    raise SecAggAbort(
                        f"{where}: party {v}'s pair mask with dropped party {u} does not match "
                        f"party {v}'s commitment (altered by party {v})",
                        v,
                    )
                part = rec[32:]
                if st.offset == NO_OFFSET:
                    m = _aes_stream(part, st.count, "<u4").astype(np.uint64)
                else:
                    m = unpack_bits(part, self.bits, st.count)
                # survivor v added m_vu if v < u, subtracted it otherwise; uint64 wraps mod 2^64
                if v < u:
                    total -= m
                else:
                    total += m
        self.survivors = list(st.survivors)
        return total & np.uint64((1 << self.bits) - 1)


def aggregate_round(
    server: SecAggServer,
    parties: Mapping[int, SecAggParty],
    values: Mapping[int, np.ndarray],
    *,
    round_id: int,
    batch_id: int,
    offset: int | None = None,
    drop: Iterable[int] = (),
) -> np.ndarray:
    """One aggregation with every party in this process (tests, demos, benchmarks); parties in
    ``drop`` go silent after key agreement."""
    gone = set(drop)
    msgs = {
        k: p.mask(values[k], round_id=round_id, batch_id=batch_id, offset=offset)
        for k, p in parties.items()
        if k not in gone
    }
    count = int(np.asarray(next(iter(values.values()))).size)
    checks = server.collect(msgs, round_id=round_id, batch_id=batch_id, count=count, offset=offset)
    reqs = server.requests({v: parties[v].vouch(c) for v, c in checks.items()})
    return server.finish({v: parties[v].respond(r) for v, r in reqs.items()})
