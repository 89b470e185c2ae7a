"""Residue-number arithmetic for exact modular matrix products with float64 BLAS.

An integer modulo ``P = p_1 * ... * p_r`` is kept as its ``r`` residues modulo 21-bit primes
``p_i`` (Chinese remainder theorem: Z_P is the product of the fields GF(p_i), so Shamir sharing,
sums and products work residue by residue). Why 21 bits: a residue centred in
``(-p/2, p/2)`` is below 2**20 in magnitude, a product of two below 2**40, and a sum of
:data:`CHUNK_ROWS` = 4096 such products below 2**52 < 2**53, so ONE float64 matrix product per
prime and row chunk is exact (a BLAS ``dgemm``), instead of the 16 limb products a 56-bit prime
field needs. The number of primes grows with the magnitude to be represented (:func:`primes_for`),
so the row count is bounded by memory only.

Also here: packing three 21-bit residues into one uint64 word (what crosses the channel), a
pseudo-random generator of uniform residues from a 32-byte seed (AES-256-CTR, exact rejection
sampling), and CRT reconstruction of signed integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BITS = 21
# the largest primes below 2**21 (checked by the tests); more than any realistic n needs
PRIMES = (2097143, 2097133, 2097131, 2097097, 2097091, 2097083, 2097047, 2097041)
CHUNK_ROWS = 4096  # 4096 * (2**20)**2 = 2**52: a chunk's float64 dot products stay exact
_MASK = (1 << BITS) - 1


def primes_for(magnitude: int) -> tuple[int, ...]:
    """The fewest primes whose product P exceeds ``2 * magnitude`` (so |v| <= magnitude is
    recovered from v mod P as a signed integer)."""
    need = 2 * int(magnitude) + 1
    prod = 1
    for r, p in enumerate(PRIMES, start=1):
        prod *= p
        if prod > need:
            return PRIMES[:r]
    raise ValueError(
        f"magnitude must be < {math.prod(PRIMES) // 2} ({len(PRIMES)} primes), got {magnitude}"
    )


def to_residues(X: np.ndarray, primes: Sequence[int]) -> np.ndarray:
    """Signed int64 array -> residues in [0, p_i), shape ``(r, *X.shape)``, int64."""
    X = np.asarray(X, dtype=np.int64)
    return np.stack([np.mod(X, p) for p in primes])


def from_residues(R: np.ndarray, primes: Sequence[int]) -> np.ndarray:
    """CRT: residues ``(r, ...)`` -> the signed integers in (-P/2, P/2) (object array)."""
    P = math.prod(primes)
    acc = np.zeros(R.shape[1:], dtype=object)
    for i, p in enumerate(primes):
        q = P // p
        acc = acc + R[i].astype(object) * (q * pow(q, -1, p))
    acc = acc % P
    return np.where(acc > P // 2, acc - P, acc)


def pack(R: np.ndarray) -> bytes:
    """Residues ``(r, ...)`` (each < 2**21) -> bytes: three residues per little-endian uint64."""
    r = R.shape[0]
    flat = R.reshape(r, -1).astype(np.uint64)
    words = []
    for g in range(0, r, 3):
        w = flat[g].copy()
        for k in range(1, min(3, r - g)):
            w |= flat[g + k] << np.uint64(BITS * k)
        words.append(w)
    return np.stack(words).astype("<u8").tobytes()


def unpack(data: bytes, r: int, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of :func:`pack`; raises ValueError if the payload has the wrong length."""
    count = int(np.prod(shape))
    groups = -(-r // 3)
    if len(data) != 8 * groups * count:
        raise ValueError(
            f"a packed share of shape {shape} with {r} residues must be "
            f"{8 * groups * count} bytes, got {len(data)}"
        )
    W = np.frombuffer(data, dtype="<u8").reshape(groups, count)
    out = np.empty((r, count), dtype=np.int64)
    for i in range(r):
        out[i] = ((W[i // 3] >> np.uint64(BITS * (i % 3))) & np.uint64(_MASK)).astype(np.int64)
    return out.reshape(r, *shape)


def packed_size(r: int, count: int) -> int:
    """Bytes of ``count`` elements of ``r`` residues once packed."""
    return 8 * -(-r // 3) * count


class ResidueStream:
    """Uniform residues mod each prime from a 32-byte seed: AES-256-CTR keystream, 21-bit words,
    values >= p rejected (exactly uniform). Two holders of the seed draw the same sequence as
    long as they ask for the same sizes in the same order."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError(f"seed must be 32 bytes, got {len(seed)}")
        self._enc = Cipher(algorithms.AES(seed), modes.CTR(b"\0" * 16)).encryptor()

    def _words(self, count: int) -> np.ndarray:
        raw = self._enc.update(bytes(4 * count))
        return (np.frombuffer(raw, dtype="<u4") & np.uint32(_MASK)).astype(np.int64)

    def uniform(self, p: int, count: int) -> np.ndarray:
        """``count`` independent uniform integers in [0, p) (int64)."""
        out = self._words(count + 64 + count // 1024)
        out = out[out < p]
        while out.size < count:  # rejection left too few: continue the same stream
            more = self._words(count - out.size + 64)
            out = np.concatenate([out, more[more < p]])
        return out[:count]

    def residues(self, primes: Sequence[int], shape: tuple[int, ...]) -> np.ndarray:
        """Uniform residues, shape ``(r, *shape)``."""
        count = int(np.prod(shape))
        return np.stack([self.uniform(p, count).reshape(shape) for p in primes])


def centred(R: np.ndarray, p: int) -> np.ndarray:
    """Residues in [0, p) -> float64 in (-p/2, p/2) (same class mod p, half the magnitude)."""
    F = R.astype(np.float64)
    F[R > p // 2] -= p
    return F


def matmul_t_mod(A: np.ndarray, B: np.ndarray, primes: Sequence[int]) -> np.ndarray:
    """``A[i].T @ B[i] mod p_i`` for residue arrays ``(r, n, ca)`` and ``(r, n, cb)``: one exact
    float64 product per prime and chunk of :data:`CHUNK_ROWS` rows; result int64 in [0, p)."""
    r, n = A.shape[0], A.shape[1]
    out = np.zeros((r, A.shape[2], B.shape[2]), dtype=np.int64)
    for s in range(0, n, CHUNK_ROWS):
        for i, p in enumerate(primes):
            a = centred(A[i, s : s + CHUNK_ROWS], p)
            b = centred(B[i, s : s + CHUNK_ROWS], p)
            out[i] = (out[i] + (a.T @ b).astype(np.int64)) % p  # |a.T @ b| < 2**52: exact
    return out


def lagrange(nodes: Sequence[int], at: int, p: int) -> list[int]:
    """Coefficients l_k with f(at) = sum_k l_k f(nodes[k]) mod p for deg f < len(nodes)."""
    out = []
    for k, xk in enumerate(nodes):
        num, den = 1, 1
        for j, xj in enumerate(nodes):
            if j != k:
                num = num * (at - xj) % p
                den = den * (xk - xj) % p
        out.append(num * pow(den, -1, p) % p)
    return out
