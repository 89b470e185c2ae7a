"""The rns secure products (protocols/rns.py, protocols/shamir_rns.py): exact residue arithmetic,
dealing with seeded shares, what one party receives, and the real protocol against the
plaintext product and against MPyC's own secure matrix product, beyond the old 100k-row limit,
and streamed over row blocks of any size."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from protocols import rns, rns_blocks, shamir_rns
from protocols import shamir_launch as sl
from protocols import shamir_products as sp


def test_primes_are_distinct_primes_and_sized_from_the_magnitude():
    for p in rns.PRIMES:
        assert p < 2**rns.BITS and all(p % q for q in range(2, math.isqrt(p) + 1))
    assert len(set(rns.PRIMES)) == len(rns.PRIMES)
    for n in (10**4, 10**6, 10**7, 10**9):
        primes = shamir_rns.primes_for_job(n, 16, 1e4)
        assert math.prod(primes) > 2 * (n + 10**4) * 4**16
        assert math.prod(primes[:-1]) <= 2 * (n + 10**4) * 4**16 + 1  # the fewest that do
    with pytest.raises(ValueError, match="magnitude must be"):
        rns.primes_for(math.prod(rns.PRIMES))


def test_exact_product_crt_and_wire_format_against_python_ints():
    rng = np.random.default_rng(0)
    primes = rns.PRIMES[:3]
    n = 2 * rns.CHUNK_ROWS + 17  # several chunks, a ragged last one
    A = rng.integers(-(2**16), 2**16 + 1, (n, 3))
    B = rng.integers(-(2**16), 2**16 + 1, (n, 2))
    # worst case for exactness: residues at +-p/2 in the first chunk
    RA, RB = rns.centred_residues(A, primes), rns.centred_residues(B, primes)
    for i, p in enumerate(primes):
        RA[i, : rns.CHUNK_ROWS] = (p - 1) // 2
        RB[i, : rns.CHUNK_ROWS] = -((p - 1) // 2)
    got = rns.matmul_t_mod(RA, RB, primes)
    for i, p in enumerate(primes):
        want = (RA[i].astype(np.int64).astype(object).T @ RB[i].astype(np.int64).astype(object)) % p
        assert ((got[i].astype(np.int64) % p).astype(object) == want).all()
    C = A.astype(object).T @ B.astype(object)
    assert (
        rns.from_residues(
            rns.matmul_t_mod(*map(lambda M: rns.centred_residues(M, primes), (A, B)), primes),
            primes,
        )
        == C
    ).all()
    packed = rns.pack(RA)
    assert len(packed) == rns.packed_size(3, n * 3)
    assert (rns.unpack(packed, 3, (n, 3)) == RA).all()
    with pytest.raises(ValueError, match="must be"):
        rns.unpack(packed[:-4], 3, (n, 3))


def test_seeded_stream_is_reproducible_uniform_and_in_range():
    seed = os.urandom(32)
    a = rns.ResidueStream(seed).centred(rns.PRIMES[:2], (5000, 3))
    b = rns.ResidueStream(seed).centred(rns.PRIMES[:2], (5000, 3))
    assert (a == b).all()
    p = rns.PRIMES[0]
    u = rns.ResidueStream(os.urandom(32)).uniform(p, 200_000)
    assert u.max() < p and abs(u.mean() / p - 0.5) < 0.01
    assert not (
        rns.ResidueStream(os.urandom(32)).centred(rns.PRIMES[:1], (10,)) == a[0, :10, 0]
    ).all()


def _reconstruct(points: dict[int, np.ndarray], p: int) -> np.ndarray:
    xs = sorted(points)
    lam = rns.lagrange([x + 1 for x in xs], 0, p)
    return sum(c * (points[x].astype(np.int64) % p) for c, x in zip(lam, xs)) % p


@pytest.mark.parametrize("t,m", [(1, 3), (2, 5)])
def test_dealt_shares_reconstruct_from_any_t_plus_one(t, m):
    primes = rns.PRIMES[:3]
    M = np.random.default_rng(1).integers(-(2**16), 2**16 + 1, (100, 4)).astype(np.float64)
    seeded = {k: rns.ResidueStream(os.urandom(32)).centred(primes, M.shape) for k in range(t)}
    dealt = shamir_rns.deal(M, primes, seeded, list(range(t, m)))
    allshares = {**seeded, **dealt}
    for i, p in enumerate(primes):
        for subset in ([*range(t + 1)], [*range(m - t - 1, m)]):
            got = _reconstruct({k: allshares[k][i] for k in subset}, p)
            assert (got == M.astype(np.int64) % p).all()


def test_one_party_receives_uniform_shares_whatever_the_input():
    """Privacy sanity against one corrupt party (t = 1, m = 3): the explicit share a data party
    receives and the seeded share the server derives are uniform mod p, with the same
    distribution for two different inputs (all zeros vs all 2**16)."""
    p = rns.PRIMES[0]
    n = 40_000
    bins = 16
    hists = []
    for value in (0.0, 2.0**16):
        M = np.full((n, 1), value)
        seeded = {2: rns.ResidueStream(os.urandom(32)).centred([p], M.shape)}
        dealt = shamir_rns.deal(M, [p], seeded, [1])
        for share in (dealt[1][0, :, 0], seeded[2][0, :, 0]):
            u = share.astype(np.int64) % p
            h = np.bincount(u * bins // p, minlength=bins)
            chi2 = float(((h - n / bins) ** 2 / (n / bins)).sum())
            assert chi2 < 50.0, chi2  # 15 degrees of freedom: p-value ~ 1e-5
            hists.append(h)
    # two-sample chi-square between the inputs: the receiver cannot tell them apart
    a, b = hists[0], hists[2]
    assert float(((a - b) ** 2 / (a + b)).sum()) < 50.0


@pytest.mark.parametrize("t,m", [(1, 3), (1, 4), (2, 5)])
def test_scaled_dealing_is_the_field_dealing_times_a_public_factor(t, m):
    """deal_rows (the fast path: small-integer combinations, float32 where exact) gives every
    target D_j times the share the field-arithmetic dealing gives, from the same seeds, in the
    centred range; float64 where float32 would not be exact (t = 2, or a large M)."""
    primes = rns.PRIMES[:3]
    rng = np.random.default_rng(5)
    ks, targets = list(range(t)), list(range(t, m))
    for hi in (2**16, 2**19):  # 2**19: n_0 M + n_1 s leaves float32's exact range
        M = rng.integers(-hi, hi + 1, (3000, 3))
        M[0], M[1] = hi, -hi  # the extremes
        seeds = {k: os.urandom(32) for k in ks}
        streams = {k: rns.ResidueStream(sd) for k, sd in seeds.items()}
        got = rns_blocks.deal_rows(M, primes, streams, targets, keep=targets[-1])
        seeded = {
            k: rns_blocks.expand_rows(rns.ResidueStream(sd), primes, M.shape)
            for k, sd in seeds.items()
        }
        ref = shamir_rns.deal(
            M.astype(np.float64),
            primes,
            {k: v.astype(np.float64) for k, v in seeded.items()},
            targets,
        )
        coeffs = rns_blocks.dealing_coefficients(ks, targets)
        for j in targets:
            assert rns_blocks.share_scale(j, ks) == coeffs[j][0]
            for i, p in enumerate(primes):
                g = got[j][i].astype(np.int64)
                # the kept (dealer's own) share may be unreduced, the others are centred
                lim = rns_blocks.KEPT_MAX if j == targets[-1] else (p - 1) // 2
                assert np.abs(g).max() <= lim
                assert ((g - coeffs[j][0] * ref[j][i].astype(np.int64)) % p == 0).all()
    for k in ks:
        assert rns_blocks.share_scale(k, ks) == 1


def test_product_of_an_unreduced_share_is_exact():
    """matmul_t_mod with one operand up to KEPT_MAX (a dealer's own unreduced share): the chunk
    shrinks so the float64 sums stay exact; checked against Python integers."""
    primes = rns.PRIMES[:2]
    rng = np.random.default_rng(4)
    big = rns_blocks.KEPT_MAX
    A = rng.integers(-big, big + 1, (2, 9000, 2)).astype(np.float32)
    A[:, :, 0] = big  # every term at the bound
    B = rng.integers(-(2**20), 2**20 + 1, (2, 9000, 3)).astype(np.float32)
    B[:, :, 0] = 2**20
    got = rns.matmul_t_mod(A, B, primes, big, 2**20)
    for i, p in enumerate(primes):
        want = (A[i].astype(np.int64).astype(object).T @ B[i].astype(np.int64).astype(object)) % p
        assert ((got[i].astype(np.int64) - want.astype(np.int64)) % p == 0).all()
        assert np.abs(got[i]).max() <= p // 2


def test_stream_words_are_the_aes_ctr_keystream():
    """ResidueStream draws AES-256-CTR(seed, counter 0) of zeros, 21-bit words, call after call
    (the same keystream as the previous bytes-based implementation)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    seed = os.urandom(32)
    st = rns.ResidueStream(seed)
    got = np.concatenate([st._words(5), st._words(1000), st._words(3)])
    raw = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(4 * 1008))
    assert (got == np.frombuffer(raw, dtype="<u4") & np.uint32(2**21 - 1)).all()


def test_dealing_coefficients_interpolate_exactly():
    p = rns.PRIMES[0]
    rng = np.random.default_rng(2)
    for ks, targets in (([2], [0, 1]), ([3], [0, 1, 2]), ([3, 4], [0, 1, 2])):
        coeffs = rns_blocks.dealing_coefficients(ks, targets)
        for _ in range(20):
            poly = [int(c) for c in rng.integers(0, p, len(ks) + 1)]

            def f(x, poly=poly):
                return sum(c * x**e for e, c in enumerate(poly)) % p

            for j, (d, nums) in coeffs.items():
                rhs = nums[0] * f(0) + sum(c * f(k + 1) for c, k in zip(nums[1:], ks))
                assert (d * f(j + 1) - rhs) % p == 0
    assert rns_blocks.dealing_coefficients([2], [0, 1]) == {0: (3, (2, 1)), 1: (3, (1, 2))}


def test_float32_reduction_is_exact_over_its_whole_range():
    """combine in float32 reduces every integer |v| <= 1.5 p to its centred residue (checked on
    all of them for the largest and smallest prime)."""
    for p in (rns.PRIMES[0], rns.PRIMES[-1]):
        lim = int(1.5 * p)
        v = np.arange(-lim, lim + 1, dtype=np.float32)
        acc, tmp = np.empty_like(v), np.empty_like(v)
        r = rns_blocks.combine(v, [], [], p, acc, tmp).astype(np.int64)
        assert np.abs(r).max() <= (p - 1) // 2
        assert ((r - np.arange(-lim, lim + 1)) % p == 0).all()


def test_scaled_explicit_share_is_uniform_whatever_the_input():
    """The explicit (scaled) share a data party receives from deal_rows (t = 1, m = 3) is
    uniform mod p, with the same distribution for two different inputs."""
    p = rns.PRIMES[0]
    n, bins = 40_000, 16
    hists = []
    for value in (0, 2**16):
        M = np.full((n, 1), value)
        share = rns_blocks.deal_rows(M, [p], {2: rns.ResidueStream(os.urandom(32))}, [1])[1]
        h = np.bincount(share[0, :, 0].astype(np.int64) % p * bins // p, minlength=bins)
        assert float(((h - n / bins) ** 2 / (n / bins)).sum()) < 50.0
        hists.append(h)
    assert float(((hists[0] - hists[1]) ** 2 / (hists[0] + hists[1])).sum()) < 50.0


def test_rerandomised_opening_reveals_only_the_constant_term():
    """The receiver's 2t + 1 points of h = product + Σ Z_i: with a fresh uniform degree-2t Z,
    one party's point of h is uniform (independent of the product), and h(0) is exact."""
    primes = rns.PRIMES[:1]
    p = primes[0]
    const = np.zeros((1, 1, 20_000), dtype=np.int64)
    z = shamir_rns.random_sharing(const, primes, 2, [0, 1, 2])
    assert (_reconstruct({k: z[k][0] for k in z}, p) == 0).all()
    u = z[0][0, 0]
    h = np.bincount(u * 16 // p, minlength=16)
    assert float(((h - u.size / 16) ** 2 / (u.size / 16)).sum()) < 50.0


def _job(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    f, bound = 16, 1e3
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
    return X, M, pairs, noises, f, bound


@pytest.mark.networked
def test_rns_opens_the_plaintext_product_and_matches_mpyc():
    X, M, pairs, noises, f, bound = _job(300)
    want = {
        j: M[p.a].astype(object).T @ M[p.b].astype(object)
        + sp.encode_noise(noises[j], f, bound).astype(object)
        for j, p in enumerate(pairs)
    }
    kw = dict(n_parties=4, receiver=3, frac_bits=f, noise_bound=bound, timeout=60)
    got, st = sl.run_block_products(M, noises, pairs, impl="rns", **kw)
    ref, _ = sl.run_block_products(M, noises, pairs, impl="vectorized", **kw)  # MPyC's own
    for j in want:
        assert (got[j].astype(object) == want[j]).all()
        assert (got[j] == ref[j]).all()
    # the fixed-point precision: |decoded - real product| <= n * 2**-f (each entry off <= 2**-(f+1))
    dec = sl.decode_products(got, f)
    assert np.abs(dec[0] - (X[0].T @ X[1] + noises[0])).max() <= 300 * 2.0**-f
    # the receiver sent no input shares and got only seeds (t = 1): 32 bytes per dealer
    assert st.bytes_sent[3] and all(v < 1000 for v in st.bytes_sent[3].values())
    assert sum(nb for _, d, nb in st.sent[0] if d == 3) < 1000
    assert set(st.phases_bytes()) == {"input sharing", "opening"}
    assert set(st.phases_s[0]) == set(shamir_rns.PHASES)


@pytest.mark.networked
def test_rns_beyond_the_old_row_limit_at_the_edge_of_its_field():
    n, bound, f = 250_000, 1e4, 16  # > 100,000 rows, which the 56-bit field refused
    M = {0: sp.encode_fixed(np.ones((n, 1)), f), 1: sp.encode_fixed(-np.ones((n, 1)), f)}
    noise = {0: np.array([[-bound]])}  # every term and the noise push one way
    got, _ = sl.run_block_products(
        M,
        noise,
        [sp.Pair(0, 1, 0)],
        n_parties=3,
        receiver=2,
        frac_bits=f,
        noise_bound=bound,
        impl="rns",
        timeout=120,
    )
    assert int(got[0][0, 0]) == -(n + int(bound)) * 4**f


@pytest.mark.networked
def test_streamed_product_equals_plaintext_and_unchunked_for_any_block_size():
    n = 300
    X, M, pairs, noises, f, bound = _job(n, seed=3)
    want = {
        j: M[p.a].astype(object).T @ M[p.b].astype(object)
        + sp.encode_noise(noises[j], f, bound).astype(object)
        for j, p in enumerate(pairs)
    }
    kw = dict(n_parties=4, receiver=3, frac_bits=f, noise_bound=bound, impl="rns", timeout=60)
    # one block (unchunked), blocks that divide n, blocks that do not
    runs = {b: sl.run_block_products(M, noises, pairs, block_rows=b, **kw) for b in (n, 100, 70)}
    for rows, (got, st) in runs.items():
        for j in want:
            assert (got[j].astype(object) == want[j]).all(), (rows, j)
            assert (got[j] == runs[n][0][j]).all()
        # parties 0, 1 and the receiver 3 are the nodes (t = 1): dealer 0 sends its seed to 3, one
        # explicit block of shares to 1 per row block, and its re-randomisation to 1 and 3
        to_1 = [nb for ph, dst, nb in st.sent[0] if ph == "input sharing" and dst == 1]
        assert len(to_1) == -(-n // rows) + 1, rows
        # the same shares cross the channel, only cut into blocks
        assert st.phases_bytes() == runs[n][1].phases_bytes(), rows


@pytest.mark.networked
@pytest.mark.parametrize("block_rows", [20_000, 9_000])
def test_blocks_longer_than_a_dealing_chunk_open_the_exact_product(block_rows):
    """Blocks of more than DEAL_ROWS rows (the receiver expands its seeded shares chunk by
    chunk, the dealers keep their own share unreduced): exact against the plaintext."""
    rng = np.random.default_rng(9)
    n, f, bound = 20_000, 16, 1e3
    M = {k: sp.encode_fixed(rng.uniform(-1, 1, (n, 2 + k)), f) for k in (0, 1)}
    noise = {0: rng.laplace(0, 5.0, (2, 3))}
    got, _ = sl.run_block_products(
        M,
        noise,
        [sp.Pair(0, 1, 0)],
        n_parties=3,
        receiver=2,
        frac_bits=f,
        noise_bound=bound,
        impl="rns",
        timeout=60,
        block_rows=block_rows,
    )
    want = M[0].astype(object).T @ M[1].astype(object) + sp.encode_noise(noise[0], f, bound)
    assert (got[0].astype(object) == want).all()
