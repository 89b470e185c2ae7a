"""Kill one party of a networked run and time how each survivor notices (robustness check).

    python tools/kill_party.py by-hand METHOD VICTIM [--after S] [--timeout T] [-- RUN ARGS]
    python tools/kill_party.py launcher METHOD VICTIM [--after S] [--timeout T] [-- RUN ARGS]

``by-hand`` starts every party as its own ``securevfl party`` process (as on several hosts) and
SIGKILLs party VICTIM after S seconds; each survivor must exit by itself within T (+ slack) with
one line naming the dead party. ``launcher`` runs ``securevfl run --processes`` and SIGKILLs
the launcher's party process VICTIM (or the launcher itself with VICTIM = ``launcher``): the
launcher must exit with one line, and no party process may outlive it. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from protocols.processes import free_ports

CLI = [sys.executable, "-m", "bench.cli"]


def n_parties(method: str, run_args: list[str]) -> int:
    import baselines
    from bench.cli import build_parser, spec_from_args
    from securevfl.experiment import validate_spec
    from securevfl.methods import load_all

    load_all()  # the methods' options are parsed before validate_spec would register them
    baselines.load_all()
    args = build_parser().parse_args(["run", method, *run_args])
    spec = spec_from_args(args)
    return validate_spec(spec).n_parties(spec)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def by_hand(
    method: str, victim: int, after: float, timeout: float, run_args: list[str], sig: str
) -> dict:
    k = n_parties(method, run_args)
    ports = free_ports(k)
    addr = sum((["-P", f"127.0.0.1:{p}"] for p in ports), [])
    procs = [
        subprocess.Popen(
            [*CLI, "party", method, "--index", str(i), *addr, "--timeout", str(timeout), *run_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(k)
    ]
    connected = _wait_connected(ports, k, limit=timeout * 3)
    time.sleep(after)
    if procs[victim].poll() is not None:
        return {"error": f"party {victim} already exited ({procs[victim].returncode})"}
    procs[victim].send_signal(getattr(signal, "SIG" + sig))
    t_kill = time.monotonic()
    out = {"method": method, "mode": "by-hand", "signal": sig, "parties": k, "victim": victim}
    out["connected_s"] = connected
    out["survivors"] = {}
    pending = {i: p for i, p in enumerate(procs) if i != victim}
    exit_s: dict[int, float] = {}
    limit = t_kill + timeout * 3 + 30
    while pending and time.monotonic() < limit:  # poll all, so each exit time is its own
        for i, p in list(pending.items()):
            if p.poll() is not None:
                exit_s[i] = time.monotonic() - t_kill
                del pending[i]
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
    for i, p in enumerate(procs):
        err = p.communicate()[1]
        if i == victim:
            continue
        lines = _lines(err)
        out["survivors"][i] = {
            "exit_s": round(exit_s[i], 1) if i in exit_s else "HUNG",
            "rc": p.returncode,
            "stderr_lines": len(lines),
            "last": lines[-1][:200] if lines else "",
        }
    return out


def _established(ports: list[int]) -> int:
    """TCP connections ESTABLISHED whose local port is one of ``ports`` (the accepting side)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) in ports:
                n += 1
    return n


def _wait_connected(ports: list[int], k: int, *, limit: float) -> float | None:
    """Seconds until every pair of the k parties is connected (then the run is under way)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if _established(ports) >= k * (k - 1) // 2:
            return round(time.monotonic() - t0, 1)
        time.sleep(0.1)
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def launcher(method: str, victim: str, after: float, timeout: float, run_args: list[str]) -> dict:
    cmd = [*CLI, "run", method, "--processes", "--timeout", str(timeout), *run_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids: list[int] = []
    t0 = time.monotonic()
    while len(kids) < 2 and time.monotonic() - t0 < 60 and proc.poll() is None:
        time.sleep(0.1)
        kids = _children(proc.pid)
    ports = [int(a.rsplit(":", 1)[1]) for a in _cmdline(kids[0]) if a.startswith("127.0.0.1:")]
    _wait_connected(ports, len(ports), limit=timeout * 3)
    time.sleep(after)
    kids = _children(proc.pid)
    if proc.poll() is not None or not kids:
        return {"error": f"launcher exited early ({proc.returncode}) or has no parties"}
    target = proc.pid if victim == "launcher" else kids[int(victim)]
    os.kill(target, signal.SIGKILL)
    t_kill = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout * 3 + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    exit_s = time.monotonic() - t_kill
    deadline = time.monotonic() + 30
    alive = [c for c in kids if os.path.exists(f"/proc/{c}")]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [c for c in kids if os.path.exists(f"/proc/{c}") and _state(c) != "Z"]
    lines = _lines(err)
    return {
        "method": method,
        "mode": "launcher",
        "parties": len(kids),
        "victim": victim,
        "launcher_exit_s": round(exit_s, 1),
        "rc": proc.returncode,
        "stderr_lines": len(lines),
        "last": lines[-1][:200] if lines else "",
        "parties_left_after_30s": alive,
    }


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().split("\0")
    except OSError:
        return []


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["by-hand", "launcher"])
    ap.add_argument("method")
    ap.add_argument("victim")
    ap.add_argument("--after", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--signal", default="KILL", help="KILL (dead party) or STOP (silent party)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    rest = argv[cut + 1 :]
    if a.mode == "by-hand":
        res = by_hand(a.method, int(a.victim), a.after, a.timeout, rest, a.signal)
    else:
        res = launcher(a.method, a.victim, a.after, a.timeout, rest)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
