"""Peer for bench/secure_products_bench.py, run in a SEPARATE venv (spu 0.9.5 needs numpy < 2):
``python3 -m venv /tmp/spuenv && /tmp/spuenv/bin/pip install spu==0.9.5 'numpy<2'``, then
``OMP_THREAD_LIMIT=1 /tmp/spuenv/bin/python bench/peers/spu_block.py N [REPS]`` (without the
thread limit libspu's matrix threads spin on a 2-core machine). Not imported by securevfl.

SPU 0.9.5 ABY3 (3 processes on loopback, FM64, 18 fraction bits) computing the FM-VFL block
[1, X_0]^T X_1 + N (21 x 20): party 0 holds [1, X_0] and N, party 1 X_1, opened to party 2.
Timed from a barrier after compilation: input sharing (make_shares + send), the secure product
(rt.run), opening (shares to party 2, reconstruct). Usage: spu_block.py N [REPS] [--json]; with
--json one run, and the last stdout line is the perf-job JSON (bench/suites/perf.d/): seconds =
the slowest party's timed region, peak_mb = the largest party's VmHWM, bytes = the payload bytes
this script sends itself (input shares, output shares; rt.run's own traffic is not exposed by
libspu's Python link API, so "bytes" is null and these go to detail)."""

import os

os.environ.setdefault("OMP_THREAD_LIMIT", "1")
import json
import multiprocessing as mp
import pickle
import socket
import sys
import time

import numpy as np


def party(rank, n, ports, reps, q):
    import spu.api as api
    import spu.libspu as libspu
    from spu.utils import frontend as fe

    desc = libspu.link.Desc()
    for r in range(3):
        desc.add_party(f"id_{r}", f"127.0.0.1:{ports[r]}")
    desc.recv_timeout_ms = 600_000
    desc.http_timeout_ms = 600_000
    lctx = libspu.link.create_brpc(desc, rank)
    config = libspu.RuntimeConfig(protocol=libspu.ProtocolKind.ABY3, field=libspu.FieldType.FM64)
    config.fxp_fraction_bits = 18
    io = api.Io(3, config)
    SEC = libspu.Visibility.VIS_SECRET

    def f(a, b, nz):
        return a.T @ b + nz

    exe, _ = fe.compile(
        fe.Kind.JAX,
        f,
        [np.zeros((n, 21)), np.zeros((n, 20)), np.zeros((21, 20))],
        {},
        ["a", "b", "nz"],
        [SEC] * 3,
        lambda outs: ["out"],
    )
    rng = np.random.default_rng(7)
    A = np.hstack([np.ones((n, 1)), rng.uniform(-1, 1, (n, 20))])
    B = rng.uniform(-1, 1, (n, 20))
    N = rng.laplace(0, 1.0, (21, 20))
    times = []
    sent = 0  # payload bytes this party sent itself (pickled shares), per run
    for _ in range(reps):
        rt = api.Runtime(lctx, config)
        lctx.barrier()
        t0 = time.perf_counter()
        c0 = time.process_time()
        # every owner shares all its inputs first, then every party receives the others' (the
        # two data owners share at the same time, as SecretFlow places each party's inputs
        # concurrently; one after the other, party 1 waited for all of party 0's shares)
        inputs = ((0, A, "a"), (1, B, "b"), (0, N, "nz"))
        mine = {}
        for owner, x, name in inputs:
            if rank == owner:
                shares = io.make_shares(x, SEC)
                for r in range(3):
                    if r != rank:
                        msg = pickle.dumps((shares[r].meta, list(shares[r].share_chunks)))
                        sent += len(msg)
                        lctx.send(r, msg)
                mine[name] = shares[rank]
        for owner, _, name in inputs:
            if rank != owner:
                meta, chunks = pickle.loads(lctx.recv(owner))
                mine[name] = libspu.Share()
                mine[name].meta, mine[name].share_chunks = meta, chunks
        for _, _, name in inputs:
            rt.set_var(name, mine[name])
        t1 = time.perf_counter()
        rt.run(exe)
        t2 = time.perf_counter()
        out = rt.get_var("out")
        if rank != 2:
            msg = pickle.dumps((out.meta, list(out.share_chunks)))
            sent += len(msg)
            lctx.send(2, msg)
            res = None
        else:
            got = {2: out}
            for r in (0, 1):
                meta, chunks = pickle.loads(lctx.recv(r))
                s = libspu.Share()
                s.meta, s.share_chunks = meta, chunks
                got[r] = s
            res = io.reconstruct([got[0], got[1], got[2]])
        t3 = time.perf_counter()
        times.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2, time.process_time() - c0))
        if rank == 2:
            err = float(np.abs(res - (A.T @ B + N)).max())
    rss = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024
    q.put((rank, times, err if rank == 2 else None, rss, sent // reps))


def main():
    args = [a for a in sys.argv[1:] if a != "--json"]
    as_json = len(args) < len(sys.argv) - 1
    if not args or not args[0].isdigit() or int(args[0]) < 1:
        print(
            f"usage: spu_block.py N [REPS] [--json]; N must be a positive integer, got {args}",
            file=sys.stderr,
        )
        return 2
    n = int(args[0])
    reps = 1 if as_json else (int(args[1]) if len(args) > 1 else 3)
    ports = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    q = mp.Queue()
    ps = [mp.Process(target=party, args=(r, n, ports, reps, q)) for r in range(3)]
    [p.start() for p in ps]
    out = [q.get(timeout=1800) for _ in ps]
    [p.join() for p in ps]
    out.sort()
    for k in range(reps):
        slow = max(o[1][k][0] for o in out)
        ph = [max(o[1][k][i] for o in out) for i in (1, 2, 3)]
        cpu = [round(o[1][k][4], 3) for o in out]
        print(
            f"spu aby3 n={n} rep={k} slowest_total_s={slow:.3f} share={ph[0]:.3f} "
            f"run={ph[1]:.3f} open={ph[2]:.3f} cpu_s={cpu}"
        )
    print(f"max_abs_err={out[2][2]:.2e} peak_rss_mb={[round(o[3]) for o in out]}")
    if as_json:
        import spu  # noqa: PLC0415

        k = 0
        rec = {
            "seconds": max(o[1][k][0] for o in out),
            "peak_mb": max(o[3] for o in out),
            "bytes": None,
            "version": f"spu {spu.__version__} (ABY3, FM64, fxp 18 bits)",
            # fixed point (18 fraction bits, truncated products): approximate by design, so not
            # "exact"; its error against the float64 product is in detail.max_abs_err
            "exact": None,
            "detail": {
                "n": n,
                "phases_s": {
                    ph: max(o[1][k][i] for o in out)
                    for i, ph in ((1, "input sharing"), (2, "run"), (3, "opening"))
                },
                "cpu_s": [o[1][k][4] for o in out],
                "peak_mb": [o[3] for o in out],
                "script_sent_bytes": [o[4] for o in out],
                "max_abs_err": out[2][2],
                "omp_thread_limit": os.environ.get("OMP_THREAD_LIMIT"),
            },
        }
        print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    mp.set_start_method("spawn")
    sys.exit(main())
