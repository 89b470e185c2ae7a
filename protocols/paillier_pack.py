"""Several signed fixed-point integers in one Paillier plaintext, and ciphertexts packed by Horner.

A plaintext ``T = sum_j v_j 2^(W j)`` holds ``slots`` signed integers of at most ``W - 1`` bits
(balanced base-2^W digits). Sums of packed plaintexts are packed sums as long as every slot's sum
stays below 2^(W-1) in magnitude, so ciphertext products add slot-wise. ``T`` is read signed
modulo n (above n/2 is negative), so the top slot may be negative too; the slots must fit in
``n_bits - 2`` bits.

:func:`pack_ciphertexts` shifts ciphertexts of packed values into one (``prod c_j^(2^(S j))``
by Horner's rule: ``S`` squarings per ciphertext), so a reply of many small sums costs one
decryption and one ciphertext's bytes per ``capacity`` sums.
"""

from __future__ import annotations

from collections.abc import Sequence

import gmpy2

from protocols.paillier_he import PaillierParameterError


def capacity(n_bits: int, slot_bits: int) -> int:
    """How many slots of ``slot_bits`` fit below n/2 for an ``n_bits`` modulus."""
    if slot_bits < 2:
        raise PaillierParameterError(f"slot_bits must be >= 2, got {slot_bits}")
    return max(0, (n_bits - 2) // slot_bits)


def pack(values: Sequence[int], slot_bits: int, n: int) -> int:
    """``sum v_j 2^(W j) mod n``; each |v_j| < 2^(W-1)."""
    half = 1 << (slot_bits - 1)
    total = 0
    for j, v in enumerate(values):
        v = int(v)
        if not -half < v < half:
            raise PaillierParameterError(
                f"packed values must be below 2^{slot_bits - 1} in magnitude, got {v}"
            )
        total += v << (slot_bits * j)
    return total % n


def unpack(residue: int, slots: int, slot_bits: int, n: int) -> list[int]:
    """The ``slots`` signed values of a decrypted residue (inverse of :func:`pack` of sums)."""
    t = int(residue)
    t = t - n if t > n // 2 else t
    base, half = 1 << slot_bits, 1 << (slot_bits - 1)
    out = []
    for _ in range(slots):
        d = t % base  # Python: non-negative remainder
        if d >= half:
            d -= base
        out.append(d)
        t = (t - d) >> slot_bits
    if t != 0:
        raise PaillierParameterError(
            f"a packed sum overflowed its {slots} slots of {slot_bits} bits (left {t})"
        )
    return out


def pack_ciphertexts(cts: Sequence[gmpy2.mpz], shift_bits: int, n_square: gmpy2.mpz) -> gmpy2.mpz:
    """One ciphertext of ``sum_j m_j 2^(shift j)`` from ciphertexts of ``m_j``: Horner's rule."""
    if not cts:
        raise PaillierParameterError("pack_ciphertexts needs at least one ciphertext")
    step = gmpy2.mpz(1) << shift_bits
    acc = gmpy2.mpz(cts[-1])
    for c in reversed(cts[:-1]):
        # 1 (empty cells so far) shifted is 1: skip its squarings
        acc = c if acc == 1 else gmpy2.powmod(acc, step, n_square) * c % n_square
    return acc
