"""CKKS helpers: parameter validation, key separation, packed masked products."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import ckks_he as ck


@pytest.fixture(scope="module")
def keys():
    sk = ck.make_secret_context()
    pub = ck.public_context_bytes(sk)
    return sk, pub, ck.load_context(pub)


def test_default_parameters_are_valid_and_carry_two_levels():
    p = ck.CKKSParams()
    p.validate(depth=2)
    assert (p.poly_modulus_degree, p.slots, p.depth) == (8192, 4096, 2)


@pytest.mark.parametrize(
    "params, depth, match",
    [
        (ck.CKKSParams(), 3, "depth must be <= 2"),
        (ck.CKKSParams(coeff_mod_bit_sizes=(60, 60)), 1, "depth must be <= 0"),
        (ck.CKKSParams(coeff_mod_bit_sizes=(60, 40, 40, 40, 40, 60)), 1, "<= 218 bits"),
        (ck.CKKSParams(poly_modulus_degree=5000), 1, "poly_modulus_degree"),
        (ck.CKKSParams(scale_bits=50), 1, "scale_bits"),
        (ck.CKKSParams(coeff_mod_bit_sizes=(60, 40, 70)), 1, "20..60 bits"),
    ],
)
def test_bad_parameters_raise_a_clear_error(params, depth, match):
    with pytest.raises(ck.CKKSParameterError, match=match):
        params.validate(depth)
    with pytest.raises(ck.CKKSParameterError):
        ck.make_secret_context(params, depth=depth)


def test_public_context_has_no_secret_key_and_cannot_decrypt(keys):
    sk, pub, pc = keys
    assert "secret" in ck.keys_held(sk)
    assert ck.keys_held(pc) == ["public"]  # no secret, no Galois, no relin keys
    assert len(pub) < 1_000_000  # no Galois keys (~35 MB with them)
    ct = ck.encrypt(pc, np.arange(5.0))
    with pytest.raises(ValueError, match="secret"):
        ck.decrypt(ct)
    # the key holder decrypts the same bytes
    back = ck.decrypt(ck.from_bytes(sk, ck.to_bytes(ct)))
    np.testing.assert_allclose(back, np.arange(5.0), atol=1e-5)


def test_encrypt_rejects_more_values_than_slots(keys):
    with pytest.raises(ck.CKKSParameterError, match="at most 4096"):
        ck.encrypt(keys[2], np.zeros(5000), slots=4096)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 300), d=st.integers(1, 40), logp=st.integers(0, 9))
def test_layout_reproduces_xtd_in_the_clear(b, d, logp):
    """Tiling + elementwise products + block sums == X^T d (the packing, without encryption)."""
    L = ck.PackedLayout(1024, 2**logp)
    rng = np.random.default_rng(b * 100 + d)
    X, v = rng.normal(size=(b, d)), rng.normal(size=b)
    rows = L.tile_rows(v)
    feats = L.tile_features(X)
    assert all(len(t) == 1024 for t in rows) and len(feats) == L.n_groups(d)
    got = np.concatenate(
        [L.block_sums(sum(r * x for r, x in zip(rows, g, strict=True))) for g in feats]
    )[:d]
    np.testing.assert_allclose(got, X.T @ v, atol=1e-9)


@pytest.mark.parametrize("b, d, P", [(1024, 55, None), (300, 7, 64), (77, 20, 4096)])
def test_masked_products_open_to_xtd_after_unmasking(keys, b, d, P):
    sk, _, pc = keys
    rng = np.random.default_rng(1)
    X, v = rng.uniform(-1, 1, (b, d)), rng.normal(size=b)
    P = P or ck.choose_rows_per_ct(4096, b, d)
    L = ck.PackedLayout(4096, P)
    d_cts = ck.encrypt_tiled(pc, L, v)
    cts, mask_sums = ck.masked_products(d_cts, L, X, rng, mask_bound=2.0**20)
    opened = ck.reduce_blocks([ck.from_bytes(sk, ck.to_bytes(c)) for c in cts], L, d)
    truth = X.T @ v
    # what the key holder sees is far from the gradient: every slot carries a 2^20 mask
    assert np.median(np.abs(opened - truth)) > 1000
    np.testing.assert_allclose(opened - mask_sums, truth, atol=1e-3)


def test_sums_and_plain_additions(keys):
    sk, _, pc = keys
    L = ck.PackedLayout(4096, 256)
    a, b, c = (np.random.default_rng(i).normal(size=600) for i in range(3))
    s = ck.add_plain_tiled(
        ck.add_encrypted([ck.encrypt_tiled(pc, L, a), ck.encrypt_tiled(pc, L, b)]), L, c
    )
    got = np.concatenate([ck.decrypt(ck.from_bytes(sk, ck.to_bytes(x)))[:256] for x in s])
    np.testing.assert_allclose(got[:600], a + b + c, atol=1e-4)
    with pytest.raises(ck.CKKSParameterError, match="same number of chunks"):
        ck.add_encrypted([ck.encrypt_tiled(pc, L, a), ck.encrypt_tiled(pc, L, a[:10])])


def test_layout_and_rows_per_ct_rules():
    with pytest.raises(ck.CKKSParameterError, match="divide"):
        ck.PackedLayout(4096, 300)
    for b, d in [(1024, 55), (64, 31), (4096, 1), (10, 2000)]:
        P = ck.choose_rows_per_ct(4096, b, d)
        assert 4096 % P == 0 and P & (P - 1) == 0
    assert ck.choose_rows_per_ct(4096, 1024, 55) in (256, 512)
