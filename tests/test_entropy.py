"""The lossless entropy stage: exact round trips, sizes near the empirical entropy, never longer
than the packed codes, and a trainer whose metered bytes are the coded messages' sizes."""

import numpy as np
import pytest

import securevfl.training.cascade_trainer as cascade
from protocols.compress import CODED, UNIFORM, CompressError, decode, encode, packed_bytes
from protocols.entropy import EntropyError, decode_codes, encode_codes
from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.runtime import serialization


def _entropy_bytes(codes, bits):
    p = np.bincount(codes, minlength=1 << bits) / codes.size
    p = p[p > 0]
    return -(p * np.log2(p)).sum() * codes.size / 8


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 300])
def test_codes_round_trip_exactly(bits, n):
    rng = np.random.default_rng(bits * 1000 + n)
    L = 1 << bits
    for codes in (
        rng.integers(0, L, size=n),  # uniform: the worst case
        np.full(n, L - 1),  # one symbol
        np.clip(np.rint(rng.normal(L / 2, L / 8 + 0.3, size=n)), 0, L - 1).astype(int),
    ):
        back = decode_codes(encode_codes(codes, bits), bits, n)
        assert back.dtype == np.int64 and np.array_equal(back, codes)


@pytest.mark.parametrize(
    "bits, probs", [(2, [0.01, 0.49, 0.49, 0.01]), (2, [0.0, 0.85, 0.15, 0.0]), (4, None)]
)
def test_coded_size_is_near_the_empirical_entropy(bits, probs):
    rng = np.random.default_rng(7)
    n = 1024
    if probs is None:  # a clipped Gaussian embedding: bell-shaped over 16 levels
        codes = np.clip(np.rint(rng.normal(7.5, 2.7, size=n)), 0, 15).astype(int)
    else:
        codes = rng.choice(1 << bits, size=n, p=probs)
    size, h = len(encode_codes(codes, bits)), _entropy_bytes(codes, bits)
    # the adaptive model's learning costs a few bytes over the empirical entropy, no more
    assert h <= size <= 1.04 * h + 16
    assert size < 0.95 * packed_bytes(n, bits)


def test_bad_alphabets_and_malformed_payloads_are_refused():
    with pytest.raises(EntropyError, match="bits must be an integer in 1..8"):
        encode_codes(np.zeros(3, dtype=int), 9)
    with pytest.raises(EntropyError, match="codes must lie in"):
        encode_codes(np.array([0, 4]), 2)
    data = encode_codes(np.arange(16) % 4, 2)
    with pytest.raises(EntropyError, match="past its 16 codes"):
        decode_codes(data + b"\x01" * 8, 2, 16)


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 12, 32])
def test_coded_messages_decode_to_the_packed_values_and_are_never_longer(bits):
    rng = np.random.default_rng(bits)
    cases = [(rng.normal(size=(128, 8)), True), (rng.random((3, 5)), False)]
    cases.append((rng.standard_t(2, size=(4, 128)), False))  # heavy tails on min/max: skewed
    for x, clip in cases:
        plain = encode(x, bits=bits, clip=clip and bits <= 8)
        coded = encode(x, bits=bits, clip=clip and bits <= 8, entropy=True)
        assert np.array_equal(decode(coded), decode(plain))  # lossless after the quantiser
        assert len(coded) <= len(plain)
        if bits in (2, 4) and x.shape == (4, 128):  # most codes on a few middle levels
            assert coded[0] == CODED and len(coded) < 0.8 * len(plain)
    # uniform codes at 8 bits do not shrink: the sender keeps the packed body
    u = np.arange(256.0)
    assert encode(u, bits=8, entropy=True)[0] == UNIFORM
    with pytest.raises(CompressError):
        decode(encode(rng.normal(size=512), bits=2, entropy=True) + b"\x05" * 8)


def _spec(**options):
    return RunSpec(
        method="czofo-vfl", dataset="breast", parties=2, model="mlp", epochs=1, batch_size=64,
        seed=3, aggregation="concat",
        options={"schedule": "sync", "deltas": "sample", "q": 4, "uplink_bits": 4,
                 "downlink_bits": 2, "clip_range": "up", "curve_points": 0, **options},
    )  # fmt: skip


def test_metered_bytes_are_the_coded_sizes_and_training_is_unchanged(monkeypatch):
    sent: list[bytes] = []

    def recording(x, **kw):
        out = encode(x, **kw)
        sent.append(out)
        return out

    monkeypatch.setattr(cascade, "encode", recording)
    coded = run_experiment(_spec(entropy_coding="both"))
    assert any(m[0] == CODED for m in sent)
    wire = sum(len(serialization.dumps(m)) for m in sent)
    assert coded["comm"]["bytes_total"] == wire  # every message metered at its coded size
    sent.clear()
    plain = run_experiment(_spec())
    assert all(m[0] != CODED for m in sent)
    # lossless: the same models, fewer bytes on both links
    assert coded["model_fingerprint"] == plain["model_fingerprint"]
    for party in ("0", "1", "2"):
        assert (
            coded["comm"]["bytes_by_party"][party]["sent"]
            < (plain["comm"]["bytes_by_party"][party]["sent"])
        )
    assert coded["extra"]["entropy_coding"] == "both"
