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


# ------------------------------------------------------------------ oversize frames, real sockets


@pytest.mark.networked
@pytest.mark.slow  # two party processes start (imports dominate: the abort itself takes ms)
def test_an_oversize_frame_on_a_real_socket_aborts_naming_the_peer_with_bounded_memory():
    """Party 1 announces a 3 GiB frame on loopback and streams 256 MiB: party 0 refuses it from
    the header (its run's derived limit is ~1.6 MB), names party 1, buffers nothing."""
    import json
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from protocols.processes import free_ports

    root = Path(__file__).resolve().parents[1]
    script = str(root / "tests" / "_oversize_party.py")
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("SECUREVFL_MAX_FRAME_MB", None)
    t0 = time.monotonic()
    victim = subprocess.Popen(
        [sys.executable, script, "victim", *addresses],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    attacker = subprocess.Popen(
        [sys.executable, script, "attacker", *addresses, str(3 << 30)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        out, err = victim.communicate(timeout=120)
    finally:
        for p in (victim, attacker):
            if p.poll() is None:
                p.kill()
        attacker.wait(timeout=30)
    assert victim.returncode == 0, err.decode()[-2000:]
    got = json.loads(out.decode().strip().splitlines()[-1])
    assert "party 1 sent a frame of 3221225472 bytes" in got["error"], got
    assert got["limit"] < 8 << 20  # derived from the small run, not the old 256 MiB cap
    assert got["rss_growth"] < 200 << 20, got  # the 256 MiB streamed were never buffered
    assert got["seconds"] < 30.0, got  # aborts at the header, not at a timeout
    assert time.monotonic() - t0 < 120
