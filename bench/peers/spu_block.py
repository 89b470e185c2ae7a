"""Peer for bench/secure_products_bench.py, run in a SEPARATE venv (spu 0.9.5 needs numpy < 2):
``python3 -m venv /tmp/spuenv && /tmp/spuenv/bin/pip install spu==0.9.5 'numpy<2'``, then
``OMP_THREAD_LIMIT=1 /tmp/spuenv/bin/python bench/peers/spu_block.py N [REPS]`` (without the
thread limit libspu's matrix threads spin on a 2-core machine). Not imported by securevfl.

SPU 0.9.5 ABY3 (3 processes on loopback, FM64, 18 fraction bits) computing the FM-VFL block
[1, X_0]^T X_1 + N (21 x 20): party 0 holds [1, X_0] and N, party 1 X_1, opened to party 2.
Timed from a barrier after compilation: input sharing (make_shares + send), the secure product
(rt.run), opening (shares to party 2, reconstruct). Usage: spu_block.py N [REPS]"""

import os

os.environ.setdefault("OMP_THREAD_LIMIT", "1")
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
    for _ in range(reps):
        rt = api.Runtime(lctx, config)
        lctx.barrier()
        t0 = time.perf_counter()
        c0 = time.process_time()
        for owner, x, name in ((0, A, "a"), (1, B, "b"), (0, N, "nz")):
            if rank == owner:
                shares = io.make_shares(x, SEC)
                for r in range(3):
                    if r != rank:
                        lctx.send(r, pickle.dumps((shares[r].meta, list(shares[r].share_chunks))))
                mine = shares[rank]
            else:
                meta, chunks = pickle.loads(lctx.recv(owner))
                mine = libspu.Share()
                mine.meta, mine.share_chunks = meta, chunks
            rt.set_var(name, mine)
        t1 = time.perf_counter()
        rt.run(exe)
        t2 = time.perf_counter()
        out = rt.get_var("out")
        if rank != 2:
            lctx.send(2, pickle.dumps((out.meta, list(out.share_chunks))))
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
    q.put((rank, times, err if rank == 2 else None, rss))


def main():
    n = int(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
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


if __name__ == "__main__":
    mp.set_start_method("spawn")
    main()
