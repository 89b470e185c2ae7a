"""Masked packed products ``X^T d`` under CKKS on SEAL (TenSEAL's ``sealapi``).

HE-VFL needs one plaintext multiplication per product, summed over row chunks, then the key
holder decrypts. So the chain needs no prime per multiplication: the features are encoded at
their own scale (what the data modulus leaves: ``scale_bits + x_scale_bits + mask_bits + 3 <=
data bits``, every prime but the special last one), the products of a feature group are summed
and rescaled once (with >= 2 data primes), and the mask is added at the last level. Against
TenSEAL vectors on [60, 40, 40, 60] with a rescale after every product, one adult epoch
(b = 1024) spent 2.1 s instead of 7.2 s in products and 0.9 s instead of 3.5 s serializing
(medians of 3, side by side, load ~15; ``bench/suites/perf.d/he.toml``), because

* one rescale per group instead of per product, and 2 primes instead of 3 (1 on the wire);
* complex packing: CKKS slots are complex, the residual d is real, so encoding two feature
  columns as ``x_a + i x_b`` gives ``d x_a + i d x_b`` in one product: half the products,
  masks, serializations and decryptions;
* SEAL objects are used directly (no TenSEAL vector wrappers);
* SEAL does the number-theoretic work and numpy the rest: slots are encoded and decoded by
  :class:`protocols.ckks_codec.SlotCodec` (numpy FFTs, SEAL's NTTs), and a data party's
  encryptions of zero are made at the data level (:mod:`protocols.ckks_zeros`) instead of
  SEAL's key level. Side by side with SEAL's own calls (2026-11-28, this 2-core AMD machine):
  the epoch on adult 1.02-1.08 s against 1.26-1.44 s (alternated runs, one process a party).

The residual ``d`` is tiled as in :class:`protocols.ckks_he.PackedLayout` (``P`` rows per chunk,
repeated once per feature block). Data parties hold the public key only; the key holder decrypts
masked slots and sums blocks (:func:`open_blocks`). Ciphertexts travel as SEAL's own serialized
bytes, uncompressed (:mod:`protocols.seal_bytes`); sealapi loads only from paths, so bytes pass
through an anonymous in-memory file (ciphertexts, parameters and the public key only: the secret
key is never saved).
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tenseal import sealapi as seal

from protocols.ckks_codec import SlotCodec
from protocols.ckks_he import CKKSParameterError, PackedLayout, check_ring
from protocols.ckks_zeros import ZeroEncryptor
from protocols.forked import per_process
from protocols.seal_bytes import ciphertext_bytes

X_SCALE_CAP = 50  # features |x| <= 1 need no more fractional bits than a double carries
GRAD_ERROR_BITS = 20  # an opened gradient entry must be exact to 2^-20 (see predicted_error)
D_NOISE_BITS = 9  # fresh encryption noise at the data level: 2^8.4 (protocols.ckks_zeros)
RESIDUAL_BITS = 5  # |4 dl/dt| = |theta - 2y| assumed < 32 for the X-encoding error term
ROUNDING_BITS = 3.5  # rescale / encoding rounding at the final scale, measured (slot domain)


@dataclass(frozen=True)
class PackedParams:
    """Ring degree, chain (last prime = special), residual scale and mask bits."""

    poly_modulus_degree: int = 8192
    coeff_mod_bit_sizes: tuple[int, ...] = (60, 60, 60)
    scale_bits: int = 40
    mask_bits: int = 20

    @property
    def slots(self) -> int:
        return self.poly_modulus_degree // 2

    @property
    def data_bits(self) -> int:
        return sum(self.coeff_mod_bit_sizes[:-1])

    @property
    def x_scale_bits(self) -> int:
        """Bits of the features' scale: what the data modulus leaves after d's scale and mask."""
        # |slot| < 2^(mask+1) at the final scale must stay below q0 / 2, with one bit to spare
        return min(X_SCALE_CAP, self.data_bits - self.scale_bits - self.mask_bits - 3)

    @property
    def rescale(self) -> bool:
        """With >= 2 data primes the summed product is rescaled once (by the last data prime)."""
        return len(self.coeff_mod_bit_sizes) >= 3

    @property
    def final_scale_bits(self) -> int:
        """Bits of the scale the key holder decrypts at."""
        drop = self.coeff_mod_bit_sizes[-2] if self.rescale else 0
        return self.scale_bits + self.x_scale_bits - drop

    def predicted_error(self, batch: int) -> float:
        """Predicted CKKS error of one opened gradient entry (X^T 4d / 4b) at batch ``batch``.

        A slot's error is sqrt(N) times: the rounding of x at its scale times |4d|, the
        encryption noise of d at its scale, and the rounding of the rescale and of the mask at
        the final scale (2^3.5 / final scale). Against measured rms errors on N = 8192,
        b = 1024, [60, 60, 60]: scale_bits 40, 30, 25 predict 7.8e-9, 8.0e-6, 2.5e-4 and gave
        6.6e-9, 7.0e-6, 2.4e-4 per gradient entry, encrypted at the data level (6 minibatches
        each, 2026-11-28; with SEAL's encryption: 7.1e-9, 6.8e-6, 2.5e-4 against predictions
        of 7.5e-9, 7.6e-6, 2.4e-4 with 2^4 of noise) (without a rescale the x term is 10-20x
        pessimistic: |4d| was < 8, not 32). A gradient entry sums
        ``batch`` slots (errors add in quadrature) and is divided by 4 batch.
        """
        n = self.poly_modulus_degree
        slot = math.sqrt(n) * (
            2.0 ** (RESIDUAL_BITS - self.x_scale_bits)
            + 2.0 ** (D_NOISE_BITS - self.scale_bits)
            + 2.0 ** (ROUNDING_BITS - self.final_scale_bits)
        )
        return slot / (4.0 * math.sqrt(max(1, batch)))

    def validate(self, batch: int) -> None:
        """Raise CKKSParameterError unless secure, well-formed and precise enough at ``batch``."""
        check_ring(self.poly_modulus_degree, self.coeff_mod_bit_sizes)
        bits = list(self.coeff_mod_bit_sizes)
        if not 0 <= self.mask_bits <= 40:
            raise CKKSParameterError(f"mask_bits must be in [0, 40], got {self.mask_bits}")
        if not 20 <= self.scale_bits <= 60:
            raise CKKSParameterError(f"scale_bits must be in [20, 60], got {self.scale_bits}")
        if self.x_scale_bits < 20:
            most = self.data_bits - self.mask_bits - 23
            hint = f"use scale_bits <= {most}" if most >= 20 else "use a longer chain"
            raise CKKSParameterError(
                f"scale_bits + mask_bits + 23 must be <= the data modulus ({self.data_bits} "
                f"bits: every prime but the last) so the features keep >= 20 bits and the "
                f"masked product fits; got scale_bits={self.scale_bits}, "
                f"mask_bits={self.mask_bits}: {hint}"
            )
        err = self.predicted_error(batch)
        if err > 2.0**-GRAD_ERROR_BITS:
            best = self.nearest_safe_scale(batch)
            hint = f"use scale_bits >= {best}" if best else "use a longer chain"
            raise CKKSParameterError(
                f"CKKS error of a gradient entry must be <= 2^-{GRAD_ERROR_BITS} at batch "
                f"{batch}; scale_bits={self.scale_bits} with coeff_mod_bit_sizes {bits} "
                f"predicts 2^{math.log2(err):.1f}: {hint}"
            )

    def nearest_safe_scale(self, batch: int) -> int | None:
        """The smallest scale_bits that passes :meth:`validate` at ``batch`` (None: none does)."""
        for s in range(self.scale_bits, 61):
            p = PackedParams(self.poly_modulus_degree, self.coeff_mod_bit_sizes, s, self.mask_bits)
            if p.x_scale_bits >= 20 and p.predicted_error(batch) <= 2.0**-GRAD_ERROR_BITS:
                return s
        return None


class _Spool:
    """An anonymous in-memory file (memfd) where sealapi objects turn into bytes and back.

    It has no name in any filesystem, so nothing is left behind even when the process is
    killed; where memfd is missing, a private 0700 temporary directory removed at exit.
    """

    def __init__(self) -> None:
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("securevfl-ckks", os.MFD_CLOEXEC)
            self.path = f"/proc/self/fd/{self.fd}"
        else:  # pragma: no cover - non-Linux
            d = tempfile.mkdtemp(prefix="securevfl-ckks-")
            atexit.register(shutil.rmtree, d, True)
            self.path = os.path.join(d, "obj")
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def dump(self, obj) -> bytes:
        obj.save(self.path)
        return os.pread(self.fd, os.fstat(self.fd).st_size, 0)

    def load(self, obj, data: bytes, *ctx):
        # overwrite, then cut to length: the file holds exactly ``data``, and the pages of a
        # same-sized previous object are reused instead of freed and faulted in again
        os.pwrite(self.fd, data, 0)
        os.ftruncate(self.fd, len(data))
        obj.load(*ctx, self.path)  # SEAL checks the object is valid for the context
        return obj


_SPOOL: dict[int, _Spool] = {}  # by process id: a forked child opens its own


def _spool() -> _Spool:
    return per_process(_SPOOL, _Spool)


def _context(params: PackedParams, parms: seal.EncryptionParameters) -> seal.SEALContext:
    ctx = seal.SEALContext(parms, True, seal.SEC_LEVEL_TYPE.TC128)
    if not ctx.parameters_set():
        raise CKKSParameterError(f"SEAL rejects the parameters: {ctx.parameters_error_message()}")
    return ctx


class PublicSide:
    """What a data party holds: parameters and the public key (encrypt, add, multiply)."""

    def __init__(self, params: PackedParams, ctx: seal.SEALContext, pk: seal.PublicKey) -> None:
        self.params, self.ctx = params, ctx
        self.encryptor = seal.Encryptor(ctx, pk)
        self.evaluator = seal.Evaluator(ctx)
        self.encoder = seal.CKKSEncoder(ctx)
        self.codec = SlotCodec(ctx, self.evaluator, self.encoder)  # numpy FFTs, SEAL's NTTs
        self.layout: PackedLayout | None = None
        self.zeros: list[seal.Ciphertext] = []  # fresh encryptions of 0, each used once
        try:  # Enc(0) at the data level (protocols.ckks_zeros); else SEAL's, at the key level
            self.zero_maker: ZeroEncryptor | None = ZeroEncryptor(self.codec, pk)
        except ValueError:
            self.zero_maker = None

    def fresh_zeros(self, count: int) -> list[seal.Ciphertext]:
        """``count`` new public-key encryptions of 0 at the first data level."""
        if self.zero_maker is not None:
            try:
                return self.zero_maker.zeros(count)
            except ValueError:  # a layout check failed: SEAL's encryptor from now on
                self.zero_maker = None
        out = []
        for _ in range(count):
            ct = seal.Ciphertext()
            self.encryptor.encrypt_zero(ct)
            out.append(ct)
        return out

    def precompute_zeros(self, count: int) -> None:
        """Draw public-key encryptions of 0 until ``count`` wait (the costly, data-free part of
        an encryption: a party does it while it waits for a peer)."""
        if len(self.zeros) < count:
            self.zeros.extend(self.fresh_zeros(count - len(self.zeros)))

    def encrypt(self, pt: seal.Plaintext) -> seal.Ciphertext:
        """Enc(pt) = a fresh Enc(0) plus pt, as SEAL's Encryptor.encrypt makes it (with SEAL's
        encryptor: the same bytes under the same randomness, tested); a precomputed Enc(0) is
        taken once, then dropped."""
        ct = self.zeros.pop() if self.zeros else self.fresh_zeros(1)[0]
        ct.scale = pt.scale
        self.evaluator.add_plain_inplace(ct, pt)
        return ct

    def keys_held(self) -> list[str]:
        return ["public"]

    def encode(self, values, scale: float, parms_id=None) -> seal.Plaintext:
        """One vector (at most ``slots`` values) as an NTT-form plaintext."""
        return self.codec.encode([np.asarray(values)], scale, parms_id)[0]

    def encode_many(self, rows, scale: float, parms_id=None) -> list[seal.Plaintext]:
        """Several vectors at one scale and level (one batch: the NTTs two at a time)."""
        return self.codec.encode(rows, scale, parms_id)

    def to_bytes(self, ct: seal.Ciphertext) -> bytes:
        # SEAL's format without its zstd pass (see protocols.seal_bytes): 50x faster
        return ciphertext_bytes(ct, _spool().dump, self.from_bytes)

    def from_bytes(self, data: bytes) -> seal.Ciphertext:
        try:
            return _spool().load(seal.Ciphertext(), data, self.ctx)
        except (RuntimeError, ValueError) as exc:  # SEAL's validation of what arrived
            raise CKKSParameterError(
                f"ciphertext bytes must be a valid SEAL ciphertext for these parameters, "
                f"got {len(data)} bytes ({exc})"
            ) from None


class KeyHolder(PublicSide):
    """The coordinator: also the secret key (generated here, never serialized)."""

    def __init__(self, params: PackedParams) -> None:
        parms = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
        parms.set_poly_modulus_degree(params.poly_modulus_degree)
        parms.set_coeff_modulus(
            seal.CoeffModulus.Create(params.poly_modulus_degree, list(params.coeff_mod_bit_sizes))
        )
        ctx = _context(params, parms)
        keygen = seal.KeyGenerator(ctx)
        pk = seal.PublicKey()
        keygen.create_public_key(pk)
        super().__init__(params, ctx, pk)
        self._parms, self._pk = parms, pk
        self.decryptor = seal.Decryptor(ctx, keygen.secret_key())

    def keys_held(self) -> list[str]:
        return ["secret", "public"]

    def public_bytes(self) -> bytes:
        """Encryption parameters and public key, length-prefixed (what data parties receive)."""
        a, b = _spool().dump(self._parms), _spool().dump(self._pk)
        return len(a).to_bytes(8, "big") + a + b

    def decrypt(self, ct: seal.Ciphertext) -> np.ndarray:
        pt = seal.Plaintext()
        self.decryptor.decrypt(ct, pt)
        # dtype given: numpy would otherwise infer it element by element (4x slower)
        return np.array(self.encoder.decode_complex(pt), dtype=np.complex128)

    def decrypt_many(self, cts: Sequence[seal.Ciphertext]) -> list[np.ndarray]:
        """The slots of each ciphertext, decoded in numpy; the ciphertexts are consumed (they
        hold the inverse NTTs, see :class:`protocols.ckks_codec.SlotCodec`)."""
        return self.codec.decrypt(self.decryptor, cts)


def load_public(params: PackedParams, data: bytes) -> PublicSide:
    """A data party's side from :meth:`KeyHolder.public_bytes`."""
    n = int.from_bytes(data[:8], "big")
    parms = _spool().load(seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS), data[8 : 8 + n])
    ctx = _context(params, parms)
    pk = _spool().load(seal.PublicKey(), data[8 + n :], ctx)
    return PublicSide(params, ctx, pk)


def complex_features(X: np.ndarray) -> np.ndarray:
    """Columns (2j, 2j+1) -> one complex column x_2j + i x_2j+1 (odd count: a zero column)."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[1] % 2:
        X = np.hstack([X, np.zeros((X.shape[0], 1))])
    return X[:, 0::2] + 1j * X[:, 1::2]


def encrypt_rows(side: PublicSide, layout: PackedLayout, v: np.ndarray) -> list[seal.Ciphertext]:
    """Encrypt a per-row vector in the tiled layout at the residual scale."""
    return [side.encrypt(pt) for pt in encode_rows(side, layout, v)]


def encode_rows(side: PublicSide, layout: PackedLayout, v) -> list[seal.Plaintext]:
    """A plain per-row vector, tiled, at the residual's scale and level (for :func:`add_rows`)."""
    return side.encode_many(layout.tile_rows(v), 2.0**side.params.scale_bits)


def add_rows(
    side: PublicSide,
    parts: Sequence[Sequence[seal.Ciphertext]],
    layout: PackedLayout,
    v,
    plains: Sequence[seal.Plaintext] | None = None,
) -> list[seal.Ciphertext]:
    """Chunk-wise sum of encrypted tiled vectors plus a plain per-row vector (in place);
    ``plains``: :func:`encode_rows` of ``v``, made before the ciphertexts arrived."""
    out = list(parts[0])
    for other in parts[1:]:
        if len(other) != len(out):
            raise CKKSParameterError(
                f"operands must have the same number of chunks, got {len(other)} vs {len(out)}"
            )
        for acc, ct in zip(out, other, strict=True):
            side.evaluator.add_inplace(acc, ct)
    tiles = layout.tile_rows(v)
    if len(tiles) != len(out):
        raise CKKSParameterError(f"plain vector spans {len(tiles)} chunks, ciphertext {len(out)}")
    for i, (ct, t) in enumerate(zip(out, tiles, strict=True)):
        pt = plains[i] if plains is not None else None
        if pt is None or pt.scale != ct.scale or pt.parms_id() != ct.parms_id():
            pt = side.encode(t, ct.scale, ct.parms_id())
        side.evaluator.add_plain_inplace(ct, pt)
    return out


@dataclass
class Prepared:
    """A data party's plaintexts of one minibatch's products, made before the residual arrives
    (they do not depend on it): ``x[g][c]`` feature tiles, ``masks[g]`` at the final level."""

    x: list[list[seal.Plaintext]]
    masks: list[seal.Plaintext]
    R: list[np.ndarray]  # kept to re-encode a mask if the residual arrives at another scale
    mask_sums: np.ndarray


def final_level(side: PublicSide) -> tuple[object, float]:
    """(parms_id, scale) of a summed product of a residual at 2^scale_bits: what SEAL's
    multiply_plain and rescale_to_next make (the scale divided by the dropped prime's value)."""
    p, data = side.params, side.ctx.first_context_data()
    scale = 2.0**p.scale_bits * 2.0**p.x_scale_bits
    if not p.rescale:
        return data.parms_id(), scale
    return data.next_context_data().parms_id(), scale / float(
        data.parms().coeff_modulus()[-1].value()
    )


def prepare_products(
    side: PublicSide, layout: PackedLayout, X: np.ndarray, rng: np.random.Generator
) -> Prepared:
    """Encode the feature tiles and draw and encode the masks of :func:`masked_products`.

    R is uniform in [-2^mask_bits, 2^mask_bits) in both the real and the imaginary part, one per
    feature group (drawn in group order, as before), never sent.
    """
    p = side.params
    bound, x_scale = 2.0**p.mask_bits, 2.0**p.x_scale_bits
    level, scale = final_level(side)
    groups = layout.tile_features(complex_features(X))
    Rs, sums = [], []
    for _ in groups:
        R = rng.uniform(-bound, bound, layout.slots) + 1j * rng.uniform(-bound, bound, layout.slots)
        Rs.append(R)
        sums.append(_interleave(layout.block_sums(R)))
    # every tile of every group in one batch, then every mask (they are at another level)
    flat = side.encode_many([xs for group in groups for xs in group], x_scale)
    chunks = len(groups[0]) if groups else 0
    x = [flat[g * chunks : (g + 1) * chunks] for g in range(len(groups))]
    masks = side.encode_many(Rs, scale, level)
    mask_sums = np.concatenate(sums)[: X.shape[1]] if sums else np.zeros(0)
    return Prepared(x, masks, Rs, mask_sums)


def masked_products(
    side: PublicSide,
    d_cts: Sequence[seal.Ciphertext],
    layout: PackedLayout,
    X: np.ndarray,
    rng: np.random.Generator,
    prepared: Prepared | None = None,
) -> tuple[list[seal.Ciphertext], np.ndarray]:
    """Encrypted ``sum_c X_c * d_c + R`` per feature group (two features per complex slot).

    Returns the ciphertexts and the block sums of R per feature (length ``X.shape[1]``) for the
    caller to subtract after :func:`open_blocks`. ``prepared``: :func:`prepare_products` of the
    same ``X`` and ``rng``, made earlier (the same plaintexts, so the same ciphertexts).
    """
    prep = prepared if prepared is not None else prepare_products(side, layout, X, rng)
    if prep.x and len(prep.x[0]) != len(d_cts):
        raise CKKSParameterError(
            f"X spans {len(prep.x[0])} row chunks but the residual has {len(d_cts)}"
        )
    out = []
    for group, mask, R in zip(prep.x, prep.masks, prep.R, strict=True):
        acc = None
        for ct, pt in zip(d_cts, group, strict=True):
            prod = seal.Ciphertext()
            side.evaluator.multiply_plain(ct, pt, prod)
            if acc is None:
                acc = prod
            else:
                side.evaluator.add_inplace(acc, prod)
        if side.params.rescale:
            # one rescale per group, not per product: the key holder then decrypts (and the
            # channel carries) one prime instead of two; the mask is encoded at that level
            side.evaluator.rescale_to_next_inplace(acc)
        if acc.scale != mask.scale or acc.parms_id() != mask.parms_id():
            mask = side.encode(R, acc.scale, acc.parms_id())  # a residual at another scale
        side.evaluator.add_plain_inplace(acc, mask)
        out.append(acc)
    return out, prep.mask_sums


def open_blocks(
    holder: KeyHolder, cts: Sequence[seal.Ciphertext], layout: PackedLayout, features: int
) -> np.ndarray:
    """Key holder: decrypt masked group ciphertexts, sum their blocks (still masked). The
    ciphertexts are consumed (see :meth:`KeyHolder.decrypt_many`)."""
    sums = [_interleave(layout.block_sums(z)) for z in holder.decrypt_many(cts)]
    return np.concatenate(sums)[:features] if sums else np.zeros(0)


def _interleave(z: np.ndarray) -> np.ndarray:
    """Complex block sums -> features (real part: even column, imaginary part: odd column)."""
    return np.stack([z.real, z.imag], axis=1).ravel()
