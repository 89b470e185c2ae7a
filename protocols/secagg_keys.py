"""Secure aggregation's key derivation, pair and self masks (AES-256-CTR PRG) and commitments.

Split from ``protocols.secagg`` (whose docstring describes the protocol).
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from protocols import shamir

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


def _stream_info(round_id: int) -> bytes:
    return _V + b"round-stream" + struct.pack(">Q", round_id)


def _self_mask(seed: int, n: int, bits: int) -> np.ndarray:
    """PRG(b_u): AES-256-CTR keystream under HKDF(seed); words of the masked values' width."""
    return _keystream(shamir.to_bytes(seed), _V + b"self", n, "<u2" if bits <= 16 else "<u4")


def _raw(sk: X25519PrivateKey) -> bytes:
    return sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
