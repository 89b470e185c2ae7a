"""The three encryption schemes of the HE-VFL baseline behind one small interface.

Each scheme object lives in one process and holds, per local party, only what that party may
hold: the coordinator (party K) the secret key, data parties the public key / public context.
Payloads it produces are bytes (ciphertexts) or numpy arrays (scheme ``plain``), so the runtime
meters real sizes. The protocol itself is in :mod:`baselines.he_vfl`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from baselines.he_hooks import PhaseClock
from protocols import ckks_he as ck
from protocols import paillier_he as ph
from securevfl.errors import ConfigError
from securevfl.methods import RunContext

U_FRAC_BITS = 32  # Paillier fixed point of intermediate results / residuals
X_FRAC_BITS = 16  # Paillier fixed point of features (|x| <= 1: quantisation error 2^-17)


def parse_coeff_bits(text: str | Any) -> tuple[int, ...]:
    """``"60,40,40,60"`` -> (60, 40, 40, 60); ConfigError on anything else."""
    try:
        bits = tuple(int(t) for t in str(text).replace(" ", "").split(",") if t)
    except ValueError:
        raise ConfigError(
            f"ckks_coeff_bits must be comma-separated integers, got {text!r}"
        ) from None
    return bits


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

    def setup(self) -> None:
        """Key generation at the coordinator and shipping of public material (phase setup)."""

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

    def open(self, payload: Any, features: int) -> Any:
        """At the coordinator: decrypt (and reduce) a masked gradient."""
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

    def open(self, payload, features):
        return np.asarray(payload)

    def unmask(self, k, opened, mask):
        return opened - mask


class CKKSScheme(Scheme):
    """TenSEAL CKKS: packed elementwise products, coordinator-side block sums of masked slots."""

    name = "ckks"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        o = ctx.spec.options
        self.params = ck.CKKSParams(
            int(o.get("ckks_degree", 8192)),
            parse_coeff_bits(o.get("ckks_coeff_bits", "60,40,40,60")),
            int(o.get("ckks_scale_bits", 40)),
        )
        self.mask_bound = 2.0 ** int(o.get("ckks_mask_bits", 20))
        b = min(ctx.spec.batch_size, ctx.info.n_train)
        F = max(f + (1 if k == 0 else 0) for k, f in enumerate(ctx.info.features_per_party))
        P = int(o.get("ckks_rows_per_ct", 0)) or ck.choose_rows_per_ct(self.params.slots, b, F)
        self.layout = ck.PackedLayout(self.params.slots, P)
        self.ctxs: dict[int, Any] = {}
        self.public_bytes = 0
        self.key_holder_keys = "CKKS secret key + public key (generates them; never sends sk)"
        self.data_party_keys = "CKKS public context: public key only (no secret/Galois/relin keys)"

    def setup(self):
        rt, C = self.ctx.rt, self.K
        t0 = time.perf_counter()
        pub = None
        if rt.here(C):
            self.ctxs[C] = ck.make_secret_context(self.params, depth=1)
            pub = ck.public_context_bytes(self.ctxs[C])
        with rt.meter.in_phase("setup"):
            pub = rt.broadcast(pub, src=C, dsts=list(range(self.K)))
        for k in range(self.K):
            if rt.here(k):
                self.ctxs[k] = ck.load_context(pub)
        self.public_bytes = len(pub) if pub is not None else 0
        self.setup_s = time.perf_counter() - t0

    def encrypt_ir(self, k, v):
        with self.clock("encrypt"):
            cts = ck.encrypt_tiled(self.ctxs[k], self.layout, v)
        with self.clock("serialize"):
            return [ck.to_bytes(c) for c in cts]

    def combine(self, k, payloads, plain):
        c = self.ctxs[k]
        if payloads:
            with self.clock("serialize"):
                parts = [[ck.from_bytes(c, x) for x in p] for p in payloads]
            with self.clock("combine"):
                cts = ck.add_plain_tiled(ck.add_encrypted(parts), self.layout, plain)
        else:
            with self.clock("encrypt"):
                cts = ck.encrypt_tiled(c, self.layout, plain)
        with self.clock("serialize"):
            return [ck.to_bytes(x) for x in cts]

    def gradient_message(self, k, d_payload, X, rng):
        c = self.ctxs[k]
        with self.clock("serialize"):
            d_cts = [ck.from_bytes(c, x) for x in d_payload]
        with self.clock("multiply"):
            cts, mask_sums = ck.masked_products(
                d_cts, self.layout, X, rng, mask_bound=self.mask_bound
            )
        with self.clock("serialize"):
            return [ck.to_bytes(x) for x in cts], mask_sums

    def open(self, payload, features):
        c = self.ctxs[self.K]
        with self.clock("serialize"):
            cts = [ck.from_bytes(c, x) for x in payload]
        with self.clock("decrypt"):
            return ck.reduce_blocks(cts, self.layout, features)

    def unmask(self, k, opened, mask):
        return np.asarray(opened) - mask

    def describe(self):
        out = super().describe()
        out.update(
            {
                "ckks": {
                    "poly_modulus_degree": self.params.poly_modulus_degree,
                    "coeff_mod_bit_sizes": list(self.params.coeff_mod_bit_sizes),
                    "scale_bits": self.params.scale_bits,
                    "rows_per_ciphertext": self.layout.rows_per_ct,
                    "features_per_ciphertext": self.layout.feats_per_ct,
                    "mask_bound": self.mask_bound,
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
        self.pub: dict[int, Any] = {}
        self.priv = None
        self.public_bytes = 0
        self.key_holder_keys = f"Paillier-{self.bits} private key (p, q) + public key n"
        self.data_party_keys = f"Paillier-{self.bits} public key n only"

    def setup(self):
        rt, C = self.ctx.rt, self.K
        t0 = time.perf_counter()
        pub = None
        if rt.here(C):
            self.pub[C], self.priv = ph.generate_keypair(self.bits)
            pub = ph.public_key_bytes(self.pub[C])
        with rt.meter.in_phase("setup"):
            pub = rt.broadcast(pub, src=C, dsts=list(range(self.K)))
        for k in range(self.K):
            if rt.here(k):
                self.pub[k] = ph.load_public_key(pub)
        self.public_bytes = len(pub) if pub is not None else 0
        self.setup_s = time.perf_counter() - t0

    def encrypt_ir(self, k, v):
        p = self.pub[k]
        with self.clock("encrypt"):
            cts = ph.encrypt_vector(p, v, U_FRAC_BITS)
        with self.clock("serialize"):
            return ph.to_bytes(p, cts)

    def combine(self, k, payloads, plain):
        p = self.pub[k]
        if payloads:
            with self.clock("serialize"):
                parts = [ph.from_bytes(p, x) for x in payloads]
            with self.clock("combine"):
                cts = ph.add_plain(p, ph.add_encrypted(p, parts), plain, U_FRAC_BITS)
        else:
            with self.clock("encrypt"):
                cts = ph.encrypt_vector(p, plain, U_FRAC_BITS)
        with self.clock("serialize"):
            return ph.to_bytes(p, cts)

    def gradient_message(self, k, d_payload, X, rng):
        p = self.pub[k]
        with self.clock("serialize"):
            d_cts = ph.from_bytes(p, d_payload)
        with self.clock("multiply"):
            cts, masks = ph.masked_matvec(p, d_cts, X, X_FRAC_BITS, rng)
        with self.clock("serialize"):
            return ph.to_bytes(p, cts), masks

    def open(self, payload, features):
        p = self.pub[self.K]
        with self.clock("serialize"):
            cts = ph.from_bytes(p, payload)
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
                    "u_frac_bits": U_FRAC_BITS,
                    "x_frac_bits": X_FRAC_BITS,
                },
                "public_key_bytes": self.public_bytes,
            }
        )
        return out


SCHEMES = {"plain": PlainScheme, "ckks": CKKSScheme, "paillier": PaillierScheme}
