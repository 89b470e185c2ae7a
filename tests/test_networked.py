"""One OS process per party over MPyC: same seed, same model as in-process; dead peers fail fast."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.runner import PLUGINS
from securevfl.context import RunSpec
from securevfl.errors import ProtocolError
from securevfl.experiment import run_experiment, run_in_processes
from securevfl.runtime.launcher import free_ports

pytestmark = [pytest.mark.networked, pytest.mark.slow]


# imported at each party's start (PYTHONPATH): which heavy packages the process loaded, at exit
_MODULES_AT_EXIT = """
import atexit, os, sys
def _write():
    heavy = [m for m in ("torch", "dp_accounting", "sklearn", "scipy") if m in sys.modules]
    with open(os.path.join(os.environ["MODULES_AT_EXIT"], str(os.getpid())), "w") as f:
        f.write(",".join(heavy) + "\\n" + " ".join(sys.argv))
atexit.register(_write)
"""


def test_processes_and_inprocess_give_the_same_model_and_bytes(tmp_path, monkeypatch):
    spec = RunSpec(
        method="vfl", dataset="breast", parties=3, epochs=3, batch_size=64, seed=7, timeout=60
    )
    # each party imports its own method's module only: a plain GLM party loads neither torch
    # nor the accountant nor scikit-learn nor scipy (together ~4 s of CPU a process start); the
    # label holder loads scipy only (the logistic function where it evaluates the loss; the
    # AUC is numpy's: securevfl.model.evaluation.binary_auc)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_MODULES_AT_EXIT)
    (tmp_path / "seen").mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}:{Path(__file__).parents[1]}")
    monkeypatch.setenv("MODULES_AT_EXIT", str(tmp_path / "seen"))
    net = run_in_processes(spec, plugins=PLUGINS)
    seen = {}
    for path in (tmp_path / "seen").iterdir():
        heavy, argv = path.read_text().split("\n")
        seen[int(argv.split("--index ")[1].split()[0])] = heavy
    assert seen == {0: "scipy", 1: "", 2: ""}, seen
    local = run_experiment(spec)
    assert net["runtime"] == "processes" and local["runtime"] == "inprocess"
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert len(net["model_fingerprint"]) == 3
    assert net["metrics"] == local["metrics"]
    for key in ("bytes_total", "messages", "rounds", "bytes_by_party"):
        assert net["comm"][key] == local["comm"][key]
    # CPU of the whole run: every party process's summed, or the one in-process
    assert net["time"]["cpu_s"] > 0 and local["time"]["cpu_s"] > 0


def test_split_nn_is_identical_in_both_runtimes():
    spec = RunSpec(
        method="vfl",
        dataset="breast",
        parties=3,
        model="mlp",
        aggregation="concat",
        epochs=2,
        seed=3,
        timeout=60,
        dataset_options={"n": 250},  # the same protocol on fewer rows
    )
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert set(net["model_fingerprint"]) == {"0", "1", "2", "top"}
    assert net["comm"]["bytes_total"] == local["comm"]["bytes_total"]


def _party_cmd(index, addresses, spec):
    cmd = [
        sys.executable,
        "-m",
        "securevfl.party",
        "--index",
        str(index),
        "--spec-json",
        json.dumps(spec.__dict__),
        "--plugins",
        "baselines",
    ]
    for a in addresses:
        cmd += ["-P", a]
    return cmd


def _wait_connected(ports: list[int], *, limit: float) -> bool:
    """Until every pair of parties has a TCP connection (kernel table: ESTABLISHED = 01)."""
    want, t0 = len(ports) * (len(ports) - 1) // 2, time.monotonic()
    while time.monotonic() - t0 < limit:
        rows = open("/proc/net/tcp").read().splitlines()[1:]
        up = [r.split() for r in rows]
        if sum(f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) in ports for f in up) >= want:
            return True
        time.sleep(0.1)
    return False


def test_a_missing_party_makes_the_others_fail_not_hang():
    spec = RunSpec(method="vfl", dataset="breast", parties=3, epochs=1, seed=0, timeout=3)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    # parties 0 and 1 start, party 2 never does
    procs = [
        subprocess.Popen(_party_cmd(i, addresses, spec), stderr=subprocess.PIPE, text=True)
        for i in (0, 1)
    ]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs):  # both gave up (communicate's 60 s bounds the test)
        assert p.returncode == 3 and "Traceback" not in err and len(err.splitlines()) == 1, err
        # the first to give up names the wait; a party still starting (a loaded machine) may
        # instead see that one leave
        assert "waited more than 3 s" in err or "disconnected" in err, err
    assert any("waited more than 3 s" in err for _, err in outs), outs


def test_a_party_that_dies_mid_run_is_reported():
    spec = RunSpec(
        method="vfl", dataset="breast", parties=3, epochs=400, batch_size=8, seed=0, timeout=10
    )
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    procs = [
        subprocess.Popen(_party_cmd(i, addresses, spec), stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    try:
        # all connected (400 epochs of tiny batches then take minutes), however slow the start
        assert _wait_connected([int(a.rsplit(":", 1)[1]) for a in addresses], limit=120)
        time.sleep(1)
        procs[2].kill()
        outs = [p.communicate(timeout=60) for p in procs[:2]]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs[:2], outs):
        assert p.returncode == 3
        # a dead peer's closed socket is noticed at once: the error names the disconnection,
        # not the 10 s wait that a missed close would end in
        assert "party 2 disconnected" in err or "party 2 has disconnected" in err, err
        assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err


def test_launcher_raises_a_clear_error_when_the_run_cannot_finish():
    spec = RunSpec(method="vfl", dataset="breast", parties=3, epochs=1, seed=0, timeout=0.001)
    with pytest.raises(ProtocolError, match="party"):
        run_in_processes(spec, plugins=PLUGINS)


def test_a_large_send_has_left_the_senders_buffers_when_it_returns(tmp_path):
    """asyncio writes the rest of a large message only while the sender's event loop runs; the
    runtime drains it before send returns, so a sender that then computes does not hold its
    peer waiting: the receiver gets all 24 MiB while the sender, its loop stopped, waits for
    the receiver's word that it has them (an order of events, not a duration)."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    script = str(Path(__file__).with_name("_drain_party.py"))
    signal = str(tmp_path / "received")
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(i), *addresses, signal], stdout=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    out = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert out[0]["left"] == 0 and out[0]["received_while_busy"] is True
    assert out[1]["size"] == 24 << 20
