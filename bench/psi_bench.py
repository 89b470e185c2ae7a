"""PSI throughput: ``python -m bench.psi_bench --sizes 10000,100000,1000000 --out bench-out/psi``.

For each size n, two party CSVs of n rows (an ID and one value column) sharing ``overlap * n``
IDs are aligned end to end as ``securevfl align`` does (read, PSI, write), each size in a fresh
process so its peak memory is its own. Appends one JSON line per run to OUT/results.jsonl and
prints a markdown table: seconds, CPU seconds (the process, its threads and any party processes),
bytes on the wire, peak resident memory (in-process: this process, both parties, the group
operations on threads; ``--processes``: the larger party process) and the load average at the
start (the machine may be shared).

``python -m bench.psi_bench --json --sizes 1000000`` runs one size and prints the perf-job line
(bench/suites/perf.d/psi.toml): seconds = reading both CSVs, PSI, writing both aligned CSVs (the
same region bench/peers/spu_psi.py times for SPU), peak RSS, metered bytes, and ``exact``: both
outputs hold exactly the plain intersection, in the same (sorted) order. ``--format parquet``
gives the parties the same rows as Parquet files (read through Arrow, written back as Parquet).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FORMATS = ("csv", "parquet")


def make_csvs(n: int, overlap: float, where: Path, fmt: str = "csv") -> tuple[Path, Path]:
    """Two party files of n rows; IDs 0..n-1 at party 0, n(1-overlap)..2n-n*overlap-1 at
    party 1. ``fmt`` "parquet": the same rows (a string ID, an int64 value) as Parquet files."""
    import numpy as np

    rng = np.random.default_rng(0)
    start = n - round(overlap * n)
    paths = []
    for k, ids in enumerate((np.arange(n), np.arange(start, start + n))):
        ids = ids[rng.permutation(n)]
        p = where / f"party{k}.{fmt}"
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            cols = {"cid": [f"C{i:09d}" for i in ids], f"v{k}": ids % 97}
            pq.write_table(pa.table(cols), p)
        else:
            with p.open("w") as f:
                f.write(f"cid,v{k}\n")
                f.writelines(f"C{i:09d},{i % 97}\n" for i in ids)
        paths.append(p)
    return paths[0], paths[1]


def _peak_kb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _out_ids(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=["cid"]).column("cid").to_pylist()
    with path.open() as f:
        next(f)
        return [line.split(",", 1)[0] for line in f]


def run_one(
    n: int, overlap: float, processes: bool, workers: int | None, fmt: str = "csv"
) -> dict[str, Any]:
    from securevfl.data.align_files import align_files

    with tempfile.TemporaryDirectory(prefix="psi-bench-") as tmp:
        a, b = make_csvs(n, overlap, Path(tmp), fmt)
        load = os.getloadavg()
        t0, c0 = time.perf_counter(), time.process_time()
        rec = align_files([a, b], "cid", Path(tmp) / "out", processes=processes, workers=workers)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        got = [_out_ids(Path(f)) for f in rec["files"]]
    start = n - round(overlap * n)
    expect = [f"C{i:09d}" for i in range(start, n)]  # zero-padded: text order is number order
    return {
        "exact": got[0] == got[1] == expect,
        "n": n,
        "format": fmt,
        "overlap": overlap,
        "runtime": rec["runtime"],
        "kept": rec["kept"],
        "seconds": round(wall, 2),
        # CPU seconds of the timed region, all threads of this process (in-process runtime)
        "cpu_s_timed": round(cpu, 2),
        "bytes_total": rec["comm"]["bytes_total"],
        # in-process: this process (both parties); --processes: the larger party process
        # (ru_maxrss of the waited-for children is the largest one's peak, in KiB on Linux)
        "peak_rss_mb": round(
            (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if processes else _peak_kb())
            / 1024,
            1,
        ),
        "launcher_peak_rss_mb": round(_peak_kb() / 1024, 1),
        # CPU seconds of this process and its workers: wall time on an idle machine is about
        # this over the cores, whatever else was running during the measurement
        "cpu_s": round(
            sum(
                r.ru_utime + r.ru_stime
                for r in (
                    resource.getrusage(resource.RUSAGE_SELF),
                    resource.getrusage(resource.RUSAGE_CHILDREN),
                )
            ),
            2,
        ),
        "workers": workers or os.cpu_count(),
        "cores": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in load],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }


def perf_record(r: dict[str, Any]) -> dict[str, Any]:
    """The perf-job line (bench/suites/perf.d/psi.toml) of one :func:`run_one` record."""
    import mpyc

    from protocols.psi import backend
    from securevfl.version import __version__

    detail = {
        k: v for k, v in r.items() if k not in ("seconds", "peak_rss_mb", "bytes_total", "exact")
    }
    detail["group"] = "X25519 (RFC 7748), hash SHA-256 to u"
    detail["x25519_backend"] = backend()[0]
    rt = "" if r["runtime"] == "inprocess" else f", MPyC {mpyc.__version__} transport"
    return {
        "seconds": r["seconds"],
        "peak_mb": r["peak_rss_mb"],
        "bytes": r["bytes_total"],
        "version": f"securevfl {__version__} (ECDH-PSI X25519, {backend()[0]}{rt})",
        "exact": r["exact"],
        "detail": detail,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.psi_bench", description=__doc__)
    ap.add_argument("--sizes", default="10000,100000,1000000", help="IDs per party, comma list")
    ap.add_argument("--overlap", type=float, default=0.5, help="shared share of IDs; default 0.5")
    ap.add_argument("--processes", action="store_true", help="one OS process per party")
    ap.add_argument("--workers", type=int, help="worker processes per party; default: cores")
    ap.add_argument(
        "--format",
        choices=FORMATS,
        default="csv",
        help="the parties' files: csv (default) or parquet (the same rows through Arrow)",
    )
    ap.add_argument("--out", default="bench-out/psi", help="directory for results.jsonl")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one size here
    ap.add_argument("--json", action="store_true", help="one size: print the perf-job JSON line")
    a = ap.parse_args(argv)
    if a.json:
        sizes = a.sizes.split(",")
        if len(sizes) != 1 or not sizes[0].isdigit() or int(sizes[0]) < 1:
            print(
                f"--json runs one size (a positive integer), got --sizes {a.sizes}", file=sys.stderr
            )
            return 2
        rec = run_one(int(sizes[0]), a.overlap, a.processes, a.workers, a.format)
        print(json.dumps(perf_record(rec)))
        return 0
    if a.one is not None:
        print(json.dumps(run_one(a.one, a.overlap, a.processes, a.workers, a.format)))
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        "| IDs per party | kept | runtime | seconds | CPU s | bytes | peak RSS MB "
        "| load avg (1 min) |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in a.sizes.split(",")):
        cmd = [sys.executable, "-m", "bench.psi_bench", "--one", str(n)]
        cmd += ["--overlap", str(a.overlap), "--format", a.format]
        if a.processes:
            cmd.append("--processes")
        if a.workers:
            cmd += ["--workers", str(a.workers)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        with (out / "results.jsonl").open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(
            f"| {n:,} | {r['kept']:,} | {r['runtime']} | {r['seconds']:.2f} | {r['cpu_s']:.1f} | "
            f"{r['bytes_total']:,} | {r['peak_rss_mb']:.0f} "
            f"| {r['loadavg_start'][0]:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
