"""Authenticated parties: mutual TLS with `securevfl certs` certificates, on loopback and across
three network namespaces (three "hosts" on this machine, addresses only inside them)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest

from protocols.certs import make_certs
from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.runtime.launcher import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ["vfl", "--dataset", "breast", "--parties", "3", "--epochs", "2", "--seed", "4"]


def _party(index, addresses, certs, *, prefix=(), timeout=30):
    cmd = [*prefix, sys.executable, "-m", "bench.cli", "party", *RUN, "--json"]
    cmd += ["--index", str(index), "--certs", str(certs), "--run-id", "tls-test"]
    cmd += ["--timeout", str(timeout)]
    for a in addresses:
        cmd += ["-P", a]
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )


def _finish(procs, timeout=120):
    try:
        return [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()


def _inprocess_fingerprint():
    spec = RunSpec(method="vfl", dataset="breast", parties=3, epochs=2, seed=4)
    return run_experiment(spec)["model_fingerprint"]


def test_certs_are_mpyc_layout_and_keys_private(tmp_path):
    make_certs(str(tmp_path), 2)
    names = sorted(os.listdir(tmp_path))
    assert names == ["mpyc_ca.crt", "party_0.crt", "party_0.key", "party_1.crt", "party_1.key"]
    assert os.stat(tmp_path / "party_0.key").st_mode & 0o077 == 0


def test_certs_command_rejects_bad_input_with_one_line(tmp_path, capsys):
    from bench.cli import main

    assert main(["certs", "--out", str(tmp_path / "c"), "--parties", "0"]) == 2
    assert main(["party", *RUN, "--index", "0", "--certs", str(tmp_path), "-P", "a:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "securevfl: error: parties must be >= 1, got 0"
    assert err[1].startswith("securevfl: error: --certs must hold mpyc_ca.crt for party 0"), err
    assert main(["certs", "--out", str(tmp_path / "c"), "--parties", "2"]) == 0


@pytest.mark.networked
def test_a_tls_run_gives_the_inprocess_model_and_a_client_without_a_certificate_cannot_join(
    tmp_path,
):
    """One TLS run: a client without a certificate knocks first and neither joins nor stops
    it; the run then gives the in-process model."""
    make_certs(str(tmp_path), 3)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    procs = [_party(i, addresses, tmp_path) for i in (1, 2)]
    port = int(addresses[2].rsplit(":")[1])
    deadline = time.monotonic() + 60
    while True:  # the crafted-pickle attacker's opening, against a TLS party
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    with s:
        s.sendall((0).to_bytes(2, "little") + os.urandom(16) + b"\x80\x05junk")
        try:
            s.settimeout(10)
            s.recv(4096)  # a TLS alert or the close: it is not a party
        except OSError:
            pass
    procs.insert(0, _party(0, addresses, tmp_path))
    outs = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
    record = json.loads(outs[0][0])
    assert record["runtime"] == "processes"
    assert record["model_fingerprint"] == _inprocess_fingerprint()


@pytest.mark.networked
@pytest.mark.slow
def test_a_party_with_a_certificate_of_another_ca_or_party_is_refused(tmp_path):
    good, other = tmp_path / "good", tmp_path / "other"
    make_certs(str(good), 3)
    make_certs(str(other), 3)
    mixed = tmp_path / "mixed"  # party 2 holds party 1's key and certificate, under its own name
    shutil.copytree(good, mixed)
    for ext in ("crt", "key"):
        shutil.copy(good / f"party_1.{ext}", mixed / f"party_2.{ext}")
    # both runs at once: each waits out the 25 s timeout of party 2 (whom nobody accepts), long
    # enough to start under load; ports drawn for all six parties together, so none is shared
    ports = free_ports(6)
    runs = []
    for r, bad in enumerate((other, mixed)):
        addresses = [f"127.0.0.1:{p}" for p in ports[3 * r : 3 * r + 3]]
        runs.append([_party(i, addresses, good if i < 2 else bad, timeout=25) for i in range(3)])
    for procs in runs:
        outs = _finish(procs)
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 3 and not out, err
            assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        # the parties that connect to party 2 name the failure; one that was still waiting on
        # another peer may only see its timeout (seen for party 0 on a quiet machine)
        assert any("failed TLS verification" in err for _, err in outs), outs


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _can_make_namespaces() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"svfl-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError):
        return False
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    return True


@pytest.mark.networked
@pytest.mark.slow
@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and `ip netns`")
def test_three_hosts_over_tls_in_network_namespaces(tmp_path):
    """Three namespaces on one bridge (in a fourth), 10.200.<r>.1-3; nothing leaves them."""
    tag = uuid.uuid4().hex[:6]
    r = int(tag[:2], 16) % 200 + 20
    hub, hosts = f"svfl-{tag}-hub", [f"svfl-{tag}-{i}" for i in range(3)]
    made: list[str] = []
    try:
        for ns in (hub, *hosts):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, ns in enumerate(hosts):
            _ip("link", "add", f"sv{tag}{i}", "netns", ns, "type", "veth", "peer", "name",
                f"sh{tag}{i}", "netns", hub)  # fmt: skip
            _ip("-n", ns, "link", "set", f"sv{tag}{i}", "name", "eth0")
            _ip("-n", ns, "addr", "add", f"10.200.{r}.{i + 1}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", hub, "link", "set", f"sh{tag}{i}", "master", "br0")
            _ip("-n", hub, "link", "set", f"sh{tag}{i}", "up")
        make_certs(str(tmp_path), 3)
        addresses = [f"10.200.{r}.{i + 1}:11365" for i in range(3)]
        procs = [
            _party(i, addresses, tmp_path, prefix=("ip", "netns", "exec", ns))
            for i, ns in enumerate(hosts)
        ]
        outs = _finish(procs)
        assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
        record = json.loads(outs[0][0])
        assert record["runtime"] == "processes"
        assert record["model_fingerprint"] == _inprocess_fingerprint()
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
