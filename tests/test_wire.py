"""The wire (issue 11): a crafted pickle runs nothing, parties agree on the run, no foreign run
joins. Networked tests start real party processes and attack them over loopback."""

import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import time

import pytest

from protocols import wire
from securevfl.context import RunSpec
from securevfl.runtime.launcher import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Marker:
    """Unpickling this creates a file: proof that a peer's bytes ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_allow_list_refuses_a_crafted_pickle_before_running_it(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Marker(str(marker)))
    with pytest.raises(wire.WireError, match="not a securevfl wire message"):
        wire.loads(evil)
    with pytest.raises(wire.WireError, match="malformed"):
        wire.loads(b"\x80\x05garbage")
    assert not marker.exists()


def test_mpyc_own_unpickling_is_behind_the_allow_list(tmp_path):
    """MPyC 0.11 unpickles share arrays itself; after the guard its messages travel in the
    typed wire format: arrays of shares round-trip, a pickle stream (code) is refused."""
    marker = tmp_path / "pwned"
    prog = f"""
import pickle, sys, numpy as np, gmpy2
sys.argv = [sys.argv[0], "--no-log"]
import mpyc.runtime as mrt
from protocols.wire import guard_mpyc_unpickling, WireError
seen = []
guard_mpyc_unpickling(seen.append)
a = np.array([gmpy2.mpz(3), 5], dtype=object)
assert list(mrt.pickle.loads(mrt.pickle.dumps(a))) == [3, 5]
try:
    mrt.pickle.loads({pickle.dumps(_Marker(str(marker)))!r})
except WireError:
    print("refused", len(seen))
"""
    out = subprocess.run(
        [sys.executable, "-c", prog],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert out.stdout.strip() == "refused 1", out.stderr
    assert not marker.exists()


def _cli_party(index, addresses, *, seed=0, run_id="", timeout=20, extra=()):
    cmd = [sys.executable, "-m", "bench.cli", "party", "vfl", "--dataset", "breast"]
    cmd += ["--epochs", "1", "--seed", str(seed), "--index", str(index)]
    cmd += ["--timeout", str(timeout), "--run-id", run_id, *extra]
    cmd += ["--parties", str(len(addresses))]  # one address per party, checked before connecting
    for a in addresses:
        cmd += ["-P", a]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )


def _finish(procs, timeout=90):
    try:
        return [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# MPyC labels a message with its program counter: the k-th top-level MPyC coroutine after start
# gets hash((k, 0)) (asyncoro._hop) on every party, so an attacker knows the labels of the
# victim's first receives without seeing any traffic.
FIRST_PCS = [hash((k, 0)) for k in range(1, 33)]


def _attack(port: int, payload: bytes, deadline: float) -> None:
    """Speak MPyC's handshake as party 0 of 2 and send ``payload`` under each of the labels the
    victim's first receives from party 0 will have: whichever comes first is decoded."""
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with s:
        s.sendall((0).to_bytes(2, "little") + os.urandom(16))  # party id 0 + a PRSS key
        for pc in FIRST_PCS:
            s.sendall(struct.pack(f"<qI{len(payload)}s", pc, len(payload), payload))
        s.settimeout(30)
        try:
            while s.recv(4096):  # until the victim hangs up
                pass
        except OSError:
            pass


@pytest.mark.networked
def test_a_crafted_pickle_from_a_fake_party_0_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    victim = _cli_party(1, addresses)
    try:
        port, evil = int(addresses[1].rsplit(":")[1]), pickle.dumps(_Marker(str(marker)))
        _attack(port, evil, time.monotonic() + 60)
    finally:
        ((_, err),) = _finish([victim])
    assert victim.returncode == 3
    line = _one_error_line(err)
    assert "party 0 sent a malformed first message" in line, line
    assert not marker.exists()


def _frames(s: socket.socket, n: int) -> list[tuple[int, bytes]]:
    """Read ``n`` MPyC frames (label, payload) from the victim."""
    buf, out = b"", []
    while len(out) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("victim hung up")
        buf += chunk
        while len(buf) >= 12:
            pc, size = struct.unpack_from("<qI", buf)
            if len(buf) < 12 + size:
                break
            out.append((pc, buf[12 : 12 + size]))
            buf = buf[12 + size :]
    return out


@pytest.mark.networked
def test_an_attacker_that_passes_the_handshake_still_runs_nothing(tmp_path):
    """Without TLS or a run key a hand-started run cannot authenticate party 0: replaying the
    victim's own hello passes the run check. The crafted pickle then arrives as a payload, and
    the allow-list refuses it."""
    from protocols.mpyc_net import _mac

    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Marker(str(marker)))
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    victim = _cli_party(1, addresses)
    port, deadline = int(addresses[1].rsplit(":")[1]), time.monotonic() + 60
    try:
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        with s:
            s.sendall((0).to_bytes(2, "little") + os.urandom(16))
            ((pc, hello),) = _frames(s, 1)  # the victim's hello: replay it as ours
            s.sendall(struct.pack(f"<qI{len(hello)}s", pc, len(hello), hello))
            mac = _mac(b"", 0, 1, [hello, hello])  # labels 2 (0 -> 1) and 3 (1 -> 0)
            s.sendall(struct.pack("<qI32s", hash((2, 0)), 32, mac))
            for pc in FIRST_PCS[3:]:  # every later label the victim may read from party 0
                s.sendall(struct.pack(f"<qI{len(evil)}s", pc, len(evil), evil))
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
    finally:
        ((_, err),) = _finish([victim])
    assert victim.returncode == 3, err
    line = _one_error_line(err)
    assert "party 1 refused a message from party 0" in line, line
    assert "not a securevfl wire message" in line, line
    assert not marker.exists()


@pytest.mark.networked
def test_parties_listen_only_on_the_address_given():
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    victim = _cli_party(1, addresses, timeout=8)
    port = int(addresses[1].rsplit(":")[1])
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        with socket.socket(socket.AF_INET6) as s:  # [::1] is not 127.0.0.1: nobody listens
            assert s.connect_ex(("::1", port)) != 0
        ss = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        listening = [ln.split()[3] for ln in ss.splitlines() if ln.split()[3].endswith(f":{port}")]
        assert listening == [f"127.0.0.1:{port}"], listening
    finally:
        _finish([victim])
    assert victim.returncode == 3


@pytest.mark.networked
def test_a_party_with_another_seed_makes_every_party_stop():
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    three = ("--parties", "3")  # one address per party, checked before connecting
    procs = [_cli_party(i, addresses, seed=1 if i < 2 else 2, extra=three) for i in range(3)]
    outs = _finish(procs)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 3 and not out
        line = _one_error_line(err)
        assert "run spec of party 2 differs from that of parties 0, 1 in --seed:" in line, line


@pytest.mark.networked
def test_a_foreign_run_on_the_same_ports_is_refused():
    """Parties 1 and 2 of run A, and party 0 of run B (another user, same ports)."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    three = ("--parties", "3")  # one address per party, checked before connecting
    procs = [_cli_party(i, addresses, run_id="A", extra=three) for i in (1, 2)]
    procs.append(_cli_party(0, addresses, run_id="B", extra=three))
    outs = _finish(procs)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 3 and not out
        assert "run spec of party 0 differs from that of parties 1, 2 in --run-id" in (
            _one_error_line(err)
        )


@pytest.mark.networked
def test_a_hand_started_party_cannot_join_a_launched_run():
    """The launcher's run key travels over stdin; a party without it fails the run check."""
    spec = RunSpec(method="vfl", dataset="breast", parties=2, epochs=1, seed=0, timeout=20)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    base = [sys.executable, "-m", "securevfl.party", "--spec-json"]
    base += [json.dumps(spec.__dict__), "--plugins", "baselines", "--run-id", "r1"]
    for a in addresses:
        base += ["-P", a]
    keyed = subprocess.Popen(
        [*base, "--index", "1", "--key-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    keyed.stdin.write(os.urandom(32).hex() + "\n")
    keyed.stdin.flush()
    intruder = subprocess.Popen(
        [*base, "--index", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    outs = _finish([keyed, intruder])
    for p, (_, err) in zip([keyed, intruder], outs):
        assert p.returncode == 3
        assert "failed the run check" in _one_error_line(err)


def test_off_host_address_without_tls_is_bad_input():
    from bench.cli import main

    rc = main(["party", "vfl", "--index", "0", "-P", "10.200.0.1:5000", "-P", "127.0.0.1:5001"])
    assert rc == 2
