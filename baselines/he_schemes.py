"""The three encryption schemes of the HE-VFL baseline behind one small interface.

Each scheme object lives in one process and holds, per local party, only what that party may
hold: the coordinator (party K) the secret key, data parties the public key / public context.
Payloads it produces are bytes (ciphertexts) or numpy arrays (scheme ``plain``), so the runtime
meters real sizes. The protocol itself is in :mod:`baselines.he_vfl`.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from baselines.he_hooks import PhaseClock
from baselines.he_messages import RULES, STEP_GRADIENT, STEP_PUBLIC
from protocols import ckks_he as ck
from protocols import ckks_packed as cp
from protocols import paillier_he as ph
from securevfl.context import RunContext
from securevfl.errors import ConfigError
from securevfl.runtime import peer_bytes

U_FRAC_BITS = 32  # Paillier fixed point of intermediate results / residuals
X_FRAC_BITS = 16  # Paillier fixed point of features (|x| <= 1: quantisation error 2^-17)
DEFAULT_COEFF_BITS = "60,60,60"  # CKKS: two data primes + the special prime (depth 0)
DEFAULT_SCALE_BITS = 40  # CKKS scale of the residual d


def parse_coeff_bits(text: str | Any) -> tuple[int, ...]:
    """``"60,40,40,60"`` -> (60, 40, 40, 60); ConfigError on anything else."""
    try:
        return tuple(int(t) for t in str(text).replace(" ", "").split(",") if t)
    except ValueError:
        raise ConfigError(
            f"ckks_coeff_bits must be comma-separated integers, got {text!r}"
        ) from None


class Scheme:
    """Interface: setup keys, encrypt IRs, combine residuals, masked gradients, open, unmask."""

    name = "base"
    key_holder_keys = ""
    data_party_keys = ""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.K = ctx.info.data_parties
        self.setup_s = 0.0
        self.clock = PhaseClock()
        self.rules = RULES[self.name](self)  # what each of its messages may be

    def setup(self) -> None:
        """Key generation at the coordinator and shipping of public material (phase setup)."""

    def precompute(self, k: int, rows: int, part: float) -> None:
        """Party k waits: ``part`` of the data-free work of encrypting ``rows`` values next."""

    def prepare(self, k: int, X: np.ndarray, rng: np.random.Generator, plain=None) -> None:
        """Party k waits: what gradient_message on X (and combine on plain) can do early."""

    def encrypt_ir(self, k: int, v: np.ndarray) -> Any:
        raise NotImplementedError

    def combine(self, k: int, payloads: list[Any], plain: np.ndarray) -> Any:
        """At the active party: sum encrypted IRs and add its plaintext part."""
        raise NotImplementedError

    def gradient_message(
        self, k: int, d_payload: Any, X: np.ndarray, rng: np.random.Generator
    ) -> tuple[Any, Any]:
        """(masked encrypted X^T d for the coordinator, the mask state kept by party k)."""
        raise NotImplementedError

    def open(self, payload: Any, features: int, src: int) -> Any:
        """At the coordinator: decrypt (and reduce) party ``src``'s masked gradient."""
        raise NotImplementedError

    def unmask(self, k: int, opened: Any, mask: Any) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {
            "keys": {f"party {k}": self.data_party_keys for k in range(self.K)}
            | {f"party {self.K} (coordinator)": self.key_holder_keys}
        }


class PlainScheme(Scheme):
    """The same Taylor protocol without encryption (the approximation's accuracy reference)."""

    name = "plain"
    key_holder_keys = "none (no encryption)"
    data_party_keys = "none (no encryption)"

    def encrypt_ir(self, k, v):
        return np.asarray(v, dtype=np.float64)

    def combine(self, k, payloads, plain):
        return plain + sum(payloads) if payloads else plain

    def gradient_message(self, k, d_payload, X, rng):
        R = rng.uniform(-1.0, 1.0, size=X.shape[1])
        return X.T @ d_payload + R, R

    def open(self, payload, features, src):
        return np.asarray(payload)

    def unmask(self, k, opened, mask):
        return opened - mask


def ckks_params(options: dict[str, Any], batch: int) -> cp.PackedParams:
    """The packed depth-0 CKKS parameters of a run's options, validated at ``batch`` rows."""
    p = cp.PackedParams(
        int(options.get("ckks_degree", 8192)),
        parse_coeff_bits(options.get("ckks_coeff_bits", DEFAULT_COEFF_BITS)),
        int(options.get("ckks_scale_bits", DEFAULT_SCALE_BITS)),
        int(options.get("ckks_mask_bits", 20)),
    )
    try:
        p.validate(batch)
    except ck.CKKSParameterError as exc:
        raise ConfigError(f"he-vfl ckks: {exc}") from None
    return p


class CKKSScheme(Scheme):
    """CKKS on SEAL: complex-packed depth-0 products; the coordinator sums masked slot blocks."""

    name = "ckks"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        o = ctx.spec.options
        b = min(ctx.spec.batch_size, ctx.info.n_train)
        self.params = ckks_params(o, b)
        F = max(f + (1 if k == 0 else 0) for k, f in enumerate(ctx.info.features_per_party))
        # two features share a complex slot: size the layout for half the columns
        P = int(o.get("ckks_rows_per_ct", 0)) or ck.choose_rows_per_ct(
            self.params.slots, b, -(-F // 2)
        )
        self.layout = ck.PackedLayout(self.params.slots, P)
        self.sides: dict[int, Any] = {}
        self.made: dict[int, tuple[list[bytes], list[Any]]] = {}
        self.prepared: dict[int, tuple[np.ndarray, cp.Prepared]] = {}  # made while waiting
        self.plains: dict[int, tuple[np.ndarray, list[Any]]] = {}  # party 0's, while waiting
        self.public_bytes = 0
        self.key_holder_keys = "CKKS secret key + public key (generates them; never sends sk)"
        self.data_party_keys = "CKKS parameters + public key only (no secret/Galois/relin keys)"

    def setup(self):
        rt, C = self.ctx.rt, self.K
        t0 = time.perf_counter()
        pub = None
        if rt.here(C):
            self.sides[C] = cp.KeyHolder(self.params)
            pub = self.sides[C].public_bytes()
        with rt.meter.in_phase("setup"):
            pub = rt.broadcast(pub, src=C, dsts=list(range(self.K)), expect=self.rules.public())
        for k in range(self.K):
            if rt.here(k):
                with peer_bytes(STEP_PUBLIC, src=C, dst=k):
                    self.sides[k] = cp.load_public(self.params, pub)
        for k, side in self.sides.items():  # each party's record holds its side
            self.ctx.hold_key(k, "he", side)
        self.public_bytes = len(pub) if pub is not None else 0
        self.setup_s = time.perf_counter() - t0

    def _dump(self, side, cts) -> list[bytes]:
        with self.clock("serialize"):
            return [side.to_bytes(c) for c in cts]

    def _load(self, side, payload, step: str, src: int, dst: int) -> list[Any]:
        with self.clock("serialize"), peer_bytes(step, src=src, dst=dst):
            return [side.from_bytes(x) for x in payload]

    def prepare(self, k, X, rng, plain=None):
        with self.clock("prepare"):
            self.prepared[k] = (X, cp.prepare_products(self.sides[k], self.layout, X, rng))
            if plain is not None:
                self.plains[k] = (plain, cp.encode_rows(self.sides[k], self.layout, plain))

    def precompute(self, k, rows, part):
        if rows > 0 and k in self.sides:
            self.sides[k].precompute_zeros(math.ceil(part * self.layout.n_chunks(rows)))

    def encrypt_ir(self, k, v):
        with self.clock("encrypt"):
            cts = cp.encrypt_rows(self.sides[k], self.layout, v)
        return self._dump(self.sides[k], cts)

    def combine(self, k, payloads, plain):
        side = self.sides[k]
        if payloads:
            # from the passive parties 1..K-1, in order (party 0 combines)
            step = "intermediate results"
            parts = [self._load(side, p, step, src, k) for src, p in enumerate(payloads, 1)]
            made = self.plains.pop(k, None)  # encoded while waiting: only for this very vector
            pts = made[1] if made is not None and np.array_equal(made[0], plain) else None
            with self.clock("combine"):
                cts = cp.add_rows(side, parts, self.layout, plain, pts)
        else:
            with self.clock("encrypt"):
                cts = cp.encrypt_rows(side, self.layout, plain)
        msg = self._dump(side, cts)
        self.made[k] = (msg, cts)  # the residual's maker needs no copy of its own bytes
        return msg

    def gradient_message(self, k, d_payload, X, rng):
        side = self.sides[k]
        made = self.made.pop(k, None)
        # party k made this residual itself: the ciphertexts it serialized are the same ones
        # (bytes compared, so a message that differs is always loaded)
        d_cts = (
            made[1]
            if made is not None and made[0] == d_payload
            else self._load(side, d_payload, "derivatives", 0, k)
        )
        made = self.prepared.pop(k, None)  # made while waiting, from this same X (and rng)
        prep = made[1] if made is not None and made[0] is X else None
        with self.clock("multiply"):
            cts, mask_sums = cp.masked_products(side, d_cts, self.layout, X, rng, prep)
        return self._dump(side, cts), mask_sums

    def open(self, payload, features, src):
        holder = self.sides[self.K]
        cts = self._load(holder, payload, STEP_GRADIENT, src, self.K)
        with self.clock("decrypt"):
            return cp.open_blocks(holder, cts, self.layout, features)

    def unmask(self, k, opened, mask):
        return np.asarray(opened) - mask

    def describe(self):
        out = super().describe()
        p = self.params
        out.update(
            {
                "ckks": {
                    "backend": "SEAL via tenseal.sealapi (keys, NTTs, products, rescaling, "
                    "decryption); slots encoded in numpy; public-key encryption at the data "
                    "level; depth 0, complex packing",
                    "poly_modulus_degree": p.poly_modulus_degree,
                    "coeff_mod_bit_sizes": list(p.coeff_mod_bit_sizes),
                    "scale_bits": p.scale_bits,
                    "x_scale_bits": p.x_scale_bits,
                    "rows_per_ciphertext": self.layout.rows_per_ct,
                    "features_per_ciphertext": 2 * self.layout.feats_per_ct,
                    "mask_bound": 2.0**p.mask_bits,
                    "predicted_gradient_error": p.predicted_error(
                        min(self.ctx.spec.batch_size, self.ctx.info.n_train)
                    ),
                },
                "public_context_bytes": self.public_bytes,
            }
        )
        return out


class PaillierScheme(Scheme):
    """python-paillier: one ciphertext per value, as FATE and Hardy et al. do."""

    name = "paillier"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.bits = int(ctx.spec.options.get("paillier_bits", 2048))
        self.randomness = str(ctx.spec.options.get("paillier_randomness", "full"))
        self.pub: dict[int, Any] = {}
        self.fast: dict[int, ph.FixedBaseEncryptor] = {}
        self.priv = None
        self.public_bytes = 0
        extra = " and h_s (DJN base)" if self.randomness == "djn" else ""
        self.key_holder_keys = f"Paillier-{self.bits} private key (p, q) + public key n{extra}"
        self.data_party_keys = f"Paillier-{self.bits} public key n{extra} only"

    def setup(self):
        rt, C = self.ctx.rt, self.K
        t0 = time.perf_counter()
        pub = None
        if rt.here(C):
            self.pub[C], self.priv = ph.generate_keypair(self.bits)
            pub = ph.public_key_bytes(self.pub[C])
            if self.randomness == "djn":  # n, then h_s at ciphertext width
                pub = [pub, ph.to_bytes(self.pub[C], [ph.djn_base(self.pub[C])])]
        with rt.meter.in_phase("setup"):
            pub = rt.broadcast(pub, src=C, dsts=list(range(self.K)), expect=self.rules.public())
        for k in range(self.K):
            if rt.here(k):
                n_bytes = pub[0] if self.randomness == "djn" else pub
                with peer_bytes(STEP_PUBLIC, src=C, dst=k):
                    self.pub[k] = ph.load_public_key(n_bytes, self.bits)
                    if self.randomness == "djn":  # the fixed-base table: precomputed at setup
                        (h_s,) = ph.from_bytes(self.pub[k], pub[1])
                        self.fast[k] = ph.FixedBaseEncryptor(self.pub[k], h_s)
        for k, p in self.pub.items():  # each party's record holds its side
            self.ctx.hold_key(k, "he", (p, self.priv) if k == C else p)
        if self.randomness == "djn":
            pub = b"".join(pub) if pub is not None else None
        self.public_bytes = len(pub) if pub is not None else 0
        self.setup_s = time.perf_counter() - t0

    def encrypt_ir(self, k, v):
        p = self.pub[k]
        with self.clock("encrypt"):
            cts = ph.encrypt_vector(p, v, U_FRAC_BITS, self.fast.get(k))
        with self.clock("serialize"):
            return ph.to_bytes(p, cts)

    def combine(self, k, payloads, plain):
        p = self.pub[k]
        if payloads:
            with self.clock("serialize"):
                parts = [
                    self._load(x, "intermediate results", src, k)
                    for src, x in enumerate(payloads, 1)
                ]
            with self.clock("combine"):
                cts = ph.add_plain(p, ph.add_encrypted(p, parts), plain, U_FRAC_BITS)
        else:
            with self.clock("encrypt"):
                cts = ph.encrypt_vector(p, plain, U_FRAC_BITS, self.fast.get(k))
        with self.clock("serialize"):
            return ph.to_bytes(p, cts)

    def gradient_message(self, k, d_payload, X, rng):
        p = self.pub[k]
        with self.clock("serialize"):
            d_cts = self._load(d_payload, "derivatives", 0, k)
        with self.clock("multiply"):
            cts, masks = ph.masked_matvec(p, d_cts, X, X_FRAC_BITS, rng)
        with self.clock("serialize"):
            return ph.to_bytes(p, cts), masks

    def _load(self, data: bytes, step: str, src: int, dst: int) -> list[Any]:
        with peer_bytes(step, src=src, dst=dst):
            return ph.from_bytes(self.pub[dst], data)

    def open(self, payload, features, src):
        with self.clock("serialize"):
            cts = self._load(payload, STEP_GRADIENT, src, self.K)
        # residues mod n travel as Python ints (arbitrary precision, allowed by the channel)
        with self.clock("decrypt"):
            return ph.decrypt_vector(self.priv, cts)

    def unmask(self, k, opened, mask):
        return ph.unmask(self.pub[k], opened, mask, U_FRAC_BITS + X_FRAC_BITS)

    def describe(self):
        out = super().describe()
        out.update(
            {
                "paillier": {
                    "key_bits": self.bits,
                    "randomness": "h_s^a, a of n_bits/2 bits, fixed-base table (DJN)"
                    if self.randomness == "djn"
                    else "r^n, r uniform mod n (textbook)",
                    "u_frac_bits": U_FRAC_BITS,
                    "x_frac_bits": X_FRAC_BITS,
                },
                "public_key_bytes": self.public_bytes,
            }
        )
        return out


SCHEMES = {"plain": PlainScheme, "ckks": CKKSScheme, "paillier": PaillierScheme}
