"""What each HE-VFL message may be: the :class:`Expect` rules of its steps, per scheme.

Sizes come from the run's spec (rows of a minibatch, features of each party) and the scheme's
parameters: a SEAL ciphertext of CKKS degree N over L data primes is at most 2 N L 8-byte
coefficients plus SEAL's header (113 bytes at N = 8192, measured; :data:`SEAL_HEADER` leaves
room) and at least those of one prime; the public key 2 N (L + 1) coefficients plus the
parameters; a Paillier ciphertext is exactly ``2 * bits / 8`` bytes, the public key n exactly
``bits / 8``. What passes these rules is then loaded by the library inside
:func:`securevfl.runtime.peer_bytes`, so bytes the library refuses end in the same one-line
ProtocolError naming the peer and the step.
"""

from __future__ import annotations

from typing import Any

from securevfl.runtime import Expect

STEP_PUBLIC = "he public key"
STEP_GRADIENT = "he gradient"
STEP_OPENED = "he opened gradient"
SEAL_HEADER = 4096  # bytes of a SEAL object's header and parameters, a generous bound


def features(scheme: Any, k: int) -> int:
    """Values in party k's gradient message (party 0's carries the bias as one more column)."""
    return scheme.ctx.info.features_per_party[k] + (k == 0)


class PlainRules:
    """The scheme without encryption: float arrays of one value per row / per feature."""

    def __init__(self, scheme: Any) -> None:
        self.scheme = scheme

    def public(self) -> Expect | None:
        return None  # no key material is sent

    def rows(self, step: str, rows: int) -> Expect:
        """An IR or the residual of a minibatch of ``rows`` rows."""
        return Expect(step=step, shape=(rows,))

    def gradient(self, k: int) -> Expect:
        """Party k's masked gradient, to the key holder."""
        return Expect(step=STEP_GRADIENT, shape=(features(self.scheme, k),))

    def opened(self, k: int) -> Expect:
        """The key holder's opened (still masked) gradient, back to party k."""
        return Expect(step=STEP_OPENED, shape=(features(self.scheme, k),))


class CKKSRules(PlainRules):
    """Lists of SEAL ciphertexts: one per row chunk (IR, residual), one per feature group."""

    def _cts(self, step: str, count: int) -> Expect:
        p = self.scheme.params
        prime = 2 * p.poly_modulus_degree * 8  # one prime's coefficients of both polynomials
        data_primes = len(p.coeff_mod_bit_sizes) - 1
        # at least one prime (half of it: room for SEAL's zstd where the raw format is missing)
        ct = Expect(step=step, kind="bytes", min_len=prime // 2,
                    max_len=prime * data_primes + SEAL_HEADER)  # fmt: skip
        return Expect(step=step, kind="list", shape=(count,), items=ct)

    def public(self) -> Expect:
        p = self.scheme.params
        key = 2 * p.poly_modulus_degree * 8 * len(p.coeff_mod_bit_sizes)
        return Expect(step=STEP_PUBLIC, kind="bytes", min_len=9, max_len=key + 2 * SEAL_HEADER)

    def rows(self, step: str, rows: int) -> Expect:
        return self._cts(step, self.scheme.layout.n_chunks(rows))

    def gradient(self, k: int) -> Expect:
        complex_columns = -(-features(self.scheme, k) // 2)  # two features per complex slot
        return self._cts(STEP_GRADIENT, self.scheme.layout.n_groups(complex_columns))


class PaillierRules(PlainRules):
    """Fixed-width ciphertexts (one per value); opened gradients are residues modulo n."""

    def _width(self) -> int:
        return 2 * self.scheme.bits // 8

    def _cts(self, step: str, count: int) -> Expect:
        w = self._width()
        return Expect(step=step, kind="bytes", min_len=count * w, max_len=count * w)

    def public(self) -> Expect:
        n = Expect(step=STEP_PUBLIC, kind="bytes", min_len=self.scheme.bits // 8,
                   max_len=self.scheme.bits // 8)  # fmt: skip
        if self.scheme.randomness != "djn":
            return n
        # n, then the DJN base h_s as one ciphertext (its width checked as it is loaded)
        item = Expect(step=STEP_PUBLIC, kind="bytes", min_len=n.min_len, max_len=self._width())
        return Expect(step=STEP_PUBLIC, kind="list", shape=(2,), items=item)

    def rows(self, step: str, rows: int) -> Expect:
        return self._cts(step, rows)

    def gradient(self, k: int) -> Expect:
        return self._cts(STEP_GRADIENT, features(self.scheme, k))

    def opened(self, k: int) -> Expect:
        pub = self.scheme.pub.get(k)
        n = int(pub.n) if pub is not None else 1 << self.scheme.bits
        residue = Expect(step=STEP_OPENED, kind="int", lo=0, hi=n - 1)
        return Expect(step=STEP_OPENED, kind="list", shape=(features(self.scheme, k),),
                      items=residue)  # fmt: skip


RULES = {"plain": PlainRules, "ckks": CKKSRules, "paillier": PaillierRules}
