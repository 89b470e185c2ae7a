"""Cost of one secure-aggregation round: this branch's protocol vs another version of it.

    python -m bench.secagg_cost                        # this branch only
    git show main:protocols/secagg.py > /tmp/secagg_main.py
    python -m bench.secagg_cost --baseline /tmp/secagg_main.py   # and main's protocol 0

Per round (one aggregation, per-batch keys): mean CPU ms per party (mask, and unmasking answer),
server ms (check + unmask), and bytes on the wire summed over every message of the round
(masked values, unmasking requests, answers). Values are PBM-like: integers in [0, b], b = 64.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from types import ModuleType

import numpy as np

from protocols import secagg


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("secagg_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _setup(mod: ModuleType, M: int, bits: int, new: bool):
    srv = mod.SecAggServer(M, bits=bits)
    parties = [mod.SecAggParty(i, M, bits=bits) for i in range(M)]
    table = srv.relay({p.index: p.public_key for p in parties})
    for p in parties:
        if new:
            p.agree(table, srv.session, srv.public_key)
        else:
            p.agree(table, srv.session)
    return srv, parties


def measure(mod: ModuleType, M: int, n: int, *, new: bool, drop: int = 0, reps: int = 3) -> dict:
    b = 64
    bits = secagg.modulus_bits(b * M)
    srv, parties = _setup(mod, M, bits, new)
    rng = np.random.default_rng(0)
    q = rng.integers(0, b + 1, size=(M, n), dtype=np.int64).astype(np.uint16)
    gone = set(range(1, 1 + drop))
    best: dict = {}
    for rep in range(reps):
        t0 = time.process_time()
        msgs = {
            p.index: p.mask(q[p.index], round_id=rep, batch_id=0)
            for p in parties
            if p.index not in gone
        }
        t_mask = (time.process_time() - t0) / len(msgs)
        nbytes = sum(len(m) for m in msgs.values())
        t_resp = 0.0
        if new:
            t0 = time.process_time()
            checks = srv.collect(msgs, round_id=rep, batch_id=0, count=n)
            vouches = {v: parties[v].vouch(c) for v, c in checks.items()}
            reqs = srv.requests(vouches)
            t_srv = time.process_time() - t0  # with the vouches (the consistency round)
            t0 = time.process_time()
            answers = {v: parties[v].respond(r) for v, r in reqs.items()}
            t_resp = (time.process_time() - t0) / len(answers)
            t0 = time.process_time()
            total = srv.finish(answers)
            t_srv += time.process_time() - t0
            nbytes += sum(map(len, reqs.values())) + sum(map(len, answers.values()))
        else:
            t0 = time.process_time()
            total = srv.unmask(msgs, round_id=rep, batch_id=0, count=n)
            t_srv = time.process_time() - t0
        alive = [k for k in range(M) if k not in gone]
        assert np.array_equal(total, q[alive].astype(np.uint64).sum(axis=0))
        row = {"mask_ms": t_mask * 1e3, "answer_ms": t_resp * 1e3, "server_ms": t_srv * 1e3}
        best = {k: min(v, best.get(k, v)) for k, v in row.items()}
        best["bytes"] = nbytes
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="path of another protocols/secagg.py (e.g. main's)")
    ap.add_argument("--parties", type=int, nargs="+", default=[5, 16, 64])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1600, 160_000])
    a = ap.parse_args(argv)
    base = _load(a.baseline) if a.baseline else None
    print("| M | values | protocol | mask ms/party | answer ms/party | server ms | bytes/round |")
    print("|---|---|---|---|---|---|---|")
    for n in a.sizes:
        for M in a.parties:
            rows = []
            if base is not None:
                rows.append(("main (protocol 0)", measure(base, M, n, new=False)))
            rows.append(("auth + dropout", measure(secagg, M, n, new=True)))
            drop = max(1, (M - secagg.default_threshold(M)) // 2)
            dropped = measure(secagg, M, n, new=True, drop=drop)
            rows.append((f"auth + dropout, {drop} drop", dropped))
            for name, r in rows:
                print(
                    f"| {M} | {n} | {name} | {r['mask_ms']:.2f} | {r['answer_ms']:.2f} | "
                    f"{r['server_ms']:.2f} | {r['bytes']:,} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
