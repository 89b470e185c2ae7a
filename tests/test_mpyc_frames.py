"""MPyC frames as protocols.mpyc_net's exchanger reassembles them: large frames (>= BIG_FRAME)
collected chunk by chunk and joined once, small ones through MPyC's own path, whatever the
socket's chunking (a header split in two, several frames in one chunk), and an oversize frame
still refused from its header."""

from __future__ import annotations

import asyncio
import os
import struct
import types

import numpy as np
import pytest

from protocols import mpyc_net


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


def _exchanger(loop, limit: int = 1 << 30):
    rt = types.SimpleNamespace(
        _securevfl_last_seen={},
        _securevfl_refused=[],
        _securevfl_max_frame=limit,
        _securevfl_authenticated=True,  # after the handshake: the run's budgets apply
        parties=[],
        pid=0,
        _loop=loop,
    )
    ex = mpyc_net._exchanger_class()(rt, 1)  # the peer is party 1: past identification
    ex.transport = _Transport()
    return ex


def _frame(pc: int, payload: bytes) -> bytes:
    return struct.pack("<qI", pc, len(payload)) + payload


@pytest.mark.parametrize("cuts", ["one", "socket", "odd", "header"])
def test_large_and_small_frames_arrive_intact_however_the_stream_is_cut(cuts):
    loop = asyncio.new_event_loop()
    try:
        ex = _exchanger(loop)
        big = mpyc_net.BIG_FRAME
        payloads = {5: os.urandom(2 * big + 3), 6: b"small", 7: os.urandom(big), 8: b""}
        waiting = ex.receive(7)  # a future already waits for frame 7
        stream = b"".join(_frame(pc, p) for pc, p in payloads.items())
        if cuts == "one":
            pieces = [stream]
        elif cuts == "socket":  # asyncio reads at most 256 KiB at a time
            pieces = [stream[i : i + 262144] for i in range(0, len(stream), 262144)]
        elif cuts == "odd":
            rng = np.random.default_rng(0)
            at = sorted({0, len(stream), *rng.integers(0, len(stream), 40).tolist()})
            pieces = [stream[a:b] for a, b in zip(at, at[1:])]
        else:  # every header split between two chunks
            at, off = [0], 0
            for p in payloads.values():
                at += [off + 5, off + 12 + len(p)]
                off += 12 + len(p)
            pieces = [stream[a:b] for a, b in zip(at, at[1:])]
        for piece in pieces:
            ex.data_received(piece)
        assert waiting.done() and waiting.result() == payloads[7]
        for pc in (5, 6, 8):
            assert ex.buffers[pc] == payloads[pc]
        assert not ex.bytes and ex._big_pc is None and not ex.transport.aborted
    finally:
        loop.close()


def test_an_oversize_large_frame_is_refused_from_its_header():
    loop = asyncio.new_event_loop()
    try:
        ex = _exchanger(loop, limit=4 * mpyc_net.BIG_FRAME)
        head = struct.pack("<qI", 3, 8 * mpyc_net.BIG_FRAME)
        ex.data_received(head + bytes(1000))
        assert ex.transport.aborted and ex._big_pc is None
        assert "over the limit" in ex.runtime._securevfl_refused[0]
    finally:
        loop.close()
