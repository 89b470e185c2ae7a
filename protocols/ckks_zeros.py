"""Public-key CKKS encryptions of zero at the data level: SEAL's arithmetic, a CSPRNG's samples.

SEAL's ``Encryptor.encrypt_zero`` encrypts at the key level (every prime, the special one too)
and divides by the special prime to come down to the data level: 9 NTTs at the key level, 6 more
for the division, and its own sampling (3.3-4.3 ms at N = 8192 here, the largest single cost of
a passive party's minibatch). HE-VFL never switches keys, so the ciphertexts need not pass
through the key level. This module makes the same kind of encryption directly modulo the data
primes ``Q = q_0 q_1``:

    c = (u pk_0 + e_0, u pk_1 + e_1)  mod Q,

the public-key encryption of Lyubashevsky, Peikert and Regev (2010) that SEAL implements, with
``(pk_0, pk_1) = (-(a s + e), a)`` SEAL's own public key reduced modulo ``Q`` (its residues modulo
the data primes: an RNS component in NTT form is the same at every level, the primes' NTT tables
do not depend on the level), ``u`` uniform in {-1, 0, 1}^N and ``e_0, e_1`` centred binomial
(the difference of two sums of 21 bits, standard deviation sqrt(10.5) = 3.24): SEAL's own
distributions for u and the errors. The NTTs (u: 2 primes, (e_0, e_1): 2 x 2) and the products
``u pk_j`` (``Evaluator.multiply_plain``) are SEAL's; the samples come from an AES-256-CTR
keystream under an OS-random key (:mod:`protocols.keystream`; one per process).

Security: ``(pk_0, pk_1) mod Q`` is an RLWE sample modulo Q, and c is pseudorandom under the
decision-RLWE assumption modulo Q with secret u (the argument of LPR10 for this scheme), so
the ciphertext hides its plaintext. The HE security standard's bound for N = 8192 at 128 bits
is log2 of the modulus <= 218; SEAL already checks the key level (180 bits by default), and
Q has fewer bits (120), with the same dimension and errors: at least as hard.

Noise: decryption gives ``c_0 + c_1 s = -u e + e_0 + e_1 s``, not divided by the special prime
as SEAL's is. With s and u ternary (variance 2/3) and the errors' variance 10.5, a coefficient
of the noise has variance ``2 N (2/3) 10.5 + 10.5``: standard deviation 339 (2^8.4) at N = 8192
against SEAL's ~2^3.5. :mod:`protocols.ckks_packed` budgets 2^9 for it
(``D_NOISE_BITS``): at the default scale of the residual (2^40) its term in a gradient
entry's predicted error (2^-31 a slot before the sum) is a twentieth of the rounding at the
final scale (2^-26.5), and the predicted error still matches the measured one
(``tests/test_ckks_packed.py``; the noise itself: ``tests/test_ckks_zeros.py``).
"""

from __future__ import annotations

import numpy as np
from tenseal import sealapi as seal

from protocols.ckks_codec import SlotCodec
from protocols.forked import per_process
from protocols.keystream import AESCTRStream

CBD_BITS = 21  # each error coefficient: popcount of 21 random bits minus popcount of 21 more
_LOW = (1 << CBD_BITS) - 1


_STREAMS: dict[int, AESCTRStream] = {}  # by process id: a forked child keys its own


def _stream() -> AESCTRStream:
    return per_process(_STREAMS, AESCTRStream)


def ternary(n: int) -> np.ndarray:
    """n values uniform in {-1, 0, 1} from the CSPRNG (bytes >= 255 rejected: 255 = 3 x 85,
    so the bytes kept are uniform modulo 3)."""
    out = np.empty(0, dtype=np.int64)
    while len(out) < n:
        b = np.frombuffer(_stream().bytes(n + n // 64 + 64), dtype=np.uint8)
        out = np.concatenate([out, (b[b < 255] % 3).astype(np.int64) - 1])
    return out[:n]


def centred_binomial(n: int) -> np.ndarray:
    """n values of popcount(21 random bits) - popcount(21 more), from the CSPRNG."""
    x = _stream().words(n)
    pos = np.bitwise_count(x & np.uint64(_LOW)).astype(np.int64)
    neg = np.bitwise_count((x >> np.uint64(CBD_BITS)) & np.uint64(_LOW)).astype(np.int64)
    return pos - neg


class ZeroEncryptor:
    """Fresh public-key encryptions of 0 at the first data level (scale 1; see the module)."""

    def __init__(self, codec: SlotCodec, pk: seal.PublicKey) -> None:
        self.codec, self.ctx = codec, codec.ctx
        mem = codec.require_memory()
        n = codec.n
        self.parms_id = self.ctx.first_parms_id()
        data_primes = self._primes(self.parms_id)
        key_primes = self._primes(self.ctx.key_parms_id())
        if key_primes[: len(data_primes)] != data_primes:  # SEAL drops the last prime: check it
            raise ValueError("the data level's primes are not the key level's first primes")
        key = pk.data()
        if key.parms_id() != self.ctx.key_parms_id() or key.size() != 2 or not key.is_ntt_form():
            raise ValueError("the public key is not a 2-polynomial NTT-form key-level ciphertext")
        full = mem.ciphertext_words(key).reshape(2, len(key_primes), n)
        # an NTT-form data-level ciphertext to hold (pk_0, pk_1) mod Q: made from any nonzero
        # polynomial, then overwritten with the key's residues modulo the data primes
        self.pk = codec.ntt_ciphertext([None, np.ones(n, dtype=np.int64)], [1.0], self.parms_id)
        mem.ciphertext_words(self.pk).reshape(2, len(data_primes), n)[:] = full[
            :, : len(data_primes)
        ]

    def _primes(self, parms_id) -> list[int]:
        return [m.value() for m in self.ctx.get_context_data(parms_id).parms().coeff_modulus()]

    def zeros(self, count: int) -> list[seal.Ciphertext]:
        """``count`` encryptions of 0, each with its own u, e_0 and e_1."""
        n, codec = self.codec.n, self.codec
        us = [ternary(n) for _ in range(count)]
        u_pts = codec.plaintexts(us, [1.0] * count, 1.0, self.parms_id)
        out = []
        for u_pt in u_pts:
            e0, e1 = centred_binomial(n), centred_binomial(n)
            ct = codec.ntt_ciphertext([e0, e1], [float(CBD_BITS)] * 2, self.parms_id)
            prod = seal.Ciphertext()
            codec.evaluator.multiply_plain(self.pk, u_pt, prod)  # (u pk_0, u pk_1)
            codec.evaluator.add_inplace(ct, prod)
            out.append(ct)
        return out
