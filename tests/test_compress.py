"""The message compressors: round-trip error bounds, top-k, exact sizes, malformed payloads."""

import numpy as np
import pytest

from protocols.compress import (
    CLIP_SIGMAS,
    CompressError,
    decode,
    encode,
    encoded_size,
    index_bits,
    max_error,
    quant_range,
)
from securevfl.runtime import serialization


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8, 12, 16, 32])
def test_uniform_quantiser_error_is_within_half_a_step(bits):
    rng = np.random.default_rng(bits)
    for shape in [(1,), (7,), (64, 8), (3, 5, 2)]:
        x = rng.normal(size=shape) * rng.choice([1e-3, 1.0, 50.0])
        y = decode(encode(x, bits=bits))
        assert y.shape == x.shape
        lo, hi = quant_range(x.ravel(), bits) if bits < 32 else (x.min(), x.max())
        assert lo <= x.min() and hi >= x.max()  # the float32 range covers the message
        bound = max_error(lo, hi, bits)
        assert np.abs(y - x).max() <= bound * (1 + 1e-9) + 1e-300
        if bits < 32 and x.size > 1:  # the bound is tight: not a loose over-estimate
            assert np.abs(y - x).max() > bound / 4
        if bits < 32:  # the extremes are end points (exact up to the float32 range)
            assert abs(y.ravel()[x.argmin()] - x.min()) <= bound * 1e-3 + 1e-6 * abs(x.min())


def test_constant_and_empty_messages_round_trip():
    assert np.array_equal(decode(encode(np.full((4, 3), 0.25), bits=2)), np.full((4, 3), 0.25))
    assert decode(encode(np.zeros((0, 8)), bits=8)).shape == (0, 8)


@pytest.mark.parametrize("bits", [4, 32])
def test_topk_keeps_the_largest_entries(bits):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8))
    k = 40
    y = decode(encode(x, bits=bits, topk=k))
    kept = np.flatnonzero(y.ravel())
    assert len(kept) <= k
    top = np.argsort(-np.abs(x.ravel()))[:k]
    assert set(kept) <= set(top)
    err = max_error(*quant_range(x.ravel()[top], bits), bits) if bits < 32 else 1e-6
    assert np.abs(y.ravel()[top] - x.ravel()[top]).max() <= err * (1 + 1e-9) + 1e-12
    # what was dropped is no larger than anything kept
    dropped = np.setdiff1d(np.arange(x.size), top)
    assert np.abs(x.ravel()[dropped]).max() <= np.abs(x.ravel()[top]).min()


@pytest.mark.parametrize("bits, topk", [(1, None), (4, None), (8, None), (32, None), (8, 17)])
def test_encoded_bytes_are_the_packed_size(bits, topk):
    x = np.random.default_rng(1).normal(size=(64, 8))
    data = encode(x, bits=bits, topk=topk)
    n = 512 if topk is None else topk
    body = 4 * n if bits == 32 else 8 + -(-n * bits // 8)  # floats, or lo/hi + packed codes
    idx = 0 if topk is None else 4 + -(-topk * index_bits(512) // 8)
    assert len(data) == 3 + 4 * 2 + idx + body == encoded_size(x.shape, bits=bits, topk=topk)
    # on the wire: the bytes object plus a fixed pickle frame of a few bytes
    assert 0 < len(serialization.dumps(data)) - len(data) <= 20


@pytest.mark.parametrize("bad", [0, 17, 31, 33, -1, 2.5, True])
def test_bad_bit_widths_are_refused(bad):
    with pytest.raises(CompressError, match="bits must be an integer in 1..16 or 32"):
        encode(np.ones(3), bits=bad)


def test_truncated_or_padded_payloads_are_refused():
    data = encode(np.arange(10.0), bits=4)
    for broken in (data[:-1], data + b"\x00", data[:2], b"\x09" + data[1:]):
        with pytest.raises(CompressError):
            decode(broken)


def test_stochastic_rounding_is_unbiased_within_one_step():
    rng = np.random.default_rng(3)
    x = rng.normal(size=40)
    lo, hi = float(x.min()), float(x.max())
    step = (hi - lo) / 3
    ys = np.array([decode(encode(x, bits=2, rounding="stochastic", rng=rng)) for _ in range(4000)])
    assert np.abs(ys - x).max() < step  # one of the two neighbouring levels
    se = ys.std(axis=0) / np.sqrt(len(ys)) + 1e-12
    assert np.all(np.abs(ys.mean(axis=0) - x) <= 4.5 * se + 1e-6)  # + float32 range ends
    # nearest rounding is biased at 2 bits: the same check tells it apart
    near = decode(encode(x, bits=2))
    assert np.any(np.abs(near - x) > 10 * se)
    with pytest.raises(CompressError, match="rounding must be one of"):
        encode(x, bits=2, rounding="stochastic")  # no generator


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_clipped_range_spans_the_gaussian_optimum_and_lowers_the_error(bits):
    x = np.random.default_rng(bits).normal(size=(64, 8))
    y = decode(encode(x, bits=bits, clip=True))
    lo, hi = quant_range(x.ravel(), bits, clip=True)
    assert lo == pytest.approx(x.mean() - CLIP_SIGMAS[bits] * x.std())
    assert hi == pytest.approx(x.mean() + CLIP_SIGMAS[bits] * x.std())
    inside = (x >= lo) & (x <= hi)
    assert np.abs(y - x)[inside].max() <= max_error(lo, hi, bits) * (1 + 1e-9)
    assert np.allclose(y[~inside], np.clip(x[~inside], lo, hi))  # clamped to the range
    assert np.mean((y - x) ** 2) < np.mean((decode(encode(x, bits=bits)) - x) ** 2)
    assert len(encode(x, bits=bits, clip=True)) == encoded_size(x.shape, bits=bits)
