"""Public-key encryptions of zero at the data level: SEAL's distributions, the noise derived."""

import numpy as np
import pytest

from protocols import ckks_packed as cp
from protocols import ckks_zeros as cz


@pytest.fixture(scope="module")
def holder():
    return cp.KeyHolder(cp.PackedParams())


def test_ternary_values_are_uniform_on_minus_one_zero_one():
    u = cz.ternary(300_000)
    counts = np.array([np.sum(u == v) for v in (-1, 0, 1)])
    assert counts.sum() == len(u)  # nothing else
    # each 1/3: 100,000 +- 5 standard deviations (258)
    assert np.all(np.abs(counts - 100_000) < 1_300), counts


def test_errors_are_centred_binomial_of_21_plus_21_bits():
    e = cz.centred_binomial(300_000)
    assert np.max(np.abs(e)) <= 21
    assert abs(e.mean()) < 0.03  # sd of the mean: 3.24 / sqrt(300,000) = 0.006
    assert abs(e.var() - 10.5) < 0.15  # 21 / 2


def test_samples_come_fresh_from_the_keystream_each_time():
    assert not np.array_equal(cz.ternary(1000), cz.ternary(1000))
    assert not np.array_equal(cz.centred_binomial(1000), cz.centred_binomial(1000))


def test_an_encryption_of_zero_decrypts_to_the_derived_noise(holder):
    side = cp.load_public(holder.params, holder.public_bytes())
    assert side.zero_maker is not None  # the data-level path, not SEAL's fallback
    n = side.params.poly_modulus_degree
    for ct in side.fresh_zeros(3):
        assert ct.parms_id() == side.ctx.first_parms_id() and ct.scale == 1.0
        copy = holder.from_bytes(side.to_bytes(ct))  # decrypting consumes it
        slots = holder.decrypt_many([copy])[0]
        noise = side.codec.coefficients(slots, 1.0)[0]  # the noise polynomial's coefficients
        # -u e + e0 + e1 s: variance 2 N (2/3) 10.5 + 10.5 (module docstring), sd 339 at N = 8192
        want = np.sqrt(2 * n * (2 / 3) * 10.5 + 10.5)
        assert abs(noise.std() - want) < 0.05 * want, (noise.std(), want)
        assert np.log2(noise.std()) < cp.D_NOISE_BITS  # within the precision budget


def test_the_key_level_must_extend_the_data_level(holder, monkeypatch):
    side = cp.load_public(holder.params, holder.public_bytes())
    first = side.ctx.first_parms_id()
    monkeypatch.setattr(  # a key level whose primes do not start with the data level's
        cz.ZeroEncryptor, "_primes", lambda self, pid: [5, 7] if pid == first else [7, 5, 11]
    )
    with pytest.raises(ValueError, match="key level's first primes"):
        cz.ZeroEncryptor(side.codec, holder._pk)
