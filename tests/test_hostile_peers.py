"""A hostile peer's bytes: the wire decoder never executes, never amplifies, never crashes
with anything but WireError (mutated and forged payloads, measured memory)."""

import tracemalloc

import numpy as np
import pytest

from protocols import wire


def _payloads():
    return [
        wire.dumps(np.arange(64, dtype=np.float32).reshape(8, 8)),
        wire.dumps({"keys": [b"x" * 32, b"y" * 32], "session": 7, "t": (1.5, None, True)}),
        wire.dumps([np.zeros(3, dtype=np.int64), "text", {1: 2}]),
    ]


def test_mutated_payloads_decode_or_refuse_within_bounded_memory():
    rng = np.random.default_rng(0)
    tracemalloc.start()
    try:
        for base in _payloads():
            for _ in range(700):
                b = bytearray(base)
                for _ in range(int(rng.integers(1, 4))):  # flip, overwrite or cut
                    i = int(rng.integers(len(b)))
                    kind = rng.integers(3)
                    if kind == 0:
                        b[i] ^= 1 << int(rng.integers(8))
                    elif kind == 1:
                        b[i] = 0xFF
                    else:
                        del b[i:]
                        break
                try:
                    wire.loads(bytes(b))
                except wire.WireError:
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20  # no message of < 1 KB made the decoder hold more than 64 MB


@pytest.mark.parametrize("n", [8, 16, 32])
def test_short_forged_payloads_never_amplify(n):
    """Every n-byte payload with the format's header and 0xFF sizes is refused or tiny."""
    head = wire.dumps(None)[: max(1, len(wire.dumps(None)) - 1)]
    rng = np.random.default_rng(n)
    tracemalloc.start()
    try:
        for _ in range(2000):
            body = bytes(rng.integers(0, 256, size=n, dtype=np.uint8))
            for forged in (head + body, head + b"\xff" * n, body):
                try:
                    wire.loads(forged)
                except wire.WireError:
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_a_pickle_stream_is_refused_not_run():
    import pickle

    with pytest.raises(wire.WireError, match="not a securevfl wire message"):
        wire.loads(pickle.dumps(print))
