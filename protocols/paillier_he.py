"""Paillier helpers on python-paillier (``phe``) with gmpy2 arithmetic: the FATE/Hardy-style twin.

Values are fixed-point integers modulo n (``round(v * 2**frac_bits)``, negatives as ``n - |m|``).
A ciphertext is ``(1 + m n) r^n mod n^2`` (g = n + 1); adding plaintexts multiplies ciphertexts,
multiplying by a plaintext integer ``k`` raises to ``k`` (a negative ``k`` uses the inverse
ciphertext, so exponents stay short). Ciphertexts travel as fixed-width big-endian bytes.

This module knows nothing of models or datasets; errors are :class:`PaillierParameterError`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import gmpy2
import numpy as np
from phe import paillier

MIN_KEY_BITS = 256  # VFLAIR's benchmark setting; 2048 is the default and the secure choice


class PaillierParameterError(ValueError):
    """Malformed Paillier parameters or operands."""


def generate_keypair(
    n_bits: int = 2048,
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    """A fresh key pair (OS entropy); ``n_bits`` >= 256 and a multiple of 8."""
    if not isinstance(n_bits, int) or n_bits < MIN_KEY_BITS or n_bits % 8:
        raise PaillierParameterError(
            f"n_bits must be an integer >= {MIN_KEY_BITS} and a multiple of 8, got {n_bits!r}"
        )
    return paillier.generate_paillier_keypair(n_length=n_bits)


def ct_width(pub: paillier.PaillierPublicKey) -> int:
    """Bytes of one serialized ciphertext (an integer below n^2)."""
    return (pub.nsquare.bit_length() + 7) // 8


def public_key_bytes(pub: paillier.PaillierPublicKey) -> bytes:
    """The public key as bytes (n only: g = n + 1)."""
    n = int(pub.n)
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def load_public_key(data: bytes) -> paillier.PaillierPublicKey:
    return paillier.PaillierPublicKey(int.from_bytes(data, "big"))


def encode(pub: paillier.PaillierPublicKey, values: np.ndarray, frac_bits: int) -> list[int]:
    """Fixed-point encode reals to integers modulo n."""
    n = pub.n
    scaled = np.rint(np.asarray(values, dtype=np.float64).ravel() * 2.0**frac_bits)
    if not np.all(np.isfinite(scaled)) or np.any(np.abs(scaled) >= 2.0**62):
        raise PaillierParameterError(
            f"values * 2^{frac_bits} must be finite and < 2^62 in magnitude"
        )
    return [int(v) % n for v in scaled.astype(np.int64)]


def decode(pub: paillier.PaillierPublicKey, ints: Sequence[int], frac_bits: int) -> np.ndarray:
    """Signed fixed-point decode: residues above n/2 are negative."""
    n, half = int(pub.n), int(pub.n) // 2
    return np.array([(int(m) - n if int(m) > half else int(m)) / 2.0**frac_bits for m in ints])


def raw_encrypt(pub: paillier.PaillierPublicKey, m: int) -> gmpy2.mpz:
    """Encrypt one residue m < n with fresh randomness r (the expensive r^n mod n^2)."""
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    r = gmpy2.mpz(secrets.randbelow(int(n) - 1) + 1)
    return (1 + gmpy2.mpz(m) * n) % n2 * gmpy2.powmod(r, n, n2) % n2


def encrypt_vector(
    pub: paillier.PaillierPublicKey, values: np.ndarray, frac_bits: int
) -> list[gmpy2.mpz]:
    """Encrypt each entry of ``values`` (one ciphertext per value, as FATE does)."""
    return [raw_encrypt(pub, m) for m in encode(pub, values, frac_bits)]


def add_encrypted(
    pub: paillier.PaillierPublicKey, parts: Sequence[Sequence[gmpy2.mpz]]
) -> list[gmpy2.mpz]:
    """Entry-wise sum of encrypted vectors (ciphertext products mod n^2)."""
    if not parts:
        raise PaillierParameterError("add_encrypted needs at least one operand")
    n2 = gmpy2.mpz(pub.nsquare)
    out = list(parts[0])
    for other in parts[1:]:
        if len(other) != len(out):
            raise PaillierParameterError(
                f"operands must have equal length, got {len(other)} vs {len(out)}"
            )
        out = [a * b % n2 for a, b in zip(out, other, strict=True)]
    return out


def add_plain(
    pub: paillier.PaillierPublicKey, cts: Sequence[gmpy2.mpz], values: np.ndarray, frac_bits: int
) -> list[gmpy2.mpz]:
    """Add plaintext reals: multiply by (1 + m n), no randomness needed."""
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    ms = encode(pub, values, frac_bits)
    if len(ms) != len(cts):
        raise PaillierParameterError(f"plain vector has {len(ms)} entries, ciphertext {len(cts)}")
    return [c * ((1 + gmpy2.mpz(m) * n) % n2) % n2 for c, m in zip(cts, ms, strict=True)]


def masked_matvec(
    pub: paillier.PaillierPublicKey,
    d_cts: Sequence[gmpy2.mpz],
    X: np.ndarray,
    x_frac_bits: int,
    rng: np.random.Generator,
) -> tuple[list[gmpy2.mpz], list[int]]:
    """Encrypted ``X^T d + R`` (R uniform modulo n, returned for the caller to subtract).

    ``X`` is fixed-point encoded with ``x_frac_bits``; the result carries the sum of both
    operands' fractional bits.
    """
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    b, F = X.shape
    if b != len(d_cts):
        raise PaillierParameterError(f"X has {b} rows but the residual {len(d_cts)} entries")
    Xi = np.rint(np.asarray(X, dtype=np.float64) * 2.0**x_frac_bits).astype(np.int64)
    inv = [gmpy2.invert(c, n2) for c in d_cts]
    out, masks = [], []
    nbytes = (int(n).bit_length() + 7) // 8 + 16  # 128 extra bits: statistically uniform mod n
    for j in range(F):
        acc = gmpy2.mpz(1)
        for i in range(b):
            e = int(Xi[i, j])
            if e > 0:
                acc = acc * gmpy2.powmod(d_cts[i], e, n2) % n2
            elif e < 0:
                acc = acc * gmpy2.powmod(inv[i], -e, n2) % n2
        R = int.from_bytes(rng.bytes(nbytes), "big") % int(n)
        out.append(acc * ((1 + gmpy2.mpz(R) * n) % n2) % n2)
        masks.append(R)
    return out, masks


def decrypt_vector(priv: paillier.PaillierPrivateKey, cts: Sequence[gmpy2.mpz]) -> list[int]:
    """Residues modulo n (CRT decryption)."""
    return [int(priv.raw_decrypt(int(c))) for c in cts]


def unmask(
    pub: paillier.PaillierPublicKey, masked: Sequence[int], masks: Sequence[int], frac_bits: int
) -> np.ndarray:
    """Subtract the masks modulo n and decode."""
    n = int(pub.n)
    return decode(
        pub, [(int(a) - int(r)) % n for a, r in zip(masked, masks, strict=True)], frac_bits
    )


def to_bytes(pub: paillier.PaillierPublicKey, cts: Sequence[gmpy2.mpz]) -> bytes:
    w = ct_width(pub)
    return b"".join(int(c).to_bytes(w, "big") for c in cts)


def from_bytes(pub: paillier.PaillierPublicKey, data: bytes) -> list[gmpy2.mpz]:
    w = ct_width(pub)
    if len(data) % w:
        raise PaillierParameterError(f"ciphertext bytes must be a multiple of {w}, got {len(data)}")
    return [gmpy2.mpz(int.from_bytes(data[i : i + w], "big")) for i in range(0, len(data), w)]
