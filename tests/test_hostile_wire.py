"""Hostile peers, round two (issue 45): the decoder turns every failure into one WireError.

The red team's payloads (a 17-byte array of dtype ``<U999999999`` raised TypeError, a 13-byte
``<U1`` scalar of ``\\xff\\xff\\xff\\xff`` SystemError, a dict of colliding int keys cost 35 s of
CPU for 844 KB) and a hypothesis fuzz of random and mutated payloads: only a value or a
WireError ever comes out. Work bounds, not time: the collision check hashes each key once.
"""

import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols import wire

MERSENNE_61 = (1 << 61) - 1  # CPython hashes an int to itself modulo this prime


def _array_head(dtype: bytes, shape: tuple[int, ...], nbytes: int) -> bytes:
    dims = b"".join(struct.pack("<Q", d) for d in shape)
    return (
        wire.MAGIC
        + b"a"
        + bytes([len(dtype)])
        + dtype
        + bytes([len(shape)])
        + dims
        + (struct.pack("<Q", nbytes))
    )


def test_a_17_byte_array_of_a_huge_string_dtype_is_a_wire_error():
    payload = _array_head(b"<U999999999", (), 0)[: 4 + 17]
    with pytest.raises(wire.WireError, match="U999999999"):
        wire.loads(payload)
    with pytest.raises(wire.WireError, match="strings of 1"):
        wire.loads(_array_head(b"|S0", (10**12,), 0))  # itemsize 0: any count, no bytes


def test_a_string_scalar_or_array_that_is_no_code_point_is_a_wire_error():
    scalar = wire.MAGIC + b"g\x03<U1" + b"\xff\xff\xff\xff"
    assert len(scalar) == 13
    with pytest.raises(wire.WireError, match="no code point"):
        wire.loads(scalar)
    with pytest.raises(wire.WireError, match="no code point"):
        wire.loads(_array_head(b">U1", (1,), 4) + b"\x00\x11\x00\x00")  # 0x110000 big-endian
    assert wire.loads(wire.dumps(np.array(["é", "\U0010ffff"]))).tolist() == ["é", "\U0010ffff"]


def _container_payload(tag: bytes, keys: list[int]) -> bytes:
    """A dict {key: None} or a set of ``keys``, encoded item by item (building the container
    here would be quadratic)."""
    value = b"N" if tag == b"d" else b""
    body = b"".join(wire.dumps(k)[len(wire.MAGIC) :] + value for k in keys)
    return wire.MAGIC + tag + struct.pack("<I", len(keys)) + body


@pytest.mark.parametrize("container", ["dict", "set"])
def test_keys_that_all_collide_are_refused_before_the_container_is_built(container):
    keys = [MERSENNE_61 * i for i in range(1, 30_001)]  # all hash to 0
    payload = _container_payload(b"d" if container == "dict" else b"e", keys)
    assert len(payload) < 400_000
    tracemalloc.start()
    try:
        with pytest.raises(wire.WireError, match="share one hash value"):
            wire.loads(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * len(payload) + (1 << 20)  # the decoder's own bound: nothing else built


def test_a_large_dict_and_set_of_ordinary_keys_still_decode():
    d = {i: i for i in range(20_000)} | {-1: "a", -2: "b"}  # -1 and -2 share a hash in CPython
    assert wire.loads(wire.dumps(d)) == d
    s = frozenset(range(-5, 20_000))
    assert wire.loads(wire.dumps(s)) == s
    assert wire.loads(wire.dumps({(1, 2): 3, "x": b"y"})) == {(1, 2): 3, "x": b"y"}


def test_an_unhashable_key_is_a_wire_error():
    payload = wire.MAGIC + b"d\x01\x00\x00\x00" + wire.dumps([1])[4:] + b"N"
    with pytest.raises(wire.WireError, match="unhashable"):
        wire.loads(payload)


# ------------------------------------------------------------------------------------- fuzz

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.builds(np.array, st.lists(st.floats(width=32), max_size=6)),
    st.builds(np.array, st.lists(st.text(max_size=3), min_size=1, max_size=4)),
)
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.integers(), st.text(max_size=4)), inner, max_size=4),
        st.frozensets(st.integers(), max_size=4),
    ),
    max_leaves=12,
)


def _decodes_or_refuses(payload: bytes) -> None:
    try:
        wire.loads(payload)
    except wire.WireError:
        pass  # anything else (TypeError, SystemError, ...) fails the test


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=_values,
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10**6),
)
def test_mutated_payloads_give_a_value_or_a_wire_error(value, edits, cut):
    payload = bytearray(wire.dumps(value))
    for pos, byte in edits:
        payload[len(wire.MAGIC) + pos % max(1, len(payload) - len(wire.MAGIC))] = byte
    _decodes_or_refuses(bytes(payload))
    _decodes_or_refuses(bytes(payload[: len(wire.MAGIC) + cut % len(payload)]))


@settings(max_examples=400, deadline=None)
@given(tag=st.sampled_from(list(b"NTFiImfcsbyltezdaOog")), body=st.binary(max_size=48))
def test_random_bodies_after_every_tag_give_a_value_or_a_wire_error(tag, body):
    _decodes_or_refuses(wire.MAGIC + bytes([tag]) + body)
