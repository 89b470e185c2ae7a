"""Hostile peers, round two (issue 45): floods of frames no step asked for, on real sockets.

Before the handshake a local process that claims a party id (no certificate, no key) makes the
victim hold at most the handshake's bytes plus one socket read: the victim stops reading it and
names it when its wait ends. After the handshake an authenticated peer sending frames with
labels no step uses is refused, named, once it passes its budget. Work bounds: the bytes the
victim held (``held_peak``) and its peak RSS growth, never wall-clock time.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocols import mpyc_net
from protocols.processes import free_ports

pytestmark = [pytest.mark.networked, pytest.mark.slow]  # party processes start (imports)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "_flood_party.py")
READ_CHUNK = 256 << 10  # asyncio takes at most this much from a socket per read


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SECUREVFL_MAX_FRAME_MB", None)
    return env


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def _flood_before_the_handshake(address: str, total: int) -> int:
    """Claim party 0 on a raw socket (pid + PRSS keys) and send frames of labels no step uses;
    return the bytes the kernel accepted before the victim stopped reading (or hung up)."""
    host, port = address.split(":")
    deadline = time.monotonic() + 60
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline, "the victim never listened"
            time.sleep(0.1)
    frame = b"\xcd" * (64 << 10)
    sent = 0
    with sock:
        sock.sendall((0).to_bytes(2, "little") + b"\x00" * 16)
        sock.settimeout(3.0)  # a stalled write means the victim stopped reading
        try:
            for i in range(total // len(frame)):
                head = ((1 << 40) + i).to_bytes(8, "little") + len(frame).to_bytes(4, "little")
                sock.sendall(head + frame)
                sent += 12 + len(frame)
        except OSError:  # TimeoutError (stalled) or reset
            pass
    return sent


def test_a_flood_before_the_handshake_is_held_to_the_handshake_size():
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    victim = subprocess.Popen(
        [sys.executable, SCRIPT, "victim-preauth", *addresses],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        sent = _flood_before_the_handshake(addresses[1], 256 << 20)
        got = _result(victim)
    finally:
        if victim.poll() is None:
            victim.kill()
    # the handshake's bytes, one socket read, and the frames' bookkeeping (140 B each)
    assert got["held_peak"] <= mpyc_net.PREAUTH_BYTES + READ_CHUNK + 4096, got
    assert "party 0 sent" in got["error"] and "before the handshake" in got["error"], got
    assert sent < 64 << 20, sent  # the rest stalled in the attacker's own socket
    assert got["rss_growth"] < 64 << 20, got


def test_a_flood_after_the_handshake_is_refused_at_the_peer_budget_naming_the_peer():
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    victim = subprocess.Popen(
        [sys.executable, SCRIPT, "victim", *addresses],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    attacker = subprocess.Popen(
        [sys.executable, SCRIPT, "attacker", *addresses],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    try:
        got = _result(victim)
    finally:
        for p in (victim, attacker):
            if p.poll() is None:
                p.kill()
        attacker.wait(timeout=30)
    assert "party 1 sent frames no step has asked for yet" in got["error"], got
    assert got["held_peak"] <= got["peer_budget"] + READ_CHUNK, got
    assert got["peer_budget"] < 128 << 20  # the 128 MiB flood was not all held
    assert got["rss_growth"] < got["peer_budget"] + (64 << 20), got


def test_held_budgets_follow_the_frame_limit():
    small_peer, small_run = mpyc_net.held_budgets(1 << 20, 3)
    assert small_peer == mpyc_net.PEER_FLOOR and small_run == 2 * small_peer
    peer, run = mpyc_net.held_budgets(100 << 20, 5)
    assert peer == mpyc_net.PEER_CAP and run == mpyc_net.RUN_CAP
    huge_peer, huge_run = mpyc_net.held_budgets(1 << 30, 2)  # two frames always fit
    assert huge_peer >= 2 << 30 and huge_run >= 2 << 30
