"""CKKS slot encoding and decoding in numpy, with SEAL doing every NTT.

SEAL's ``CKKSEncoder`` takes its values as a Python list and runs its own FFT on every vector,
and hands decoded slots back as a list (4096 complex objects at N = 8192): together about as
much CPU as the NTTs around them (0.45-0.7 ms an encoding at 2 primes here, of which the two
NTTs are 0.34). Here the canonical embedding is computed by numpy, one vector at a time (rows of
64 KiB: arrays past glibc's mmap threshold fault their pages in on every call, which cost more
on this VM than the arithmetic), and only the number-theoretic transforms are left to SEAL:

* **encode**: slot values -> integer coefficients (one FFT of N/2 points, see below), reduced
  modulo each prime of the level and written into a coefficient-form ciphertext that serves as a
  container for two vectors (its two polynomials); ``Evaluator.transform_to_ntt_inplace`` turns
  it into NTT form, and each polynomial is copied into a plaintext made by SEAL at that level
  and scale (``CKKSEncoder.encode`` of a scalar, which allocates and labels it without an FFT).
  SEAL refuses a coefficient-form CKKS plaintext, hence the container.
* **decode** (the key holder): SEAL decrypts (NTT form), the plaintexts are copied into
  NTT-form containers, ``transform_from_ntt_inplace`` brings back their coefficients, numpy
  lifts them to signed integers and evaluates the embedding (one inverse FFT of N/2 points).

The embedding. SEAL puts slot ``i`` at the root ``zeta^(3^i mod 2N)``, ``zeta = exp(i pi / N)``,
and its conjugate at ``zeta^-(3^i)``. Every root ``zeta^t`` with ``t = 4k + 1`` is one of these
(``3^i`` or ``-3^i`` modulo 2N is 1 modulo 4), so the values at ``t = 4k + 1`` are known: ``z_i``
or ``conj(z_i)``. Writing ``u_j = c_j + i c_(j + N/2)`` for the real coefficients ``c``,
``zeta^(N t / 2) = i`` for these t, so ``m(zeta^t) = sum_j u_j zeta^(t j)`` and
``m(zeta^(4k+1)) = sum_j (u_j zeta^j) exp(2 pi i j k / (N/2))``: an inverse DFT of N/2
points, inverted by a forward one. Coefficients are rounded to the nearest integer as SEAL's
encoder rounds them (its FFT and numpy's differ in the last bits, so a coefficient may differ by
1 unit of the scale: 2^-50 of a feature at the default parameters): decoded, a slot is within
sqrt(N) / scale of its value on either path (tested: 6e-14 to 8e-14 at 2^50, as SEAL's own).

Where the memory of SEAL objects cannot be reached and checked (:func:`protocols.seal_bytes.
memory`), or a level has more than one prime at decode (a CRT composition numpy cannot do in
doubles), SEAL's encoder does the work instead: same values, slower.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from tenseal import sealapi as seal

from protocols.ckks_he import CKKSParameterError
from protocols.seal_bytes import Memory, memory

COEFF_LIMIT = 2.0**62  # int64 coefficients, with room for the sign


class SlotCodec:
    """Encode slot vectors to NTT-form plaintexts and decode decrypted ones, for one context."""

    def __init__(
        self, ctx: seal.SEALContext, evaluator: seal.Evaluator, encoder: seal.CKKSEncoder
    ) -> None:
        self.ctx, self.evaluator, self.encoder = ctx, evaluator, encoder
        n = ctx.first_context_data().parms().poly_modulus_degree()
        self.n, self.slots = n, n // 2
        pos = np.empty(self.slots, dtype=np.int64)
        t = 1
        for i in range(self.slots):  # slot i sits at zeta^(3^i mod 2N), as SEAL's encoder puts it
            pos[i] = t
            t = (t * 3) % (2 * n)
        direct = pos % 4 == 1
        k = np.where(direct, (pos - 1) // 4, (2 * n - pos - 1) // 4)
        self.order = np.argsort(k)  # order[k]: the slot whose root (or its conjugate) is 4k + 1
        self.conj = ~direct[self.order]  # at 4k + 1 sits the conjugate of that slot
        self.sign = np.where(self.conj, -1.0, 1.0)
        j = np.arange(self.slots)
        self.untwist = np.exp(-1j * np.pi * j / n) / self.slots  # zeta^-j / (N/2)
        self.twist = np.exp(1j * np.pi * j / n)
        self.memory = memory()

    # ---- encode -------------------------------------------------------------------------------

    def coefficients(self, values: np.ndarray, scale: float, limit: float = COEFF_LIMIT):
        """One row of slot values -> (N signed integer coefficients at ``scale``, their largest
        magnitude); CKKSParameterError if that reaches ``limit``."""
        vals = np.asarray(values, dtype=np.complex128)[self.order] * scale
        vals.imag *= self.sign  # the conjugate where the root 4k + 1 holds it
        u = np.fft.fft(vals)
        u *= self.untwist
        c = np.empty(self.n)
        c[: self.slots], c[self.slots :] = u.real, u.imag
        np.rint(c, out=c)
        top = max(-float(c.min()), float(c.max()))
        if not top < limit:  # SEAL's encoder refuses these too (and nan lands here)
            raise CKKSParameterError(
                f"encoded values must fit the modulus: coefficients reach 2^{math.log2(top):.1f} "
                f"at scale 2^{math.log2(scale):.1f}, the level allows < 2^{math.log2(limit):.1f} "
                f"(use smaller values or a smaller scale)"
            )
        return c.astype(np.int64), top

    def encode(
        self, values: np.ndarray | Sequence[np.ndarray], scale: float, parms_id=None
    ) -> list[seal.Plaintext]:
        """One NTT-form plaintext per row of ``values`` (at most ``slots`` values each, zero
        padded), at ``scale`` and the level ``parms_id`` (default: the first data level)."""
        rows = _rows(values, self.slots)
        parms_id = self.ctx.first_parms_id() if parms_id is None else parms_id
        data = self.ctx.get_context_data(parms_id)
        if data is None:
            raise CKKSParameterError("parms_id is not a level of this context")
        primes = [m.value() for m in data.parms().coeff_modulus()]
        # coefficients must fit the level's modulus, centred (SEAL's bound), and an int64;
        # a value too large is the caller's error on either path (CKKSParameterError)
        limit = min(COEFF_LIMIT, math.prod(float(q) for q in primes) / 2)
        coeffs = [self.coefficients(r, scale, limit) for r in rows]
        if self.memory is not None:
            try:
                return self.plaintexts(
                    [c for c, _ in coeffs], [t for _, t in coeffs], scale, parms_id
                )
            except ValueError:  # a layout check failed: SEAL's encoder from now on
                self.memory = None
        return [self._seal_encode(r, scale, parms_id) for r in rows]

    def _seal_encode(self, row: np.ndarray, scale: float, parms_id) -> seal.Plaintext:
        pt = seal.Plaintext()
        self.encoder.encode(row.tolist(), parms_id, scale, pt)
        return pt

    def _plaintext(self, parms_id, scale: float) -> seal.Plaintext:
        """An NTT-form plaintext of the level, labelled with ``scale`` (filled by SEAL with a
        constant: no FFT, no NTT)."""
        pt = seal.Plaintext()
        self.encoder.encode(1.0, parms_id, scale, pt)
        return pt

    def plaintexts(
        self, coeffs: Sequence[np.ndarray], tops: Sequence[float], scale: float, parms_id
    ) -> list[seal.Plaintext]:
        """NTT-form plaintexts of integer coefficient rows (int64, ``tops[i]``: the largest
        magnitude in row i, below the level's modulus), labelled with ``scale``."""
        mem = self.require_memory()
        out: list[seal.Plaintext | None] = [None] * len(coeffs)
        live = []
        for i, top in enumerate(tops):
            if top:
                live.append(i)
            else:  # the zero polynomial is zero in NTT form too
                pt = self._plaintext(parms_id, scale)
                mem.plaintext_words(pt)[:] = 0
                out[i] = pt
        for a in range(0, len(live), 2):
            pair = live[a : a + 2]
            # SEAL refuses a container whose second polynomial is zero ("transparent"): a lone
            # vector goes second
            rows = [coeffs[i] for i in pair] if len(pair) == 2 else [None, coeffs[pair[0]]]
            box = self.ntt_ciphertext(rows, [tops[i] for i in pair][-2:], parms_id)
            words = mem.ciphertext_words(box).reshape(2, -1)
            for s, i in zip([1] if len(pair) == 1 else [0, 1], pair, strict=True):
                pt = self._plaintext(parms_id, scale)
                mem.plaintext_words(pt)[:] = words[s]
                out[i] = pt
        return out  # type: ignore[return-value]

    def ntt_ciphertext(self, rows, tops: Sequence[float], parms_id) -> seal.Ciphertext:
        """A 2-polynomial NTT-form ciphertext (scale 1) whose polynomials are the NTTs of two
        integer coefficient rows (int64; ``None``: zero; the second must not be zero), each
        reduced modulo every prime of the level ``parms_id``."""
        mem = self.require_memory()
        data = self.ctx.get_context_data(parms_id)
        primes = [m.value() for m in data.parms().coeff_modulus()]
        box = seal.Ciphertext()
        box.resize(self.ctx, parms_id, 2)  # coefficient form, zeros
        words = mem.ciphertext_words(box).reshape(2, len(primes), self.n).view(np.int64)
        tops = [0.0] * (2 - len(tops)) + list(tops)
        for s, c in enumerate(rows):
            if c is None:
                continue
            for p, q in enumerate(primes):
                w = words[s, p]
                if tops[s] < q:  # c mod q = c + q where c < 0: shift, mask, add
                    np.right_shift(c, 63, out=w)
                    np.bitwise_and(w, np.int64(q), out=w)
                    np.add(w, c, out=w)
                else:
                    np.mod(c, np.int64(q), out=w)
        self.evaluator.transform_to_ntt_inplace(box)
        return box

    def require_memory(self) -> Memory:
        if self.memory is None:
            raise ValueError("SEAL objects' memory is not reachable here")
        return self.memory

    # ---- decode -------------------------------------------------------------------------------

    def decode_coefficients(self, c: np.ndarray, scale: float) -> np.ndarray:
        """N signed coefficients -> slot values (the inverse of :meth:`coefficients`)."""
        c = np.asarray(c, dtype=np.float64)
        u = c[self.slots :] * 1j
        u += c[: self.slots]
        u *= self.twist
        vals = np.fft.ifft(u)
        vals *= self.slots / scale
        vals.imag *= self.sign
        out = np.empty_like(vals)
        out[self.order] = vals
        return out

    def decrypt(
        self, decryptor: seal.Decryptor, cts: Sequence[seal.Ciphertext]
    ) -> list[np.ndarray]:
        """Slots of each ciphertext. The ciphertexts serve as containers for the inverse NTTs:
        they are overwritten (pass ones that are not needed afterwards)."""
        pts = []
        for ct in cts:
            pt = seal.Plaintext()
            decryptor.decrypt(ct, pt)
            pts.append(pt)
        # containers: one-prime, two-polynomial NTT-form ciphertexts (what HE-VFL's products
        # are); anything else a peer sent is decoded by SEAL, this once
        boxes = all(c.coeff_modulus_size() == 1 and c.size() == 2 and c.is_ntt_form() for c in cts)
        if self.memory is not None and boxes:
            try:
                return self._decode_ntt(pts, cts)
            except ValueError:  # a layout check failed: SEAL's decoder from now on
                self.memory = None
        return [np.array(self.encoder.decode_complex(pt), dtype=np.complex128) for pt in pts]

    def _decode_ntt(self, pts, cts) -> list[np.ndarray]:
        mem = self.require_memory()
        n = self.n
        out: list[np.ndarray] = [np.zeros(0)] * len(pts)
        for a in range(0, len(pts), 2):
            pair = pts[a : a + 2]
            box = cts[a]
            q = self.ctx.get_context_data(box.parms_id()).parms().coeff_modulus()[0].value()
            src = [mem.plaintext_words(pt) for pt in pair]
            live = [w.any() for w in src]
            if not any(live):
                for i in range(len(pair)):
                    out[a + i] = np.zeros(self.slots, dtype=np.complex128)
                continue
            # which plaintext goes into each polynomial: SEAL refuses a container whose second
            # polynomial is zero, so a zero one goes first and a lone one fills both
            place = [0, 0] if len(pair) == 1 else ([0, 1] if live[1] else [1, 0])
            words = mem.ciphertext_words(box).reshape(2, n)
            words[0], words[1] = src[place[0]], src[place[1]]
            self.evaluator.transform_from_ntt_inplace(box)
            signed = words.view(np.int64)
            for p, i in enumerate(place):
                c = signed[p] - (signed[p] > q // 2) * np.int64(q)  # centred, as SEAL decodes
                out[a + i] = self.decode_coefficients(c, pair[i].scale)
        return out


def _rows(values, slots: int) -> np.ndarray:
    """Values as a 2-D complex array of ``slots`` columns (shorter rows zero padded)."""
    if isinstance(values, np.ndarray) and values.ndim == 2:
        rows = values
    else:
        rows = [np.asarray(v).ravel() for v in values]
        width = max((len(r) for r in rows), default=0)
        if width > slots:
            raise CKKSParameterError(f"a vector must have at most {slots} values, got {width}")
        out = np.zeros((len(rows), slots), dtype=np.complex128)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out
    if rows.shape[1] > slots:
        raise CKKSParameterError(f"a vector must have at most {slots} values, got {rows.shape[1]}")
    if rows.shape[1] < slots:
        rows = np.pad(rows, ((0, 0), (0, slots - rows.shape[1])))
    return rows
