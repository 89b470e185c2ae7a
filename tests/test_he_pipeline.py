"""HE-VFL's CKKS work moved off the critical path (issue 29) computes exactly what it did:
encryption as Enc(0) + pt decrypts to pt (and with SEAL's encryptor is SEAL's own encryption:
bytes, under a seeded generator), plaintexts
encoded while a party waits give the same ciphertexts, and the processes-mode epoch bench checks
every opened gradient from what each party process recorded."""

import json
import os

import numpy as np
import pytest
from tenseal import sealapi as seal

from bench import he_epoch_bench as heb
from bench import he_epoch_record as rec
from protocols import ckks_packed as cp
from protocols.ckks_he import PackedLayout


def _seeded_side(seed: int) -> cp.PublicSide:
    """A data party's side whose encryption randomness is a seeded Blake2xb stream."""
    p = cp.PackedParams()
    parms = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
    parms.set_poly_modulus_degree(p.poly_modulus_degree)
    parms.set_coeff_modulus(
        seal.CoeffModulus.Create(p.poly_modulus_degree, list(p.coeff_mod_bit_sizes))
    )
    parms.set_random_generator(seal.Blake2xbPRNGFactory([seed] * 8))
    ctx = seal.SEALContext(parms, True, seal.SEC_LEVEL_TYPE.TC128)
    pk = seal.PublicKey()
    seal.KeyGenerator(ctx).create_public_key(pk)
    return cp.PublicSide(p, ctx, pk)


def test_encryption_from_a_precomputed_zero_decrypts_to_the_plaintext():
    holder = cp.KeyHolder(cp.PackedParams())
    side = cp.load_public(holder.params, holder.public_bytes())
    values = np.linspace(-3, 3, side.params.slots)
    pt = side.encode(values, 2.0**40)
    fresh = side.encrypt(pt)  # no zero waiting: one drawn now
    side.precompute_zeros(2)
    assert len(side.zeros) == 2
    pooled = side.encrypt(pt)
    assert len(side.zeros) == 1  # each Enc(0) is used once
    assert side.to_bytes(fresh) != side.to_bytes(pooled)  # each with its own randomness
    for ct in (fresh, pooled):
        assert ct.scale == pt.scale and ct.parms_id() == side.ctx.first_parms_id()
        got = holder.decrypt_many([holder.from_bytes(side.to_bytes(ct))])[0]
        assert np.max(np.abs(got - values)) < 2**-20


def test_seals_encryptor_path_is_seals_encrypt():
    """Where Enc(0) falls back to SEAL's encryptor, Enc(0) + pt is SEAL's encrypt (bytes)."""
    side = _seeded_side(7)
    side.zero_maker = None
    pt = side.encode(np.linspace(-3, 3, side.params.slots).tolist(), 2.0**40)
    want = seal.Ciphertext()
    side.encryptor.encrypt(pt, want)  # a seeded factory: every encryption draws the same stream
    fresh = side.encrypt(pt)
    side.precompute_zeros(2)
    pooled = side.encrypt(pt)
    for ct in (fresh, pooled):
        assert ct.scale == want.scale and ct.parms_id() == want.parms_id()
        assert side.to_bytes(ct) == side.to_bytes(want)


def _reference_products(side, d_cts, L, X, rng):
    """The products as they were computed before preparing (encode inside the loop)."""
    p, out, sums = side.params, [], []
    bound = 2.0**p.mask_bits
    for group in L.tile_features(cp.complex_features(X)):
        acc = None
        for ct, xs in zip(d_cts, group, strict=True):
            prod = seal.Ciphertext()
            side.evaluator.multiply_plain(ct, side.encode(xs.tolist(), 2.0**p.x_scale_bits), prod)
            acc = prod if acc is None else (side.evaluator.add_inplace(acc, prod) or acc)
        side.evaluator.rescale_to_next_inplace(acc)
        R = rng.uniform(-bound, bound, L.slots) + 1j * rng.uniform(-bound, bound, L.slots)
        side.evaluator.add_plain_inplace(acc, side.encode(R.tolist(), acc.scale, acc.parms_id()))
        out.append(acc)
        sums.append(cp._interleave(L.block_sums(R)))
    return out, np.concatenate(sums)[: X.shape[1]]


@pytest.mark.parametrize("scale_bits", [40, 39])  # 39: a residual at another scale than planned
def test_prepared_plaintexts_give_the_same_ciphertexts(scale_bits):
    side = _seeded_side(3)
    rng = np.random.default_rng(5)
    L = PackedLayout(4096, 512)
    X, u, plain = rng.uniform(-1, 1, (1000, 27)), rng.normal(size=1000), rng.normal(size=1000)
    pts = [side.encode(t.tolist(), 2.0**scale_bits) for t in L.tile_rows(u)]
    enc = [side.to_bytes(side.encrypt(pt)) for pt in pts]

    def residual(plains):
        return cp.add_rows(side, [[side.from_bytes(b) for b in enc]], L, plain, plains)

    # party 0's plain part encoded before the IRs arrived: the same residual bytes
    early = residual(cp.encode_rows(side, L, plain))
    assert [side.to_bytes(c) for c in early] == [side.to_bytes(c) for c in residual(None)]
    want, want_sums = _reference_products(side, residual(None), L, X, np.random.default_rng(9))
    prep = cp.prepare_products(side, L, X, np.random.default_rng(9))
    got, sums = cp.masked_products(side, early, L, X, None, prep)
    np.testing.assert_array_equal(sums, want_sums)
    assert [side.to_bytes(c) for c in got] == [side.to_bytes(c) for c in want]


def test_processes_bench_checks_every_gradient_of_every_party(tmp_path, capsys):
    argv = ["--dataset", "breast", "--batch-size", "128", "--batches", "2", "--processes"]
    assert heb.main([*argv, "--dump-blocks", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    d = out["detail"]
    assert out["exact"] is True and d["gradients_checked"] == 2 * 2 and d["batches"] == 2
    assert d["runtime"].startswith("one OS process per party") and out["seconds"] > 0
    # every party's messages; the largest party's peak (SEAL, numpy and its ciphertexts: 97 MB
    # measured once it stopped loading torch, which no HE party uses)
    assert out["bytes"] > 0 and out["peak_mb"] > 60
    assert d["ckks"]["poly_modulus_degree"] == 8192 and "128-bit" in d["ckks"]["security"]
    z = np.load(tmp_path / "blocks.npz", allow_pickle=False)
    assert sorted(z["order"].tolist()) == list(range(len(z["y"])))
    assert z["X0"].shape[0] == z["X1"].shape[0] == len(z["y"]) and int(z["batch_size"]) == 128
    assert not os.environ.get(rec.RECORD_ENV)  # the parent's environment is left as it was


def test_record_check_catches_a_wrong_gradient(tmp_path):
    rng = np.random.default_rng(0)
    X0, X1 = rng.uniform(-1, 1, (8, 3)), rng.uniform(-1, 1, (8, 2))
    plain, ir = rng.normal(size=8), rng.normal(size=8)
    d = plain + ir
    np.savez(tmp_path / "party0.npz", plain_0=plain, X_0=X0, g_0=X0.T @ d)
    g1 = X1.T @ d
    np.savez(tmp_path / "party1.npz", ir_0=ir, X_0=X1, g_0=g1)
    assert rec.verify(str(tmp_path), 2, lambda d, b: 2.0**-20) == (2, pytest.approx(0, abs=1e-3))
    np.savez(tmp_path / "party1.npz", ir_0=ir, X_0=X1, g_0=g1 + 1e-3 * 4 * 8)
    checked, worst = rec.verify(str(tmp_path), 2, lambda d, b: 2.0**-20)
    assert checked == 2 and worst == pytest.approx(1e-3 * 2**20)


def test_spool_loads_objects_of_any_size_in_turn():
    side = _seeded_side(1)
    big = side.encrypt(side.encode([0.5] * side.params.slots, 2.0**40))  # two primes
    small = seal.Ciphertext()
    side.evaluator.mod_switch_to_next(big, small)  # one prime: half the bytes
    a, b = side.to_bytes(big), side.to_bytes(small)
    assert len(b) < len(a)
    for data in (a, b, a, b):  # the spool file is cut to each object's own length
        assert side.to_bytes(side.from_bytes(data)) == data
    with pytest.raises(cp.CKKSParameterError, match="valid SEAL ciphertext"):
        side.from_bytes(a[: len(a) // 2])
