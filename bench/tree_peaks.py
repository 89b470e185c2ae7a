"""Peak resident memory of every process under a root process, read from Linux's /proc.

``python -m bench.tree_peaks PID`` polls the process tree under PID (each party process and
its Dask workers in a ``securevfl run ... --processes --engine dask``) once a second until PID
exits, and prints one JSON line per process: its pid, its command line (cut) and its VmHWM,
the kernel's high-water mark of its resident set (an exact peak, not a sample: the last
reading before the process exits is its peak; a process that lives under a second is missed).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _tree(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def _peak(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            hwm = next((ln for ln in f if ln.startswith("VmHWM:")), None)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    return (int(hwm.split()[1]) * 1024 if hwm else 0), cmd


def watch(
    root: int, every: float = 1.0, peaks: dict[int, tuple[int, str]] | None = None
) -> dict[int, tuple[int, str]]:
    """Each process's last VmHWM (bytes) and command line, polled until ``root`` exits
    (into ``peaks``, so a caller stopped early still has the readings so far)."""
    peaks = {} if peaks is None else peaks
    while os.path.exists(f"/proc/{root}"):
        for p in _tree(root):
            got = _peak(p)
            if got is not None and got[0] >= peaks.get(p, (0, ""))[0]:
                peaks[p] = got
        time.sleep(every)
    return peaks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m bench.tree_peaks PID", file=sys.stderr)
        return 2
    peaks: dict[int, tuple[int, str]] = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # killed: print what it read
    try:
        watch(int(args[0]), peaks=peaks)
    finally:
        for pid, (peak, cmd) in sorted(peaks.items()):
            print(json.dumps({"pid": pid, "peak_mib": round(peak / 2**20, 1), "cmd": cmd[:160]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
