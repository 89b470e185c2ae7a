"""Shamir block products (protocols/shamir_products.py): sharing, exact limb products, the real
MPyC protocol (vectorised and naive agree, n = 100,000 at the edge), and failures that raise."""

from __future__ import annotations

import os

import numpy as np
import pytest

from protocols import shamir_launch as sl
from protocols import shamir_mpyc_ops as ops
from protocols import shamir_products as sp
from protocols import shamir_shares as ss

P = sp.FIELD_PRIME


def _reconstruct(shares: np.ndarray, xs: list[int]) -> np.ndarray:
    """Lagrange interpolation at 0 from the shares of parties at points xs (python ints)."""
    out = []
    for col in range(shares.shape[1]):
        acc = 0
        for i, xi in enumerate(xs):
            num, den = 1, 1
            for xj in xs:
                if xj != xi:
                    num, den = num * (-xj) % P, den * (xi - xj) % P
            acc += int(shares[i, col]) * num * pow(den, -1, P)
        v = acc % P
        out.append(v - P if v > P // 2 else v)
    return np.asarray(out)


def test_shamir_split_reconstructs_from_any_t_plus_one():
    s = np.array([0, 1, -1, 2**16, -(2**40), 12345])
    sh = ss.shamir_split(s, P, 1, 3)
    assert sh.shape == (3, 6) and sh.dtype == np.int64
    assert (sh >= 0).all() and (sh < P).all()
    for pts in ([1, 2], [1, 3], [2, 3]):
        assert (_reconstruct(sh[[p - 1 for p in pts]], pts) == s).all()
    sh2 = ss.shamir_split(s, P, 2, 5)
    assert (_reconstruct(sh2[[0, 2, 4]], [1, 3, 5]) == s).all()


def test_single_share_is_uniform_not_the_secret():
    s = np.zeros(20000, dtype=np.int64)
    sh = ss.shamir_split(s, P, 1, 3)
    # share of party 1 is s + r: uniform on [0, P): mean ~ P/2, never mostly zero
    assert abs(sh[0].mean() / P - 0.5) < 0.02
    assert (sh[0] == 0).sum() < 3


def test_modmatmul_exact_against_python_ints():
    rng = np.random.default_rng(1)
    A = ss.uniform_mod(P, 300 * 3).reshape(300, 3)
    B = ss.uniform_mod(P, 300 * 2).reshape(300, 2)
    got = ops.modmatmul_t(A, B, P)
    want = (A.astype(object).T @ B.astype(object)) % P
    assert (got == want).all()
    with pytest.raises(ValueError, match="rows must be"):
        ops.modmatmul_t(np.zeros((2**17, 1), dtype=np.int64), np.zeros((2**17, 1), np.int64), P)
    assert rng is not None


def test_field_sizing_and_input_checks():
    f = sp.choose_frac_bits(sp.MAX_ROWS, 1e4)
    assert f == 16 and 2 * (sp.MAX_ROWS + 1e4) * 4**f < P
    assert sp.choose_frac_bits(sp.MAX_ROWS, 1e9) < 16
    with pytest.raises(ValueError, match="in \\[-1, 1\\]"):
        sp.encode_fixed(np.array([1.5]), 16)
    with pytest.raises(sp.ShamirProtocolError, match="exceeds the public bound"):
        sp.encode_noise(np.array([2e4]), 16, 1e4)
    with pytest.raises(ValueError, match="rows must be <= 10"):
        sp.check_inputs({0: np.zeros((11, 1), np.int64)}, 16, 10)
    with pytest.raises(ValueError, match="n_parties must be >= 3"):
        sl.run_block_products(
            {0: np.zeros((2, 1), np.int64)},
            {},
            [],
            n_parties=2,
            receiver=1,
            frac_bits=16,
            noise_bound=1.0,
        )


@pytest.mark.networked
@pytest.mark.slow
def test_vectorized_and_naive_open_the_exact_noisy_products():
    rng = np.random.default_rng(0)
    n, f, bound = 200, 16, 1e3
    X = {
        0: rng.uniform(-1, 1, (n, 3)),
        1: rng.uniform(-1, 1, (n, 2)),
        2: rng.uniform(-1, 1, (n, 2)),
    }
    M = {k: sp.encode_fixed(v, f) for k, v in X.items()}
    pairs = [sp.Pair(0, 1, 0), sp.Pair(0, 2, 0), sp.Pair(1, 2, 1)]
    noises = {
        j: rng.laplace(0, 5.0, (M[p.a].shape[1], M[p.b].shape[1])) for j, p in enumerate(pairs)
    }
    want = {
        j: M[p.a].astype(object).T @ M[p.b].astype(object)
        + sp.encode_noise(noises[j], f, bound).astype(object)
        for j, p in enumerate(pairs)
    }
    for impl in ("vectorized", "naive"):
        got, stats = sl.run_block_products(
            M,
            noises,
            pairs,
            n_parties=4,
            receiver=3,
            frac_bits=f,
            noise_bound=bound,
            impl=impl,
            timeout=60,
        )
        for j in want:
            assert (got[j].astype(object) == want[j]).all(), impl
        assert set(stats.bytes_sent) == {0, 1, 2, 3} and stats.bytes_sent[0][1] > 0
        assert all(v > 0 for v in stats.peak_rss_mb.values())
    dec = sl.decode_products(got, f)
    assert np.allclose(dec[0], X[0].T @ X[1] + noises[0], atol=n * 2.0**-15)


@pytest.mark.networked
@pytest.mark.slow
def test_edge_of_range_n_100k_all_ones_does_not_overflow():
    n, bound = sp.MAX_ROWS, 1e4
    f = sp.choose_frac_bits(n, bound)
    M = {0: sp.encode_fixed(np.ones((n, 1)), f), 1: sp.encode_fixed(-np.ones((n, 1)), f)}
    noise = {0: np.array([[-bound]])}  # the worst case: every term and the noise push one way
    got, _ = sl.run_block_products(
        M,
        noise,
        [sp.Pair(0, 1, 0)],
        n_parties=3,
        receiver=2,
        frac_bits=f,
        noise_bound=bound,
        timeout=60,
    )
    assert int(got[0][0, 0]) == -(n + int(bound)) * 4**f
    assert sl.decode_products(got, f)[0][0, 0] == -(n + bound)


def _job(timeout: float) -> dict:
    return {
        "shapes": {"0": [4, 1], "1": [4, 1]},
        "pairs": [[0, 1, 0]],
        "receiver": 2,
        "impl": "vectorized",
        "timeout": timeout,
    }


def _own(i: int) -> dict:
    return {
        "matrix": np.ones((4, 1), np.int64) if i < 2 else None,
        "noises": {0: np.zeros((1, 1), np.int64)} if i == 0 else {},
    }


@pytest.mark.networked
def test_crashed_party_raises_instead_of_hanging():
    addrs = [f"127.0.0.1:{p}" for p in sl.free_ports(3)]
    key = os.urandom(32)
    procs = [sl.spawn_party(_job(30), _own(i), i, addrs, key) for i in range(3)]
    procs[1].proc.kill()  # party 1 dies at start
    # "failed", not ShamirTimeoutError's "did not finish within 30 s": the crash is noticed
    with pytest.raises(sp.ShamirProtocolError, match="MPyC party 1 failed"):
        sl.wait_all(procs, 30)
    assert all(p.proc.poll() is not None for p in procs)  # the others were stopped


@pytest.mark.networked
@pytest.mark.slow
def test_missing_party_times_out():
    addrs = [f"127.0.0.1:{p}" for p in sl.free_ports(3)]
    key = os.urandom(32)
    procs = [sl.spawn_party(_job(2), _own(i), i, addrs, key) for i in range(2)]  # no party 2
    with pytest.raises(sp.ShamirProtocolError):  # the parties' own 2 s timeout fires
        sl.wait_all(procs, 25)
    with pytest.raises(sp.ShamirTimeoutError):
        procs = [sl.spawn_party(_job(60), _own(0), 0, addrs, key)]
        sl.wait_all(procs, 1.5)


@pytest.mark.networked
def test_a_party_with_another_key_or_job_is_refused():
    addrs = [f"127.0.0.1:{p}" for p in sl.free_ports(3)]
    key = os.urandom(32)
    procs = [sl.spawn_party(_job(30), _own(i), i, addrs, key) for i in range(2)]
    procs.append(sl.spawn_party(_job(30), _own(2), 2, addrs, os.urandom(32)))
    with pytest.raises(sp.ShamirProtocolError, match="failed the run check"):
        sl.wait_all(procs, 40)


@pytest.mark.networked
def test_demo_prints_shares_opened_value_and_bytes(capsys):
    from bench.demos import shamir

    assert shamir.main(["--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "MPyC party 2 (server) holds shares" in out
    assert "opened to the server ONLY" in out and "party 0 -> 1:" in out
