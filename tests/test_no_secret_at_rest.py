"""Inputs handed to local party processes never touch the disk (issue 11): FM-VFL's secure
products pass each party's matrix over a pipe, so a normal run, a killed party and a killed
launcher all leave the temporary directory empty, and a killed launcher's parties die with it."""

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAUNCH = """
import sys, numpy as np
from protocols import shamir_launch as sl
from protocols import shamir_products as sp
n = int(sys.argv[2])
M = {0: np.full((n, 3), 7, np.int64), 1: np.full((n, 2), 5, np.int64)}
got, _ = sl.run_block_products(M, {0: np.zeros((3, 2))}, [sp.Pair(0, 1, 0)], n_parties=3,
    receiver=2, frac_bits=4, noise_bound=1.0, timeout=float(sys.argv[1]))
print(int(got[0][0, 0]))
"""


def _launch(tmp, timeout=60.0, rows=50):
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=ROOT)
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCH, str(timeout), str(rows)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _children(pid: int) -> list[int]:
    path = f"/proc/{pid}/task/{pid}/children"
    try:
        with open(path) as fh:
            return [int(c) for c in fh.read().split()]
    except OSError:
        return []


def _wait_children(pid: int, n: int, timeout: float = 30, settle: float = 0.3) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = _children(pid)
        if len(kids) >= n:
            time.sleep(settle)  # spawned (and, given time, handed their inputs)
            return kids
        time.sleep(0.02)
    raise AssertionError(f"launcher {pid} did not start {n} parties")


def _files(tmp) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(tmp) for f in fs]


pytestmark = pytest.mark.networked
skip_no_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")


def test_normal_run_leaves_no_file(tmp_path):
    p = _launch(tmp_path)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert int(out) == 50 * 7 * 5
    assert _files(tmp_path) == []


@skip_no_proc
def test_killed_party_leaves_no_file(tmp_path):
    # the largest job, killed soon after the parties start: on a quiet machine the whole
    # job takes about 0.6 s, most of it the parties' start-up
    p = _launch(tmp_path, rows=100_000)
    kids = _wait_children(p.pid, 3, settle=0.05)
    os.kill(kids[1], signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "MPyC party" in err
    assert _files(tmp_path) == []


@skip_no_proc
def test_killed_launcher_leaves_no_file_and_no_party(tmp_path):
    p = _launch(tmp_path, timeout=120.0, rows=100_000)
    kids = _wait_children(p.pid, 3)
    p.kill()
    p.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.05)
    alive = [k for k in kids if _alive(k)]
    assert alive == [], "parties outlived their launcher"
    assert _files(tmp_path) == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
