"""The unseeded noise generator (AES-CTR CSPRNG) and the hardened Gaussian/Laplace samplers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from securevfl.csprng import CryptoGenerator
from securevfl.privacy import samplers
from securevfl.rng import make_noise_rng, noise_generator_name

N = 100_000


def test_unseeded_noise_comes_from_the_csprng_and_seeded_from_pcg64() -> None:
    g = make_noise_rng(None, purpose="noise/x", party=1)
    assert isinstance(g, CryptoGenerator) and g.cryptographic
    s = make_noise_rng(7, purpose="noise/x", party=1)
    assert type(s) is np.random.Generator and type(s.bit_generator).__name__ == "PCG64"
    # seeded: exactly today's stream; unseeded: never twice the same
    again = make_noise_rng(7, purpose="noise/x", party=1)
    assert np.array_equal(s.normal(size=8), again.normal(size=8))
    other = make_noise_rng(None, purpose="noise/x", party=1)
    assert not np.array_equal(g.normal(size=8), other.normal(size=8))
    assert not np.array_equal(g.bit_generator.random_raw(4), other.bit_generator.random_raw(4))
    assert noise_generator_name(None) == "aes-ctr-csprng" and noise_generator_name(3) == "pcg64"


def test_gaussian_and_laplace_have_the_assumed_distributions() -> None:
    g = CryptoGenerator()
    x = g.normal(1.5, 2.0, size=N)
    assert abs(x.mean() - 1.5) < 5 * 2.0 / np.sqrt(N) and abs(x.std() / 2.0 - 1) < 0.01
    assert stats.kstest((x - 1.5) / 2.0, "norm").pvalue > 1e-4
    y = g.laplace(0.0, 3.0, size=N)
    assert abs(y.mean()) < 5 * 3.0 * np.sqrt(2 / N) and abs(y.var() / (2 * 9.0) - 1) < 0.03
    assert stats.kstest(y / 3.0, "laplace").pvalue > 1e-4
    # and not the other way round: the tests can tell the two apart
    assert stats.kstest(y / 3.0, "norm").pvalue < 1e-6
    z = g.standard_normal((300, 100))
    assert z.shape == (300, 100) and stats.kstest(z.ravel(), "norm").pvalue > 1e-4


def test_uniform_words_and_bytes_look_uniform() -> None:
    g = CryptoGenerator()
    u = g.uniform(-2.0, 2.0, size=N)
    assert u.min() >= -2.0 and u.max() < 2.0 and stats.kstest(u, "uniform", (-2, 4)).pvalue > 1e-4
    w = g.bit_generator.random_raw(N)
    assert w.dtype == np.uint64
    bits = np.unpackbits(w.view(np.uint8))
    assert abs(bits.mean() - 0.5) < 5 * 0.5 / np.sqrt(bits.size)
    assert len(g.bytes(33)) == 33
    # numpy's own samplers run on the same bits (one word at a time through randomgen)
    assert (
        0 <= g.integers(0, 10) < 10
        and g.gamma(2.0) > 0
        and sorted(g.permutation(5)) == [0, 1, 2, 3, 4]
    )
    assert isinstance(g.normal(), float) and isinstance(g.laplace(), float)


def test_samplers_validate_and_shape() -> None:
    g = CryptoGenerator()
    assert samplers.secure_gaussian(g._uniform, sigma=0.0, size=3).tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="sigma"):
        samplers.secure_gaussian(g._uniform, sigma=-1.0)
    with pytest.raises(ValueError):
        g.laplace(0.0, -1.0, size=2)
    assert samplers.uniform_from_words(np.array([2**64 - 1], dtype=np.uint64))[0] < 1.0
    assert samplers.accounting_adjustment(epsilon=1.0, delta=1e-5) == (1.0, 1e-5)


def test_unseeded_run_records_the_generator() -> None:
    from securevfl.context import RunSpec
    from securevfl.experiment import run_experiment

    rec = run_experiment(
        RunSpec(method="hdp-vfl", dataset="breast", parties=2, epochs=1, epsilon=1.0, delta=1e-5)
    )
    assert rec["noise_seeded"] is False and rec["noise_generator"] == "aes-ctr-csprng"
    spec = dict(method="hdp-vfl", dataset="breast", parties=2, epochs=1, epsilon=1.0, delta=1e-5)
    # --seed alone never seeds DP noise (issue 31); the reproduction mode does, and prints no ε
    seeded = run_experiment(RunSpec(**spec, seed=1))
    assert seeded["noise_seeded"] is False and seeded["noise_generator"] == "aes-ctr-csprng"
    repro = run_experiment(RunSpec(**spec, seed=1, reproducible_noise=True))
    assert repro["noise_seeded"] is True and repro["noise_generator"] == "pcg64"
    assert repro["privacy"]["epsilon"] is None


def test_pooled_draws_are_never_reused() -> None:
    g = CryptoGenerator()
    draws = np.concatenate([g.normal(size=n) for n in (1, 255, 256, 300, 9000, 3)])
    draws = np.concatenate([draws, g.laplace(0.0, 1.0, size=500), g.standard_normal(40)])
    assert len(np.unique(draws)) == draws.size  # float collisions are practically impossible
    first = g.normal(size=10)
    first[:] = 0.0  # a caller writing into its noise must not touch the pool
    assert np.all(g.normal(size=10) != 0.0)
