"""Depth-0 complex-packed CKKS on SEAL: products, key separation, bytes, the precision rule."""

import numpy as np
import pytest

from protocols import ckks_packed as cp
from protocols.ckks_he import CKKSParameterError, PackedLayout


@pytest.fixture(scope="module")
def keys():
    holder = cp.KeyHolder(cp.PackedParams())
    return holder, cp.load_public(holder.params, holder.public_bytes())


@pytest.mark.parametrize("b, d, P", [(1024, 55, 512), (300, 7, 64), (77, 20, 4096)])
def test_masked_products_open_to_xtd_after_unmasking(keys, b, d, P):
    holder, side = keys
    rng = np.random.default_rng(b)
    L = PackedLayout(4096, P)
    X, v, w = rng.uniform(-1, 1, (b, d)), rng.normal(size=b), rng.normal(size=b)
    # the residual as the protocol forms it: an encrypted vector plus a plain one, via bytes
    sent = [side.to_bytes(c) for c in cp.encrypt_rows(side, L, v)]
    d_cts = cp.add_rows(side, [[side.from_bytes(x) for x in sent]], L, w)
    cts, mask_sums = cp.masked_products(side, d_cts, L, X, rng)
    pairs = (d + 1) // 2  # two features per complex slot
    assert len(cts) == (pairs + L.feats_per_ct - 1) // L.feats_per_ct
    opened = cp.open_blocks(holder, [holder.from_bytes(side.to_bytes(c)) for c in cts], L, d)
    truth = X.T @ (v + w)
    assert np.median(np.abs(opened - truth)) > 1000  # every slot carries a 2^20 mask
    np.testing.assert_allclose(opened - mask_sums, truth, atol=1e-3)  # ~1e-6 a slot


def test_data_parties_hold_the_public_key_only(keys):
    holder, side = keys
    assert holder.keys_held() == ["secret", "public"] and side.keys_held() == ["public"]
    assert not hasattr(side, "decryptor") and not hasattr(side, "decrypt")
    assert len(holder.public_bytes()) < 1_000_000  # parameters + public key, no Galois keys
    with pytest.raises(CKKSParameterError, match="valid SEAL ciphertext"):
        side.from_bytes(b"\x00" * 64)


@pytest.mark.parametrize("scale", [40, 30])
def test_predicted_error_matches_what_decryption_gives(scale):
    p = cp.PackedParams(scale_bits=scale)
    holder = cp.KeyHolder(p)
    side = cp.load_public(p, holder.public_bytes())
    rng = np.random.default_rng(scale)
    b, d, L = 1024, 16, PackedLayout(4096, 512)
    X, v = rng.uniform(-1, 1, (b, d)), rng.uniform(-8, 8, b)
    cts, sums = cp.masked_products(side, cp.encrypt_rows(side, L, v), L, X, rng)
    err = (cp.open_blocks(holder, cts, L, d) - sums - X.T @ v) / (4 * b)  # gradient entries
    rms = float(np.sqrt(np.mean(err**2)))
    assert p.predicted_error(b) / 4 < rms < 4 * p.predicted_error(b)


@pytest.mark.parametrize(
    "kw, batch, match",
    [
        (dict(scale_bits=25), 1024, r"2\^-20 at batch 1024.*use scale_bits >= 3"),
        (dict(coeff_mod_bit_sizes=(60, 60), scale_bits=20), 64, "use a longer chain"),
        (dict(coeff_mod_bit_sizes=(60, 50, 60), scale_bits=60, mask_bits=40), 64, "<= 47"),
        (dict(scale_bits=60, mask_bits=40), 64, "features keep >= 20 bits"),
        (dict(coeff_mod_bit_sizes=(60, 60, 60, 60)), 64, "<= 218 bits"),
        (dict(poly_modulus_degree=5000), 64, "poly_modulus_degree"),
        (dict(mask_bits=41), 64, "mask_bits"),
    ],
)
def test_parameters_are_checked_for_security_fit_and_precision(kw, batch, match):
    with pytest.raises(CKKSParameterError, match=match):
        cp.PackedParams(**kw).validate(batch)


def test_nearest_safe_scale_passes_and_one_less_does_not():
    p = cp.PackedParams(scale_bits=25)
    s = p.nearest_safe_scale(1024)
    cp.PackedParams(scale_bits=s).validate(1024)
    with pytest.raises(CKKSParameterError):
        cp.PackedParams(scale_bits=s - 1).validate(1024)
    cp.PackedParams().validate(1)  # the defaults hold even for one-row batches
