"""Run perf jobs (bench.perf_jobs): our command and a peer library's, interleaved, ratio of medians.

Per job: ensure the peer's environment (bench.peer_envs), then ``runs`` rounds of (ours, theirs),
each a fresh process from the repository root with its own timeout, so that load drifting on a
shared machine hits both sides alike. Each command prints one JSON object as the last line of its
stdout (``seconds``, ``peak_mb``, ``bytes``, ``version``, ``exact``, ``detail``); a run that exits
non-zero, times out or prints no such line is recorded as failed with its stderr tail, never given
a number. Ratio = peer median seconds / our median seconds; ``met`` is judged only when every run
of both sides succeeded. One line per job goes to OUT/perf.jsonl (a rerun of a job replaces it),
with the machine, the load average before and after each run and both commands as run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.peer_envs import PeerPython, ensure_peer
from bench.perf_jobs import PeerEnv, PerfJob, load_envs
from bench.results_file import OutputLock

ROOT = Path(__file__).resolve().parent.parent
PERF_FILE = "perf.jsonl"
SIDES = ("ours", "theirs")
TAIL_CHARS = 1500
Log = Callable[[str], None]


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages (what /proc/loadavg says)."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """What the timings were taken on."""
    cpu = platform.processor() or platform.machine()
    mem_gb = None
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in cpuinfo.splitlines()
                if ln.startswith("model name")
            ),
            cpu,
        )
        mem = Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]
        mem_gb = round(int(mem) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass  # not Linux: the platform's own words
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
    }


def parse_result(stdout: str) -> dict[str, Any]:
    """The last non-empty stdout line as the interface's JSON object (ValueError saying why not)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("no output on stdout (the last line must be one JSON object)")
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ValueError(f"the last stdout line is not JSON: {lines[-1][:200]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"the last stdout line must be a JSON object, got {lines[-1][:200]!r}")
    sec = obj.get("seconds")
    if (
        isinstance(sec, bool)
        or not isinstance(sec, (int, float))
        or not math.isfinite(sec)
        or sec <= 0
    ):
        raise ValueError(f"seconds must be a finite number > 0, got {sec!r}")
    checks = (
        ("peak_mb", (int, float), None),
        ("bytes", (int,), None),
        ("version", (str,), ""),
        ("exact", (bool,), None),
        ("detail", (dict,), {}),
    )
    out: dict[str, Any] = {"seconds": float(sec)}
    for key, kinds, default in checks:
        v = obj.get(key, default)
        bad_bool = isinstance(v, bool) and bool not in kinds
        if v is not None and (bad_bool or not isinstance(v, kinds)):
            raise ValueError(f"{key} must be {kinds[0].__name__} or null, got {v!r}"[:200])
        out[key] = v
    return out


def expand(cmd: tuple[str, ...], peer_python: str) -> list[str]:
    return [
        a.replace("{python}", sys.executable).replace("{peer_python}", peer_python) for a in cmd
    ]


def _kill(proc: subprocess.Popen) -> None:
    """End a run and every process it started (its own session, so its own group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended meanwhile


def run_command(argv: list[str], timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    """One run: its parsed result, or ``failed`` with the reason and stderr's tail."""
    rec: dict[str, Any] = {"load_before": loadavg()}
    t0 = time.perf_counter()
    try:  # a session of its own: a timeout kills the parties the command started too
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        return rec | {"failed": f"cannot start: {exc}", "load_after": loadavg()}
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        stdout, stderr = proc.communicate()
        rec["failed"] = f"timed out after {timeout_s:g} s"
    except BaseException:  # Ctrl-C reaches only our session: end the run's processes too
        _kill(proc)
        raise
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    rec["load_after"] = loadavg()
    rec["rc"] = proc.returncode
    if "failed" not in rec:
        try:
            if proc.returncode != 0:
                raise ValueError(f"exit code {proc.returncode}")
            rec.update(parse_result(stdout))
        except ValueError as exc:
            rec["failed"] = str(exc)
    if "failed" in rec:
        rec["stderr_tail"] = stderr[-TAIL_CHARS:]
    return rec


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side: median seconds of its successful runs, largest peak, bytes, versions."""
    ok = [r for r in runs if "failed" not in r]
    peaks = [r["peak_mb"] for r in ok if r.get("peak_mb") is not None]
    sizes = [r["bytes"] for r in ok if r.get("bytes") is not None]
    exact = [r["exact"] for r in ok if r.get("exact") is not None]
    return {
        "runs": len(runs),
        "ok": len(ok),
        "median_s": statistics.median(r["seconds"] for r in ok) if ok else None,
        "seconds": [r["seconds"] for r in ok],
        "peak_mb": max(peaks) if peaks else None,
        "bytes": int(statistics.median(sizes)) if sizes else None,
        "version": ", ".join(dict.fromkeys(r["version"] for r in ok if r.get("version"))) or None,
        "exact": all(exact) if exact else None,
    }


def verdict(job: PerfJob, ours: dict[str, Any], theirs: dict[str, Any]) -> tuple[Any, Any]:
    """(ratio, met): ratio of medians when both sides have one; met only when no run failed and
    our output was not found wrong (a fast wrong answer meets no goal)."""
    if not ours["median_s"] or not theirs["median_s"]:
        return None, None
    ratio = theirs["median_s"] / ours["median_s"]
    complete = ours["ok"] == ours["runs"] and theirs["ok"] == theirs["runs"]
    judged = job.goal is not None and complete and ours["exact"] is not False
    met = ratio >= job.goal if judged else None
    return ratio, met


def run_job(job: PerfJob, peer: PeerPython, runs: int, log: Log) -> dict[str, Any]:
    """``runs`` rounds of (ours, theirs), interleaved; the job's perf.jsonl record."""
    argv = {"ours": expand(job.ours, peer.python), "theirs": expand(job.theirs, peer.python)}
    ours_env = dict(os.environ)
    theirs_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # peer's own packages
    envs = {"ours": ours_env, "theirs": theirs_env}
    done: dict[str, list[dict[str, Any]]] = {"ours": [], "theirs": []}
    order: list[str] = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    for i in range(runs):
        for side in SIDES:
            rec = run_command(argv[side], job.timeout_s, envs[side])
            done[side].append(rec)
            order.append(side)
            what = rec.get("failed") or f"{rec['seconds']:.3f} s"
            log(
                f"perf {job.name}: run {i + 1}/{runs} {side}: {what} "
                f"(load {rec['load_before'][0]:.2f} -> {rec['load_after'][0]:.2f})"
            )
    ours, theirs = summarize(done["ours"]), summarize(done["theirs"])
    ratio, met = verdict(job, ours, theirs)
    return {
        "job": job.name,
        "title": job.title,
        "goal": job.goal,
        "peer": job.peer,
        "source": job.source,
        "started": started,
        "machine": machine(),
        "commands": {side: " ".join(argv[side]) for side in SIDES},
        "peer_env": {"python": peer.python, "version": peer.version, "how": peer.how},
        "order": order,
        "ours": ours | {"per_run": done["ours"]},
        "theirs": theirs | {"per_run": done["theirs"]},
        "ratio": ratio,
        "met": met,
    }


def read_perf(out: Path) -> list[dict[str, Any]]:
    """OUT/perf.jsonl's job records (a torn or foreign line is skipped)."""
    path = out / PERF_FILE
    if not path.is_file():
        return []
    recs = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("job"), str):
            recs.append(rec)
    return recs


def write_job(out: Path, rec: dict[str, Any]) -> None:
    """Put ``rec`` in OUT/perf.jsonl in place of an earlier record of the same job."""
    kept = [r for r in read_perf(out) if r["job"] != rec["job"]] + [rec]
    tmp = out / (PERF_FILE + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    tmp.replace(out / PERF_FILE)


def prepare_peers(
    jobs: list[PerfJob], envs: dict[str, PeerEnv] | None = None, log: Log = print
) -> dict[str, PeerPython]:
    """Every peer environment the jobs need, installed when missing (PeerEnvError if not)."""
    envs = load_envs() if envs is None else envs
    peers = {}
    for name in dict.fromkeys(j.peer for j in jobs):
        peers[name] = peer = ensure_peer(envs[name], log)
        log(f"perf: peer {name!r} is {peer.version} ({peer.how})")
    return peers


def run_perf(
    jobs: list[PerfJob],
    out: Path,
    *,
    runs: int | None = None,
    envs: dict[str, PeerEnv] | None = None,
    peers: dict[str, PeerPython] | None = None,
    log: Log = print,
) -> list[str]:
    """Run ``jobs`` (each ``runs`` times per side, else its own ``runs``); return the failures.

    ``peers``: from :func:`prepare_peers`, else made ready here before the first timing."""
    peers = prepare_peers(jobs, envs, log) if peers is None else peers
    out.mkdir(parents=True, exist_ok=True)
    errors = []
    with OutputLock(out):
        for job in jobs:
            rec = run_job(job, peers[job.peer], runs or job.runs, log)
            write_job(out, rec)
            for side in SIDES:
                failed = rec[side]["runs"] - rec[side]["ok"]
                if failed:
                    errors.append(
                        f"perf {job.name}: {failed} of {rec[side]['runs']} {side} runs failed"
                    )
    return errors
