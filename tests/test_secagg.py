"""Secure aggregation: exact sums, packing, authentication, dropout recovery, too many dropouts.

The hostile-peer scenarios (truncation, extension, bit flips, replays, forged senders, forged
shares and reveals, ...) are one table in tests/test_hostile_peers.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import shamir
from protocols.bitpack import PackError
from protocols.secagg import (
    HEADER_BYTES,
    SecAggAbort,
    SecAggError,
    SecAggParty,
    SecAggServer,
    aggregate_round,
    modulus_bits,
    pack_bits,
    unpack_bits,
    unpack_sum,
)


def _setup(M: int, bits: int, threshold: int | None = None):
    srv = SecAggServer(M, bits=bits, threshold=threshold)
    parties = [SecAggParty(i, M, bits=bits, threshold=threshold) for i in range(M)]
    table = srv.relay({p.index: p.public_key for p in parties})
    for p in parties:
        p.agree(table, srv.session, srv.public_key)
    return srv, parties


def _round(srv, parties, q, *, round_id=7, batch_id=2, offset=None, drop=()):
    return aggregate_round(
        srv,
        dict(enumerate(parties)),
        dict(enumerate(q)),
        round_id=round_id,
        batch_id=batch_id,
        offset=offset,
        drop=drop,
    )


@pytest.mark.parametrize("M,b", [(2, 1), (3, 4), (5, 64), (10, 64)])
def test_sum_is_exact(M: int, b: int) -> None:
    bits = modulus_bits(b * M)
    srv, parties = _setup(M, bits)
    rng = np.random.default_rng(M)
    q = rng.integers(0, b + 1, size=(M, 37))
    q[:, 0] = b  # the largest possible sum, bM, must survive the modulus
    total = _round(srv, parties, q)
    assert np.array_equal(total, q.sum(axis=0))
    assert total[0] == b * M


def test_masked_values_hide_inputs_and_are_packed() -> None:
    M, b, n = 4, 64, 1600
    bits = modulus_bits(b * M)
    assert bits == 9  # 256 needs 9 bits: ceil(log2(bM)) = 8 would wrap the top value
    srv, parties = _setup(M, bits)
    q = np.zeros((M, n), dtype=np.int64)
    msg = parties[0].mask(q[0], round_id=0, batch_id=0)
    body = msg[HEADER_BYTES : HEADER_BYTES + (n * bits + 7) // 8]
    # r bits per value, sealed shares, commitments (seed, M shares, M - 1 reveals), tag
    assert len(msg) == HEADER_BYTES + n * bits // 8 + (M - 1) * 60 + 2 * M * 32 + 32
    y = unpack_bits(body, bits, n)
    # all-zero input: what travels is the mask, spread over the whole ring
    assert y.std() > (1 << bits) / 4
    assert len(np.unique(y)) > 300
    # a fresh round gives fresh masks
    msg2 = parties[0].mask(q[0], round_id=1, batch_id=0)
    y2 = unpack_bits(msg2[HEADER_BYTES : HEADER_BYTES + len(body)], bits, n)
    assert np.mean(y == y2) < 0.05


def test_key_agreement_needs_every_key() -> None:
    srv = SecAggServer(3, bits=5)
    parties = [SecAggParty(i, 3, bits=5) for i in range(3)]
    with pytest.raises(SecAggAbort, match="party 1"):
        srv.relay({0: parties[0].public_key, 2: parties[2].public_key})
    with pytest.raises(SecAggError, match="key agreement"):
        parties[0].mask(np.ones(2, dtype=np.int64), round_id=0, batch_id=0)


def test_out_of_range_values_rejected() -> None:
    srv, parties = _setup(2, 4)
    with pytest.raises(SecAggError, match="integers in"):
        parties[0].mask(np.array([16]), round_id=0, batch_id=0)
    with pytest.raises(SecAggError, match="integers in"):
        parties[0].mask(np.array([0.5]), round_id=0, batch_id=0)
    with pytest.raises(SecAggError, match="integers in"):  # negative: caught by the same check
        parties[0].mask(np.array([3, -1]), round_id=0, batch_id=0)
    for p in parties:
        p.prepare_round(0, 4)
    with pytest.raises(SecAggError, match="integers in"):  # also on the prepared-round path
        parties[0].mask(np.array([-2, 0]), round_id=0, batch_id=0, offset=0)


def test_modulus_bits_rules() -> None:
    assert modulus_bits(1) == 1 and modulus_bits(255) == 8 and modulus_bits(256) == 9
    with pytest.raises(ValueError, match="bound"):
        modulus_bits(0)
    with pytest.raises(ValueError, match="bound"):
        modulus_bits(1 << 40)


@settings(max_examples=40, deadline=None)
@given(bits=st.integers(1, 32), n=st.integers(0, 50), seed=st.integers(0, 2**32 - 1))
def test_pack_roundtrip(bits: int, n: int, seed: int) -> None:
    v = np.random.default_rng(seed).integers(0, 1 << bits, size=n, dtype=np.uint64)
    data = pack_bits(v, bits)
    assert len(data) == (n * bits + 7) // 8
    assert np.array_equal(unpack_bits(data, bits, n), v)


@settings(max_examples=30, deadline=None)
@given(
    bits=st.integers(1, 32),
    n=st.integers(0, 40),
    m=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_unpack_sum_is_the_sum_of_unpacks(bits: int, n: int, m: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vs = [rng.integers(0, 1 << bits, size=n, dtype=np.uint64) for _ in range(m)]
    got = unpack_sum([pack_bits(v, bits) for v in vs], bits, n)
    assert got.dtype == np.uint64 and np.array_equal(got, sum(vs, np.zeros(n, dtype=np.uint64)))
    with pytest.raises(PackError, match="packed payload"):
        unpack_sum([pack_bits(vs[0], bits) + b"x"], bits, n)


def test_prepared_round_segments_sum_exactly_and_are_never_reused() -> None:
    M, b, B = 4, 16, 25
    bits = modulus_bits(b * M)
    srv, parties = _setup(M, bits)
    for p in parties:
        p.prepare_round(5, 4 * B)
    rng = np.random.default_rng(1)
    for batch in range(4):
        q = rng.integers(0, b + 1, size=(M, B))
        total = _round(srv, parties, q, round_id=5, batch_id=batch, offset=batch * B)
        assert np.array_equal(total, q.sum(axis=0))
    with pytest.raises(SecAggError, match="overlaps"):
        parties[0].mask(np.zeros(B, dtype=np.int64), round_id=5, batch_id=9, offset=10)
    with pytest.raises(SecAggError, match="prepare round 6"):
        parties[0].mask(np.zeros(B, dtype=np.int64), round_id=6, batch_id=0, offset=0)


def test_offset_mismatch_aborts_naming_the_party() -> None:
    srv, parties = _setup(3, modulus_bits(3 * 8))
    for p in parties:
        p.prepare_round(0, 40)
    q = np.ones(10, dtype=np.int64)
    msgs = {
        p.index: p.mask(q, round_id=0, batch_id=1, offset=10 if p.index != 1 else 20)
        for p in parties
    }
    with pytest.raises(SecAggAbort, match="party 1"):
        srv.collect(msgs, round_id=0, batch_id=1, count=10, offset=10)


# --- authentication: every malformed message aborts naming the party, never a wrong sum ---


def _masked(M=5, n=10, round_id=1, batch_id=1):
    srv, parties = _setup(M, modulus_bits(M * 8))
    q = np.arange(M * n).reshape(M, n) % 9
    msgs = {p.index: p.mask(q[p.index], round_id=round_id, batch_id=batch_id) for p in parties}
    return srv, parties, q, msgs


def _aborts(srv, msgs, party, match, **kw):
    kw = {"round_id": 1, "batch_id": 1, "count": 10, **kw}
    with pytest.raises(SecAggAbort, match=match) as exc:
        srv.collect(msgs, **kw)
    assert exc.value.party == party and f"party {party}" in str(exc.value)
    assert "\n" not in str(exc.value)  # one line


def test_mismatched_threshold_fails_authentication() -> None:
    M, bits = 5, 6
    srv = SecAggServer(M, bits=bits, threshold=3)
    parties = [SecAggParty(i, M, bits=bits, threshold=3 if i else 4) for i in range(M)]
    table = srv.relay({p.index: p.public_key for p in parties})
    for p in parties:
        p.agree(table, srv.session, srv.public_key)
    msgs = {p.index: p.mask(np.ones(10, dtype=int), round_id=1, batch_id=1) for p in parties}
    _aborts(srv, msgs, 0, "fails authentication")


# --- dropout recovery (Bonawitz et al. 2017) ---


@pytest.mark.parametrize(
    "M,drop,prepared",
    [(5, [3], False), (5, [0], True), (16, [1, 8, 15], False), (16, [2, 5, 6], True)],
)
def test_dropouts_after_key_agreement_give_the_survivors_sum(M, drop, prepared) -> None:
    bits = modulus_bits(64 * M)
    srv, parties = _setup(M, bits)
    q = np.random.default_rng(M).integers(0, 65, size=(M, 200))
    offset = None
    if prepared:
        for p in parties:
            p.prepare_round(3, 400)
        offset = 200
        _round(srv, parties, q, round_id=3, batch_id=0, offset=0)  # a full batch first
    total = _round(srv, parties, q, round_id=3, batch_id=1, offset=offset, drop=drop)
    alive = [k for k in range(M) if k not in drop]
    assert srv.survivors == alive
    assert np.array_equal(total, q[alive].sum(axis=0))


def test_more_dropouts_than_tolerated_abort_naming_them() -> None:
    M = 16  # threshold 9: 7 may drop
    srv, parties = _setup(M, modulus_bits(64 * M))
    q = np.ones((M, 20), dtype=np.int64)
    drop = [0, 2, 3, 5, 7, 11, 13, 14]
    with pytest.raises(SecAggAbort, match=r"parties \[0, 2, 3, 5, 7, 11, 13, 14\] sent no") as exc:
        _round(srv, parties, q, drop=drop)
    assert exc.value.parties == tuple(drop)
    assert np.array_equal(_round(srv, parties, q, batch_id=3, drop=drop[:7]), q[:9].sum(0))


def test_masking_twice_under_the_same_ids_is_refused() -> None:
    srv, parties, q, msgs = _masked()
    with pytest.raises(SecAggError, match="already masked"):
        parties[0].mask(q[0], round_id=1, batch_id=1)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 12), data=st.data())
def test_shamir_any_threshold_subset_reconstructs(n: int, data) -> None:
    t = data.draw(st.integers(1, n))
    secret = shamir.random_secret()
    sh = shamir.share(secret, n_parties=n, threshold=t)
    subset = data.draw(st.lists(st.integers(0, n - 1), min_size=t, max_size=n, unique=True))
    assert shamir.reconstruct({i: sh[i] for i in subset}) == secret
    if t > 1:  # t - 1 shares: interpolating them gives an unrelated value
        assert shamir.reconstruct({i: sh[i] for i in subset[: t - 1]}) != secret
