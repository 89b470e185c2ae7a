"""t-of-M Shamir secret sharing of 32-byte secrets over GF(p), p = 2^255 - 19, in Python ints.

Party ``i`` holds the share f(i + 1) of a random polynomial f of degree ``threshold - 1`` with
f(0) = secret: any ``threshold`` shares give the secret (Lagrange at 0), fewer reveal nothing.
Secure aggregation uses it for the self-mask seeds (Bonawitz et al. 2017); nothing here is
specific to it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping

PRIME = (1 << 255) - 19  # a well-known prime just below 2^255: shares fit in 32 bytes
SHARE_BYTES = 32


def random_secret() -> int:
    """A uniform element of GF(p) from the OS CSPRNG."""
    return secrets.randbelow(PRIME)


def share(secret: int, *, n_parties: int, threshold: int) -> list[int]:
    """Shares f(1), ..., f(n_parties) of ``secret``; party i gets element i."""
    if not 1 <= threshold <= n_parties:
        raise ValueError(f"threshold must be in [1, {n_parties}], got {threshold}")
    if not 0 <= secret < PRIME:
        raise ValueError("secret must be an element of GF(p)")
    coeffs = [secret] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = []
    for x in range(1, n_parties + 1):
        acc = 0
        for c in reversed(coeffs):  # Horner
            acc = (acc * x + c) % PRIME
        out.append(acc)
    return out


def lagrange_at_zero(parties: Iterable[int]) -> dict[int, int]:
    """Coefficients l_i with f(0) = sum_i l_i f(i + 1) for the given (distinct) party indices."""
    xs = [int(i) + 1 for i in parties]
    if len(set(xs)) != len(xs):
        raise ValueError("party indices must be distinct")
    out = {}
    for xi in xs:
        num, den = 1, 1
        for xj in xs:
            if xj != xi:
                num = num * xj % PRIME
                den = den * (xj - xi) % PRIME
        out[xi - 1] = num * pow(den, -1, PRIME) % PRIME
    return out


def reconstruct(shares: Mapping[int, int], coefficients: Mapping[int, int] | None = None) -> int:
    """The secret from ``{party: share}`` (exactly the parties of ``coefficients`` if given)."""
    lam = coefficients if coefficients is not None else lagrange_at_zero(shares)
    return sum(lam[i] * shares[i] for i in lam) % PRIME


def to_bytes(value: int) -> bytes:
    return int(value).to_bytes(SHARE_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """A field element from 32 bytes; a value >= p is not one (ValueError)."""
    v = int.from_bytes(data, "big")
    if len(data) != SHARE_BYTES or v >= PRIME:
        raise ValueError("a share must be 32 bytes encoding an element of GF(p)")
    return v
