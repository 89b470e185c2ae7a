"""Secure aggregation's client: key agreement, masking, the consistency vouch, unmasking help.

Split from ``protocols.secagg`` (whose docstring describes the protocol).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from protocols import shamir
from protocols.bitpack import pack_bits
from protocols.secagg_keys import (
    _V,
    _aes_stream,
    _commit,
    _hkdf,
    _keystream,
    _mac,
    _raw,
    _self_mask,
    _stream_info,
)
from protocols.secagg_unmask import _Unmasking
from protocols.secagg_wire import (
    _HEADER,
    _NONCE,
    MASKED,
    NO_OFFSET,
    SERVER,
    SecAggAbort,
    SecAggError,
    _check_params,
    _params,
)


class SecAggParty(_Unmasking):
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
