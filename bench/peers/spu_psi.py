"""Peer for ``securevfl align``: SecretFlow SPU 0.9.5's two-party PSI (``spu.psi``) on the CSVs of
bench/psi_bench.py. Runs ONLY in the SPU peer environment (spu 0.9.5 needs numpy < 2); never
imported by securevfl or by a test:

    /path/to/spu-venv/bin/python bench/peers/spu_psi.py N [--protocol ecdh|rr22] [--json]

Two processes on loopback (brpc link), party 0 the receiver with the result broadcast, so both
parties write their aligned rows as ``securevfl align`` does. The inputs are the same CSVs as
ours (``bench.psi_bench.make_csvs``, imported from the repository: that module needs only the
standard library and numpy, so no project package enters this venv; N IDs each, ``overlap * N``
shared, seed 0). ECDH uses CURVE_25519 (SPU's default ECDH curve); RR22 its
default (not the low-communication mode). ``keys_unique=True``: SPU's fastest path (ours checks
for duplicates). Timed per party from a link barrier (after connecting) to the end of
``psi_execute`` (reading the CSV, PSI, writing the aligned CSV); the figure is the slower
party's. The output is checked: same size and same IDs as the plain intersection, in the same
(sorted) order at both parties.

The last stdout line is the perf-job JSON (bench/suites/perf.d/psi.toml). ``bytes`` is null:
SPU's Python link exposes no byte counter.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for bench.psi_bench
from bench.psi_bench import make_csvs  # noqa: E402  (stdlib + numpy only: the same CSV bytes)


def _peak_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) / 1024
    return float("nan")


def _party(rank: int, ports: list[int], src: str, dst: str, protocol: str, q: mp.Queue) -> None:
    import spu.libspu as libspu
    import spu.psi as psi

    desc = libspu.link.Desc()
    for r, port in enumerate(ports):
        desc.add_party(f"id_{r}", f"127.0.0.1:{port}")
    desc.recv_timeout_ms = 3_600_000
    desc.http_timeout_ms = 3_600_000
    lctx = libspu.link.create_brpc(desc, rank)
    if protocol == "ecdh":
        proto = psi.PsiProtocolConfig(
            protocol=psi.PsiProtocol.PROTOCOL_ECDH,
            receiver_rank=0,
            broadcast_result=True,
            ecdh_params=psi.EcdhParams(curve=psi.EllipticCurveType.CURVE_25519),
        )
    else:
        proto = psi.PsiProtocolConfig(
            protocol=psi.PsiProtocol.PROTOCOL_RR22,
            receiver_rank=0,
            broadcast_result=True,
            rr22_params=psi.Rr22Rarams(low_comm_mode=False),
        )
    config = psi.PsiExecuteConfig(
        protocol_conf=proto,
        input_params=psi.InputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
            path=src,
            selected_keys=["cid"],
            keys_unique=True,
        ),
        output_params=psi.OutputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV, path=dst, disable_alignment=False
        ),
    )
    lctx.barrier()
    t0 = time.perf_counter()
    c0 = time.process_time()
    report = psi.psi_execute(config, lctx)
    wall = time.perf_counter() - t0
    q.put(
        {
            "rank": rank,
            "seconds": wall,
            "cpu_s": time.process_time() - c0,
            "peak_mb": _peak_mb(),
            "intersection": report.intersection_count,
            "original": report.original_count,
        }
    )
    lctx.stop_link()


def _free_ports(k: int) -> list[int]:
    socks = [socket.socket() for _ in range(k)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _ids(path: Path) -> list[str]:
    with path.open(newline="") as f:
        r = csv.reader(f)
        header = next(r)
        j = header.index("cid")
        return [row[j] for row in r if row]


def run(n: int, overlap: float, protocol: str) -> dict:
    """One timed SPU PSI on fresh CSVs; the perf-job record."""
    import spu

    with tempfile.TemporaryDirectory(prefix="spu-psi-") as tmp:
        a, b = make_csvs(n, overlap, Path(tmp))
        outs = [str(Path(tmp) / f"out{k}.csv") for k in range(2)]
        ports = _free_ports(2)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        load = os.getloadavg()
        procs = [
            ctx.Process(target=_party, args=(k, ports, str(p), outs[k], protocol, q))
            for k, p in enumerate((a, b))
        ]
        for p in procs:
            p.start()
        res = sorted((q.get(timeout=3600) for _ in procs), key=lambda r: r["rank"])
        for p in procs:
            p.join()
            if p.exitcode:
                raise SystemExit(f"SPU party exited with code {p.exitcode}")
        got = [_ids(Path(o)) for o in outs]
        start = n - round(overlap * n)
        expect = sorted(f"C{i:09d}" for i in range(start, n))
        exact = got[0] == got[1] and sorted(got[0]) == expect and len(got[0]) == len(expect)
        sorted_out = got[0] == sorted(got[0])
    return {
        "seconds": round(max(r["seconds"] for r in res), 3),
        "peak_mb": round(max(r["peak_mb"] for r in res), 1),
        "bytes": None,
        "version": f"spu {spu.__version__} (psi {protocol.upper()}"
        + (", CURVE_25519)" if protocol == "ecdh" else ")"),
        "exact": bool(exact),
        "detail": {
            "n": n,
            "overlap": overlap,
            "kept": len(got[0]),
            "output_sorted_by_id": sorted_out,
            "party_seconds": [round(r["seconds"], 3) for r in res],
            "party_cpu_s": [round(r["cpu_s"], 2) for r in res],
            "party_peak_mb": [round(r["peak_mb"], 1) for r in res],
            "loadavg_start": [round(x, 2) for x in load],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "cores": os.cpu_count(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="IDs per party")
    ap.add_argument("--protocol", choices=("ecdh", "rr22"), default="ecdh")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    a = ap.parse_args(argv)
    if a.n < 1 or not 0.0 <= a.overlap <= 1.0:
        print(f"n must be >= 1 and overlap in [0, 1], got {a.n}, {a.overlap}", file=sys.stderr)
        return 2
    rec = run(a.n, a.overlap, a.protocol)
    if not a.json:
        print(f"spu.psi {a.protocol}: {rec['seconds']} s, kept {rec['detail']['kept']}")
    print(json.dumps(rec))
    return 0 if rec["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
