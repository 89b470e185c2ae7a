"""Shamir sharing in numpy: degree-t polynomial shares of int64 secrets over a prime field below
2**63, with coefficients drawn exactly from the OS CSPRNG. Used by the sender side of the MPyC
programs (protocols.shamir_mpyc_ops) and re-exported by protocols.shamir_products."""

from __future__ import annotations

import os

import numpy as np

MAX_PARTIES = 31  # Horner steps acc * x + c stay < 2**63 for x <= 31 and acc, c < 2**57


def uniform_mod(p: int, size: int) -> np.ndarray:
    """``size`` uniform integers in [0, p) from the OS CSPRNG, exactly (rejection sampling)."""
    bits = p.bit_length()
    if bits > 63:
        raise ValueError(f"p must be < 2**63, got {bits} bits")
    out = np.empty(0, dtype=np.int64)
    while out.size < size:
        need = size - out.size
        raw = np.frombuffer(os.urandom(8 * (2 * need + 16)), dtype=np.uint64)
        cand = (raw & np.uint64((1 << bits) - 1)).astype(np.int64)
        out = np.concatenate([out, cand[cand < p][:need]])
    return out


def shamir_split(secrets_: np.ndarray, p: int, t: int, m: int) -> np.ndarray:
    """Shamir shares (m x N, int64) of int64 secrets in (-p/2, p/2): degree-t polynomials with
    uniform coefficients, evaluated at x = 1..m (MPyC's evaluation points)."""
    if not 0 <= t < m <= MAX_PARTIES:
        raise ValueError(f"need 0 <= t < m <= {MAX_PARTIES}, got t={t}, m={m}")
    s = np.asarray(secrets_, dtype=np.int64).reshape(-1)
    s = np.where(s < 0, s + p, s)
    coeffs = uniform_mod(p, t * s.size).reshape(t, s.size)
    shares = np.empty((m, s.size), dtype=np.int64)
    for j in range(m):
        x = j + 1
        acc = coeffs[t - 1] if t else s
        for c in [*coeffs[: t - 1][::-1], s] if t else []:
            acc = (acc * x + c) % p  # < 31 * 2**57 + 2**57 < 2**63: no overflow
        shares[j] = acc
    return shares
