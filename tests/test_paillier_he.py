"""Paillier helpers: fixed point, homomorphic sums and masked plaintext-matrix products, bytes."""

import gmpy2
import numpy as np
import pytest

from protocols import paillier_he as ph


@pytest.fixture(scope="module")
def keys():
    return ph.generate_keypair(512)  # small keys keep the tests fast; 2048 is the default


def test_key_size_rules():
    with pytest.raises(ph.PaillierParameterError, match=">= 256"):
        ph.generate_keypair(128)
    with pytest.raises(ph.PaillierParameterError, match="multiple of 8"):
        ph.generate_keypair(260)


def test_public_key_bytes_carry_n_only(keys):
    pub, priv = keys
    data = ph.public_key_bytes(pub)
    assert len(data) == 64 and int.from_bytes(data, "big") == pub.n
    loaded = ph.load_public_key(data)
    assert loaded.n == pub.n and not hasattr(loaded, "p")


def test_encrypt_add_decrypt_signed_fixed_point(keys):
    pub, priv = keys
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 20)) * 5
    ca = ph.from_bytes(pub, ph.to_bytes(pub, ph.encrypt_vector(pub, a, 32)))
    assert len(ph.to_bytes(pub, ca)) == 20 * ph.ct_width(pub) == 20 * 128
    s = ph.add_plain(pub, ph.add_encrypted(pub, [ca, ph.encrypt_vector(pub, b, 32)]), c, 32)
    got = ph.decode(pub, ph.decrypt_vector(priv, s), 32)
    np.testing.assert_allclose(got, a + b + c, atol=1e-8)
    # two encryptions of the same value differ (fresh randomness)
    assert ph.encrypt_vector(pub, a[:1], 32) != ph.encrypt_vector(pub, a[:1], 32)


def test_masked_matvec_unmasks_to_xtd_and_hides_it(keys):
    pub, priv = keys
    rng = np.random.default_rng(1)
    X, d = rng.uniform(-1, 1, (30, 6)), rng.normal(size=30)
    cts, masks = ph.masked_matvec(pub, ph.encrypt_vector(pub, d, 32), X, 16, rng)
    opened = ph.decrypt_vector(priv, cts)
    # the key holder's residues are uniform-looking mod n, nowhere near the fixed-point truth
    truth = ph.encode(pub, X.T @ d, 48)
    assert all(abs(o - t) > 2**100 for o, t in zip(opened, truth, strict=True))
    got = ph.unmask(pub, opened, masks, 48)
    np.testing.assert_allclose(got, X.T @ d, atol=30 * 2.0**-16)


def test_operand_checks(keys):
    pub, _ = keys
    c = ph.encrypt_vector(pub, np.zeros(3), 32)
    with pytest.raises(ph.PaillierParameterError, match="equal length"):
        ph.add_encrypted(pub, [c, c[:2]])
    with pytest.raises(ph.PaillierParameterError, match="rows"):
        ph.masked_matvec(pub, c, np.zeros((4, 2)), 16, np.random.default_rng(0))
    with pytest.raises(ph.PaillierParameterError, match="multiple of 128"):
        ph.from_bytes(pub, b"\x00" * 100)
    with pytest.raises(ph.PaillierParameterError, match="finite"):
        ph.encode(pub, np.array([np.inf]), 32)


def test_multi_exp_is_the_product_of_powmods():
    pub, _ = ph.generate_keypair(256)
    n2 = gmpy2.mpz(pub.nsquare)
    rng = np.random.default_rng(3)
    bases = [gmpy2.mpz(int(x)) for x in rng.integers(2, 2**62, size=40)]
    for bits in (1, 7, 17):
        exps = [int(e) for e in rng.integers(0, 2**bits, size=40)]
        want = gmpy2.mpz(1)
        for g, e in zip(bases, exps, strict=True):
            want = want * gmpy2.powmod(g, e, n2) % n2
        assert ph.multi_exp(list(zip(bases, exps, strict=True)), n2, bits) == want
    assert ph.multi_exp([], n2, 5) == 1


def test_djn_fixed_base_encryption_decrypts_and_is_randomised():
    pub, priv = ph.generate_keypair(512)
    fast = ph.FixedBaseEncryptor(pub, ph.djn_base(pub))
    v = np.array([0.5, -1.25, 3.0, 0.0])
    cts = ph.encrypt_vector(pub, v, 32, fast)
    np.testing.assert_allclose(ph.decode(pub, ph.decrypt_vector(priv, cts), 32), v, atol=1e-9)
    again = ph.encrypt_vector(pub, v, 32, fast)
    assert all(a != b for a, b in zip(cts, again, strict=True))  # fresh randomness each time
    # sums and plaintext products work on DJN ciphertexts as on textbook ones
    s = ph.add_encrypted(pub, [cts, again])
    np.testing.assert_allclose(ph.decode(pub, ph.decrypt_vector(priv, s), 32), 2 * v, atol=1e-9)


def test_key_holder_crt_encryption_is_the_public_ciphertext_bit_for_bit(keys):
    """The key holder's CRT path (mod p^2 and q^2, joined) gives the number the public
    fixed-base path gives for the same exponent a, and it decrypts to m."""
    pub, priv = keys
    h_s = ph.djn_base(pub)
    public = ph.FixedBaseEncryptor(pub, h_s)
    owner = ph.OwnerFixedBaseEncryptor(pub, priv, h_s)
    n, n2 = int(pub.n), gmpy2.mpz(pub.nsquare)
    rng = np.random.default_rng(46)
    exps = [0, 1, 2**owner.exp_bits - 1]
    exps += [int.from_bytes(rng.bytes(owner.exp_bits // 8), "big") for _ in range(20)]
    msgs = [0, 1, n - 1] + [int.from_bytes(rng.bytes(60), "big") % n for _ in range(20)]
    for a, m in zip(exps, msgs, strict=True):
        c = owner._encrypt_with(m, a)
        assert c == public._encrypt_with(m, a)
        assert c == (1 + m * n) * gmpy2.powmod(h_s, a, n2) % n2  # the definition
        assert priv.raw_decrypt(int(c)) == m
    fresh = [owner.encrypt(m) for m in msgs[:4]]  # its own draws of a: decrypt, all distinct
    assert [priv.raw_decrypt(int(c)) for c in fresh] == msgs[:4]
    assert len(set(fresh)) == 4
    _, other_priv = ph.generate_keypair(256)
    with pytest.raises(ph.PaillierParameterError, match="p q must equal"):
        ph.OwnerFixedBaseEncryptor(pub, other_priv, h_s)


def test_key_holder_batched_randomness_is_each_values_power(keys, monkeypatch):
    """``randomness_many`` (table rows taken over a batch) gives h_s^a mod n^2 for each a,
    across batch boundaries and at any window; an exponent outside [0, 2^exp_bits) raises."""
    pub, priv = keys
    h_s = ph.djn_base(pub)
    n2 = gmpy2.mpz(pub.nsquare)
    monkeypatch.setattr(ph, "BATCH", 4)  # 11 exponents: batches of 4, 4 and 3
    rng = np.random.default_rng(7)
    for window in (5, 12):
        owner = ph.OwnerFixedBaseEncryptor(pub, priv, h_s, window=window)
        top = 2**owner.exp_bits - 1
        exps = [0, 1, top] + [
            int.from_bytes(rng.bytes(owner.exp_bits // 8), "big") for _ in range(8)
        ]
        assert owner.randomness_many(exps) == [gmpy2.powmod(h_s, a, n2) for a in exps]
        assert owner.randomness(exps[5]) == gmpy2.powmod(h_s, exps[5], n2)
        for bad in (top + 1, -1):
            with pytest.raises(ph.PaillierParameterError, match="exponent must lie"):
                owner.randomness_many([1, bad])
    cts = owner.encrypt_many([0, 5, 5])  # fresh exponents: distinct, decrypting to m
    assert [priv.raw_decrypt(int(c)) for c in cts] == [0, 5, 5] and len(set(cts)) == 3


def test_prime_square_powers_are_powmods_for_a_base_whose_order_divides_p_minus_1(keys):
    """``PrimeSquarePowers`` (factors below p, Fermat quotients summed as limbs) gives
    powmod(b, a, p^2) for b with b^(p-1) = 1 mod p^2, at windows that do and do not divide
    the exponent's bits and primes of an odd and an even count of 32-bit limbs; a base
    outside that subgroup raises, and the key holder's encryptor refuses a non-DJN h_s."""
    from protocols.prime_square_powers import PrimeSquarePowers

    rng = np.random.default_rng(3)
    for p_bits in (80, 128):  # 3 and 4 limbs
        p = gmpy2.next_prime(gmpy2.mpz(int.from_bytes(rng.bytes(p_bits // 8), "big")))
        p2 = p * p
        x = gmpy2.mpz(int.from_bytes(rng.bytes(2 * p_bits // 8), "big")) % p2
        base = gmpy2.powmod(x, p, p2)  # x^p: its (p-1)-th power is x^(p (p-1)) = 1
        bits = p_bits // 2 + 3
        draws = [int.from_bytes(rng.bytes(9), "big") % 2**bits for _ in range(5)]
        exps = [0, 1, 2**bits - 1, *draws]
        for window in (1, 4, 7):
            table = PrimeSquarePowers(base, p, bits, window)
            got = table.powers(ph.window_digits(exps, bits, window))
            assert got == [gmpy2.powmod(base, a, p2) for a in exps]
        with pytest.raises(ValueError, match="b\\^\\(p-1\\) = 1"):
            PrimeSquarePowers(x, p, bits, 4)  # x itself: order p (p-1)'s divisor, not p - 1's
    pub, priv = keys
    with pytest.raises(ph.PaillierParameterError, match="n-th power"):
        ph.OwnerFixedBaseEncryptor(pub, priv, gmpy2.mpz(2))
