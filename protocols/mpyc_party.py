"""The program each MPyC party process runs for ``run_block_products`` (one process per party).

Usage (spawned by the launcher, one process per party)::

    python -m protocols.mpyc_party --job DIR -I i -P host:port ... --no-log

It reads ``DIR/job.json`` (public: shapes, pairs, receiver, bit length) and ``DIR/in{i}.pkl``
(its OWN matrix and noise only), runs the SPMD program, and writes ``DIR/stats{i}.json`` (secure
phase seconds, peak RSS, bytes sent) and, at the receiver, ``DIR/out{i}.pkl`` (opened blocks).
``import mpyc.runtime`` parses ``sys.argv``: our own ``--job`` flag is removed first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import resource
import sys
import time


def peak_rss_kb() -> float:
    """Peak resident memory of THIS process in KiB: VmHWM (reset at exec), because getrusage's
    ru_maxrss of a fork+exec child still counts the parent's pages from before the exec."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def main() -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--job", required=True)
    ours, rest = ap.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    from mpyc.runtime import mpc  # noqa: PLC0415  (parses sys.argv on import)

    from protocols.shamir_products import Pair, block_products  # noqa: PLC0415

    with open(os.path.join(ours.job, "job.json")) as fh:
        job = json.load(fh)
    me = mpc.pid
    with open(os.path.join(ours.job, f"in{me}.pkl"), "rb") as fh:
        own = pickle.load(fh)
    shapes = {int(k): tuple(v) for k, v in job["shapes"].items()}
    pairs = [Pair(*p) for p in job["pairs"]]
    timeout = float(job["timeout"])

    trace = {} if job.get("trace") else None

    async def program():
        await mpc.start()
        t0 = time.perf_counter()
        res = await block_products(
            mpc,
            me=me,
            shapes=shapes,
            pairs=pairs,
            matrix=own["matrix"],
            noises=own["noises"],
            receiver=job["receiver"],
            impl=job["impl"],
            trace=trace,
        )
        secure_s = time.perf_counter() - t0
        nbytes = {
            p.pid: p.protocol.nbytes_sent
            for p in mpc.parties
            if p.pid != me and p.protocol is not None
        }
        await mpc.shutdown()
        return res, secure_s, nbytes

    try:
        res, secure_s, nbytes = mpc.run(asyncio.wait_for(program(), timeout))
    except TimeoutError:
        print(f"party {me}: secure phase exceeded {timeout:g} s", file=sys.stderr)
        return 3
    if res is not None:
        with open(os.path.join(ours.job, f"out{me}.pkl"), "wb") as fh:
            pickle.dump(res, fh)
    if trace is not None:
        with open(os.path.join(ours.job, f"trace{me}.pkl"), "wb") as fh:
            pickle.dump(trace, fh)
    peak_kb = peak_rss_kb()
    with open(os.path.join(ours.job, f"stats{me}.json"), "w") as fh:
        json.dump({"secure_s": secure_s, "peak_rss_mb": peak_kb / 1024.0, "bytes_sent": nbytes}, fh)
    return 0


if __name__ == "__main__":
    if os.environ.get("SHAMIR_PROFILE"):
        import cProfile

        cProfile.run("rc = main()", os.environ["SHAMIR_PROFILE"] + str(os.getpid()))
        sys.exit(0)
    sys.exit(main())
