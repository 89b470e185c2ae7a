"""CKKS helpers on TenSEAL: validated parameters, key separation, packed products, bytes.

Design choices (measured on a 2-core machine, N = 8192, scale 2^40):

* Encrypting 4096 slots costs ~4.6 ms; a ciphertext-plaintext product (with rescale) ~1.4 ms;
  TenSEAL's ``matmul`` takes seconds. So a product ``X^T d`` (plaintext X, encrypted d) is
  computed with *packed elementwise products*: the minibatch is cut into chunks of ``P`` rows,
  every chunk of d is tiled ``S/P`` times across the ``S = N/2`` slots (one copy per feature), and
  ``X`` is laid out feature-major in the same slots, so one product handles ``S`` entries of X.
* The last reduction (summing the ``P`` rows of each feature block) would need ``log2 P``
  rotations per ciphertext and Galois keys (a 35 MB public context). Instead the holder of the
  secret key decrypts a ciphertext whose every slot carries a uniform additive mask known only to
  the sender, and sums the blocks in the clear (:func:`reduce_blocks`): it sees only masked slots,
  the sender subtracts the block sums of its mask. Data parties then need the public key only.
* Depth: ``X^T d`` is one plaintext multiplication (one rescale); the default chain
  [60, 40, 40, 60] carries two.

This module knows nothing of models or datasets; errors are :class:`CKKSParameterError`
(a ``ValueError``) so callers can translate them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tenseal as ts

# Largest total coefficient-modulus bit count for 128-bit classical security, by ring degree
# (HomomorphicEncryption.org standard, as enforced by SEAL's CoeffModulus::MaxBitCount).
MAX_COEFF_BITS_128 = {1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}


class CKKSParameterError(ValueError):
    """CKKS parameters that are insecure, malformed, or cannot carry the requested depth."""


def check_ring(n: int, coeff_mod_bit_sizes: Sequence[int]) -> None:
    """Raise CKKSParameterError unless N is supported and the chain is 128-bit secure at N."""
    if n not in MAX_COEFF_BITS_128:
        raise CKKSParameterError(
            f"poly_modulus_degree must be one of {sorted(MAX_COEFF_BITS_128)}, got {n}"
        )
    bits = list(coeff_mod_bit_sizes)
    if len(bits) < 2 or any(not 20 <= b <= 60 for b in bits):
        raise CKKSParameterError(
            f"coeff_mod_bit_sizes must hold >= 2 primes of 20..60 bits (the last is the special "
            f"prime), got {bits}"
        )
    if sum(bits) > MAX_COEFF_BITS_128[n]:
        raise CKKSParameterError(
            f"coeff_mod_bit_sizes must total <= {MAX_COEFF_BITS_128[n]} bits for 128-bit "
            f"security at N={n}, got {sum(bits)}"
        )


@dataclass(frozen=True)
class CKKSParams:
    """Ring degree, coefficient-modulus chain and scale (bits) of a CKKS context."""

    poly_modulus_degree: int = 8192
    coeff_mod_bit_sizes: tuple[int, ...] = (60, 40, 40, 60)
    scale_bits: int = 40

    @property
    def slots(self) -> int:
        return self.poly_modulus_degree // 2

    @property
    def depth(self) -> int:
        """Rescalings the chain carries: every prime except the first and the special last."""
        return len(self.coeff_mod_bit_sizes) - 2

    def validate(self, depth: int = 1) -> None:
        """Raise CKKSParameterError unless the parameters are secure and carry ``depth``."""
        check_ring(self.poly_modulus_degree, self.coeff_mod_bit_sizes)
        bits = list(self.coeff_mod_bit_sizes)
        if not 20 <= self.scale_bits <= min(bits[1:-1] or bits[:1]):
            raise CKKSParameterError(
                f"scale_bits must be in [20, {min(bits[1:-1] or bits[:1])}] (the middle primes), "
                f"got {self.scale_bits}"
            )
        if depth < 0 or depth > self.depth:
            raise CKKSParameterError(
                f"multiplicative depth must be <= {self.depth} for coeff_mod_bit_sizes {bits} "
                f"(one rescaling per middle prime), got {depth}"
            )
        # A value must survive decryption: after `depth` rescalings the first prime (and any
        # unused middle primes) must exceed the scale plus the value's own bits.
        if bits[0] - self.scale_bits < 10:
            raise CKKSParameterError(
                f"first prime must exceed scale_bits by >= 10 bits of integer precision, "
                f"got {bits[0]} vs {self.scale_bits}"
            )


def make_secret_context(
    params: CKKSParams | None = None, *, depth: int = 1, galois: bool = False, relin: bool = False
) -> ts.Context:
    """A context holding the secret key (for the key holder only)."""
    params = params or CKKSParams()
    params.validate(depth)
    ctx = ts.context(
        ts.SCHEME_TYPE.CKKS,
        params.poly_modulus_degree,
        coeff_mod_bit_sizes=list(params.coeff_mod_bit_sizes),
    )
    ctx.global_scale = 2.0**params.scale_bits
    if galois:
        ctx.generate_galois_keys()
    if relin:
        ctx.generate_relin_keys()
    return ctx


def public_context_bytes(ctx: ts.Context, *, galois: bool = False, relin: bool = False) -> bytes:
    """Serialize ``ctx`` WITHOUT its secret key (what data parties receive)."""
    return ctx.serialize(
        save_public_key=True,
        save_secret_key=False,
        save_galois_keys=galois and ctx.has_galois_keys(),
        save_relin_keys=relin and ctx.has_relin_keys(),
    )


def load_context(data: bytes) -> ts.Context:
    """Rebuild a context from bytes; the result holds only what was serialized."""
    return ts.context_from(data)


def keys_held(ctx: ts.Context) -> list[str]:
    """Names of the keys a context holds (for the record: who can do what)."""
    out = []
    if ctx.has_secret_key():
        out.append("secret")
    if ctx.has_public_key():
        out.append("public")
    if ctx.has_galois_keys():
        out.append("galois")
    if ctx.has_relin_keys():
        out.append("relin")
    return out


def encrypt(ctx: ts.Context, values: np.ndarray, *, slots: int | None = None) -> ts.CKKSVector:
    """Encrypt a real vector (at most ``slots`` entries when given) under the public key."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if slots is not None and v.size > slots:
        raise CKKSParameterError(f"a ciphertext holds at most {slots} values, got {v.size}")
    return ts.ckks_vector(ctx, v)


def decrypt(ct: ts.CKKSVector) -> np.ndarray:
    """Decrypt with the secret key of the ciphertext's context (raises where there is none)."""
    return np.asarray(ct.decrypt(), dtype=np.float64)


def to_bytes(ct: ts.CKKSVector) -> bytes:
    return ct.serialize()


def from_bytes(ctx: ts.Context, data: bytes) -> ts.CKKSVector:
    return ts.ckks_vector_from(ctx, data)


# ----------------------------------------------------------------------------------------------
# Packed layout for X^T d
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackedLayout:
    """Slot ``f * P + i`` of a ciphertext holds row ``i`` of a ``P``-row chunk, copy/feature ``f``.

    ``rows_per_ct`` (P) must divide ``slots`` (S); ``S // P`` features share one ciphertext.
    """

    slots: int
    rows_per_ct: int

    def __post_init__(self) -> None:
        P, S = self.rows_per_ct, self.slots
        if P < 1 or S % P:
            raise CKKSParameterError(f"rows_per_ct must divide the {S} slots, got {P}")

    @property
    def feats_per_ct(self) -> int:
        return self.slots // self.rows_per_ct

    def n_chunks(self, rows: int) -> int:
        return -(-rows // self.rows_per_ct)

    def n_groups(self, features: int) -> int:
        return -(-features // self.feats_per_ct)

    def tile_rows(self, v: np.ndarray) -> list[np.ndarray]:
        """Cut ``v`` (one value per row) into chunks, each tiled once per feature slot block."""
        P, F = self.rows_per_ct, self.feats_per_ct
        v = np.asarray(v, dtype=np.float64)
        padded = np.zeros(self.n_chunks(len(v)) * P)
        padded[: len(v)] = v
        return [np.tile(chunk, F) for chunk in padded.reshape(-1, P)]

    def tile_features(self, X: np.ndarray) -> list[list[np.ndarray]]:
        """``out[g][c]``: slots of feature group ``g``, row chunk ``c`` (feature-major)."""
        P, F = self.rows_per_ct, self.feats_per_ct
        X = np.asarray(X)
        b, d = X.shape
        # complex features (two columns per slot, see protocols.ckks_packed) keep their dtype
        padded = np.zeros((self.n_chunks(b) * P, self.n_groups(d) * F), dtype=X.dtype)
        padded[:b, :d] = X
        # (chunks, P, groups, F) -> (groups, chunks, F, P): feature-major inside each ciphertext
        blocks = padded.reshape(self.n_chunks(b), P, self.n_groups(d), F).transpose(2, 0, 3, 1)
        return [
            [blocks[g, c].ravel() for c in range(blocks.shape[1])] for g in range(blocks.shape[0])
        ]

    def block_sums(self, slots: np.ndarray) -> np.ndarray:
        """Sum each feature block of ``P`` slots: ``S`` values -> ``S // P`` values."""
        slots = np.asarray(slots)
        if not np.iscomplexobj(slots):
            slots = slots.astype(np.float64)
        return slots[: self.slots].reshape(self.feats_per_ct, self.rows_per_ct).sum(axis=1)


def choose_rows_per_ct(slots: int, batch: int, max_features: int) -> int:
    """Power-of-two P balancing residual ciphertexts (batch/P) against reply ciphertexts.

    Per minibatch a party moves ``batch / P`` residual ciphertexts and ``features * P / slots``
    masked product ciphertexts; their sum is smallest near ``P = sqrt(slots * batch / features)``.
    """
    best, best_cost = 1, float("inf")
    P = 1
    while P <= slots:
        cost = -(-batch // P) * 2 + -(-max_features // (slots // P))
        if cost < best_cost:
            best, best_cost = P, cost
        P *= 2
    return best


def encrypt_tiled(ctx: ts.Context, layout: PackedLayout, v: np.ndarray) -> list[ts.CKKSVector]:
    """Encrypt a per-row vector in the tiled layout (one ciphertext per row chunk)."""
    return [ts.ckks_vector(ctx, t) for t in layout.tile_rows(v)]


def add_encrypted(parts: Sequence[Sequence[ts.CKKSVector]]) -> list[ts.CKKSVector]:
    """Chunk-wise sum of several tiled encrypted vectors (the first operand is summed into).

    No copy is made: TenSEAL's ``copy`` costs ~15 ms (a serialization round trip), more than the
    additions themselves; callers pass freshly deserialized ciphertexts.
    """
    if not parts:
        raise CKKSParameterError("add_encrypted needs at least one operand")
    out = list(parts[0])
    for other in parts[1:]:
        if len(other) != len(out):
            raise CKKSParameterError(
                f"operands must have the same number of chunks, got {len(other)} vs {len(out)}"
            )
        for acc, ct in zip(out, other, strict=True):
            acc.add_(ct)
    return out


def add_plain_tiled(
    cts: Sequence[ts.CKKSVector], layout: PackedLayout, v: np.ndarray
) -> list[ts.CKKSVector]:
    """Add a plaintext per-row vector to a tiled encrypted one (in place; returns ``cts``)."""
    tiles = layout.tile_rows(v)
    if len(tiles) != len(cts):
        raise CKKSParameterError(f"plain vector spans {len(tiles)} chunks, ciphertext {len(cts)}")
    for ct, t in zip(cts, tiles, strict=True):
        ct.data.add_plain_(t.tolist())
    return list(cts)


def masked_products(
    d_cts: Sequence[ts.CKKSVector],
    layout: PackedLayout,
    X: np.ndarray,
    rng: np.random.Generator,
    *,
    mask_bound: float,
) -> tuple[list[ts.CKKSVector], np.ndarray]:
    """Encrypted, masked partial products for ``X^T d``.

    Returns one ciphertext per feature group holding ``sum_c X_c * d_c + R`` slot-wise (R uniform
    in [-mask_bound, mask_bound), drawn here and never sent), and the block sums of R per feature
    (length ``X.shape[1]``) that the caller subtracts after the key holder's :func:`reduce_blocks`.
    """
    if mask_bound <= 0:
        raise CKKSParameterError(f"mask_bound must be > 0, got {mask_bound}")
    tiles = layout.tile_features(X)
    if tiles and len(tiles[0]) != len(d_cts):
        raise CKKSParameterError(
            f"X spans {len(tiles[0])} row chunks but the residual has {len(d_cts)}"
        )
    out, mask_sums = [], []
    # straight to TenSEAL's C++ vectors with plain lists: skips the PlainTensor round trip that
    # costs ~0.4 ms of the ~3 ms per product (measured)
    raw = [ct.data for ct in d_cts]
    for group in tiles:
        acc = raw[0].mul_plain(group[0].tolist())
        for ct, pt in zip(raw[1:], group[1:], strict=True):
            acc.add_(ct.mul_plain(pt.tolist()))
        R = rng.uniform(-mask_bound, mask_bound, size=layout.slots)
        acc.add_plain_(R.tolist())
        out.append(ts.CKKSVector(data=acc))
        mask_sums.append(layout.block_sums(R))
    return out, np.concatenate(mask_sums)[: X.shape[1]] if mask_sums else np.zeros(0)


def reduce_blocks(cts: Sequence[ts.CKKSVector], layout: PackedLayout, features: int) -> np.ndarray:
    """Key holder: decrypt masked group ciphertexts and sum their feature blocks (still masked)."""
    sums = [layout.block_sums(decrypt(ct)) for ct in cts]
    return np.concatenate(sums)[:features] if sums else np.zeros(0)
