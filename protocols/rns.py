"""Residue-number arithmetic for exact modular matrix products with float64 BLAS.

An integer modulo ``P = p_1 * ... * p_r`` is kept as its ``r`` residues modulo 21-bit primes
``p_i`` (Chinese remainder theorem: Z_P is the product of the fields GF(p_i), so Shamir sharing,
sums and products work residue by residue). Why 21 bits: a residue centred in
``[-p/2, p/2]`` is at most 2**20 in magnitude, a product of two at most 2**40, and a sum of
:data:`CHUNK_ROWS` = 8192 such products at most 2**53, so ONE float64 matrix product per
prime and row chunk is exact (a BLAS ``dgemm``), instead of the 16 limb products a 56-bit prime
field needs. The number of primes grows with the magnitude to be represented (:func:`primes_for`),
so the row count is bounded by memory only.

Residues are kept as float64 in [-p/2, p/2] (fixed-point inputs are their own residues, and a
reduction is a multiply, a rounding and a multiply-subtract: no integer division); they cross
the channel as float32 (exact below 2**24). Also here: a pseudo-random generator of uniform
residues from a 32-byte seed (AES-256-CTR, exact rejection sampling), and CRT reconstruction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BITS = 21
# the largest primes below 2**21 (checked by the tests); more than any realistic n needs
PRIMES = (2097143, 2097133, 2097131, 2097097, 2097091, 2097083, 2097047, 2097041)
CHUNK_ROWS = 8192  # 8192 * (2**20)**2 = 2**53: a chunk's float64 dot products stay exact
_MASK = (1 << BITS) - 1
# OpenSSL loads its AES provider on the first context (~20 ms): pay that at import, not in the
# first secure phase
Cipher(algorithms.AES(bytes(32)), modes.CTR(bytes(16))).encryptor().update(bytes(16))


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
    """Signed int64 array -> integer residues in [0, p_i), shape ``(r, *X.shape)``, int64."""
    X = np.asarray(X, dtype=np.int64)
    return np.stack([np.mod(X, p) for p in primes])


def centred_residues(X: np.ndarray, primes: Sequence[int]) -> np.ndarray:
    """Signed ints -> float64 residues in [-p/2, p/2], shape ``(r, *X.shape)``. Entries already
    below p/2 in magnitude (fixed-point inputs) are their own residues: no division."""
    X = np.asarray(X, dtype=np.int64)
    if X.size == 0 or np.abs(X).max() < min(primes) // 2:
        return np.broadcast_to(X.astype(np.float64), (len(primes), *X.shape)).copy()
    return np.stack([reduce(np.mod(X, p).astype(np.float64), p) for p in primes])


def centre(R: np.ndarray, primes: Sequence[int]) -> np.ndarray:
    """Integer residues in [0, p_i) (r, ...) -> float64 in [-p/2, p/2]."""
    F = np.asarray(R, dtype=np.float64).copy()
    for i, p in enumerate(primes):
        F[i][F[i] > p // 2] -= p
    return F


def reduce(F: np.ndarray, p: int, tmp: np.ndarray | None = None) -> np.ndarray:
    """Float64 integers (|F| < 2**52) -> the same class mod p in [-p/2, p/2], in place
    (``tmp``: an optional scratch array of F's shape, to allocate nothing)."""
    q = np.multiply(F, 1.0 / p, out=tmp)
    np.rint(q, out=q)  # the nearest multiple: exact enough, F / p < 2**31
    q *= p
    F -= q
    return F


def from_residues(R: np.ndarray, primes: Sequence[int]) -> np.ndarray:
    """CRT: residues ``(r, ...)`` (any representatives) -> the signed integers in (-P/2, P/2)
    (object array)."""
    P = math.prod(primes)
    acc = np.zeros(R.shape[1:], dtype=object)
    for i, p in enumerate(primes):
        q = P // p
        acc = acc + (np.asarray(R[i]).astype(np.int64) % p).astype(object) * (q * pow(q, -1, p))
    acc = acc % P
    return np.where(acc > P // 2, acc - P, acc)


def pack(R: np.ndarray) -> memoryview:
    """Centred residues (|v| <= 2**20) -> bytes: float32, exact for integers below 2**24 (a
    byte view of ``R`` itself when it is already contiguous little-endian float32: no copy)."""
    return memoryview(np.ascontiguousarray(R, dtype="<f4")).cast("B")


def unpack(data: bytes, r: int, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of :func:`pack` (float32 view, shape ``(r, *shape)``); checks the length."""
    count = r * int(np.prod(shape))
    if len(data) != 4 * count:
        raise ValueError(
            f"a share of shape {shape} with {r} residues must be {4 * count} bytes, got {len(data)}"
        )
    return np.frombuffer(data, dtype="<f4").reshape(r, *shape)


def packed_size(r: int, count: int) -> int:
    """Bytes of ``count`` elements of ``r`` residues once packed."""
    return 4 * r * count


_ZEROS = b""  # the plaintext of every keystream draw, grown to the largest draw


class ResidueStream:
    """Uniform residues mod each prime from a 32-byte seed: AES-256-CTR keystream, 21-bit words,
    values >= p replaced by the next accepted words of the stream (exactly uniform). Two holders
    of the seed draw the same sequence as long as they ask for the same sizes in the same order.
    """

    SEED_BYTES = 32

    def __init__(self, seed: bytes) -> None:
        if len(seed) != self.SEED_BYTES:
            raise ValueError(f"seed must be {self.SEED_BYTES} bytes, got {len(seed)}")
        self._enc = Cipher(algorithms.AES(seed), modes.CTR(b"\0" * 16)).encryptor()

    def _words(self, count: int) -> np.ndarray:
        # the keystream (CTR of zeros) written straight into the array that is returned: no
        # fresh zero input, no bytes object, no second array for the mask
        global _ZEROS
        if len(_ZEROS) < 4 * count:
            _ZEROS = bytes(4 * count)
        out = np.empty(count + 4, dtype="<u4")  # update_into wants 15 bytes of slack
        self._enc.update_into(memoryview(_ZEROS)[: 4 * count], memoryview(out).cast("B"))
        out = out[:count]
        out &= np.uint32(_MASK)
        return out

    def uniform(self, p: int, count: int) -> np.ndarray:
        """``count`` independent uniform integers in [0, p) (uint32)."""
        out = self._words(count)
        bad = np.flatnonzero(out >= p)  # rare: p is within 2**-16 of 2**21
        while bad.size:
            more = self._words(bad.size + 8)
            more = more[more < p][: bad.size]
            out[bad[: more.size]] = more
            bad = bad[more.size :]
        return out

    def centred(
        self, primes: Sequence[int], shape: tuple[int, ...], dtype: type = np.float64
    ) -> np.ndarray:
        """Uniform residues in [-(p-1)/2, (p-1)/2], shape ``(r, *shape)``, as ``dtype`` (float32
        holds them exactly: the same values as float64, drawn in the same order)."""
        count = int(np.prod(shape))
        out = np.empty((len(primes), count), dtype=dtype)
        for i, p in enumerate(primes):
            self.fill_centred(p, out[i])
        return out.reshape(len(primes), *shape)

    def fill_centred(self, p: int, dst: np.ndarray) -> None:
        """Write ``dst.size`` uniform residues mod ``p``, centred, into the contiguous float
        array ``dst`` (the next draws of the stream, as :meth:`centred` draws them)."""
        if not dst.flags.c_contiguous:  # reshape would copy, and the draws would be lost
            raise ValueError(f"dst must be C-contiguous, got strides {dst.strides}")
        flat = dst.reshape(-1)  # a view
        flat[:] = self.uniform(p, flat.size)
        flat -= (p - 1) // 2


def matmul_t_mod(
    A: np.ndarray,
    B: np.ndarray,
    primes: Sequence[int],
    a_max: float = 2**20,
    b_max: float = 2**20,
) -> np.ndarray:
    """``A[i].T @ B[i] mod p_i`` for residues ``(r, n, ca)`` and ``(r, n, cb)`` with |A| <=
    ``a_max``, |B| <= ``b_max`` (centred residues: 2**20): one exact float64 product per prime
    and chunk of rows (:data:`CHUNK_ROWS`, fewer for larger bounds, so that a chunk's sums stay
    below 2**53); returns float64 in [-p/2, p/2]."""
    r, n = A.shape[0], A.shape[1]
    step = int(min(CHUNK_ROWS, 2**53 // (a_max * b_max)))
    out = np.zeros((r, A.shape[2], B.shape[2]))
    for s in range(0, n, step):
        for i, p in enumerate(primes):
            a = np.asarray(A[i, s : s + step], dtype=np.float64)
            b = np.asarray(B[i, s : s + step], dtype=np.float64)
            out[i] += reduce(a.T @ b, p)  # |a.T @ b| <= step * a_max * b_max <= 2**53: exact
    for i, p in enumerate(primes):
        reduce(out[i], p)
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
