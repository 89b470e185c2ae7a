"""Protocol 0 secure aggregation: exact sums, packing, aborts naming the missing party."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.secagg import (
    SecAggAbort,
    SecAggError,
    SecAggParty,
    SecAggServer,
    modulus_bits,
    pack_bits,
    unpack_bits,
    unpack_sum,
)


def _setup(M: int, bits: int):
    srv = SecAggServer(M, bits=bits)
    parties = [SecAggParty(i, M, bits=bits) for i in range(M)]
    table = srv.relay({p.index: p.public_key for p in parties})
    for p in parties:
        p.agree(table, srv.session)
    return srv, parties


@pytest.mark.parametrize("M,b", [(2, 1), (3, 4), (5, 64), (10, 64)])
def test_sum_is_exact(M: int, b: int) -> None:
    bits = modulus_bits(b * M)
    srv, parties = _setup(M, bits)
    rng = np.random.default_rng(M)
    q = rng.integers(0, b + 1, size=(M, 37))
    q[:, 0] = b  # the largest possible sum, bM, must survive the modulus
    msgs = {p.index: p.mask(q[p.index], round_id=7, batch_id=2) for p in parties}
    total = srv.unmask(msgs, round_id=7, batch_id=2, count=37)
    assert np.array_equal(total, q.sum(axis=0))
    assert total[0] == b * M


def test_masked_values_hide_inputs_and_are_packed() -> None:
    M, b, n = 4, 64, 1600
    bits = modulus_bits(b * M)
    assert bits == 9  # 256 needs 9 bits: ceil(log2(bM)) = 8 would wrap the top value
    srv, parties = _setup(M, bits)
    q = np.zeros((M, n), dtype=np.int64)
    msg = parties[0].mask(q[0], round_id=0, batch_id=0)
    body = msg[len(msg) - (n * bits + 7) // 8 :]
    assert len(body) == n * bits // 8  # r bits per value, not 8 bytes
    y = unpack_bits(body, bits, n)
    # all-zero input: what travels is the mask, spread over the whole ring
    assert y.std() > (1 << bits) / 4
    assert len(np.unique(y)) > 300
    # a fresh round gives fresh masks
    y2 = unpack_bits(parties[0].mask(q[0], round_id=1, batch_id=0)[len(msg) - len(body) :], bits, n)
    assert np.mean(y == y2) < 0.05


def test_missing_party_aborts_naming_it() -> None:
    srv, parties = _setup(5, modulus_bits(5 * 8))
    q = np.ones(10, dtype=np.int64)
    msgs = {p.index: p.mask(q, round_id=1, batch_id=1) for p in parties if p.index != 3}
    with pytest.raises(SecAggAbort, match="party 3") as exc:
        srv.unmask(msgs, round_id=1, batch_id=1, count=10)
    assert exc.value.party == 3
    msgs[3] = None
    with pytest.raises(SecAggAbort, match="party 3"):
        srv.unmask(msgs, round_id=1, batch_id=1, count=10)


def test_replayed_round_aborts() -> None:
    srv, parties = _setup(3, modulus_bits(3 * 8))
    q = np.ones(10, dtype=np.int64)
    msgs = {p.index: p.mask(q, round_id=1, batch_id=1) for p in parties}
    msgs[2] = parties[2].mask(q, round_id=0, batch_id=1)  # stale message from another round
    with pytest.raises(SecAggAbort, match="party 2"):
        srv.unmask(msgs, round_id=1, batch_id=1, count=10)


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
    with pytest.raises(SecAggError, match="packed payload"):
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
        msgs = {
            p.index: p.mask(q[p.index], round_id=5, batch_id=batch, offset=batch * B)
            for p in parties
        }
        total = srv.unmask(msgs, round_id=5, batch_id=batch, count=B, offset=batch * B)
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
        srv.unmask(msgs, round_id=0, batch_id=1, count=10, offset=10)
