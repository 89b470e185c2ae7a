"""The program each MPyC party process runs for ``run_block_products`` (one per party).

Usage (spawned by the launcher, one process per party)::

    python -m protocols.mpyc_party --job-json JSON -I i -P host:port ... --no-log  < inputs

The job (public: shapes, pairs, receiver, timeout) is on the command line; its OWN matrix and
noise and the run's key arrive on stdin (the typed format of :mod:`protocols.wire`, never a
file). It connects with :func:`protocols.mpyc_net.secure_start` (loopback only), agrees on the job
and key with every peer (:func:`protocols.mpyc_net.handshake`), runs the SPMD program with MPyC's
messages encoded and decoded by that format instead of pickle, and writes its report
(secure-phase seconds, peak RSS, bytes sent, and at the receiver the opened blocks) to stdout.
``import mpyc.runtime`` parses ``sys.argv``: our own ``--job-json`` flag is removed first.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import sys

from protocols import wire
from protocols.frame_bounds import job_frame_limit
from protocols.mpyc_net import handshake, secure_start
from protocols.processes import die_with_parent
from protocols.wire import WireError, guard_mpyc_unpickling


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


def job_digest(job: dict) -> bytes:
    """What every party of one secure phase must agree on (the public job description)."""
    return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).digest()


def main() -> int:
    die_with_parent()
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--job-json", required=True)
    ours, rest = ap.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    job = json.loads(ours.job_json)
    own = wire.loads(sys.stdin.buffer.read())  # own inputs + the run key, from the launcher's pipe
    key = own.pop("key")
    from mpyc.runtime import mpc

    from protocols.shamir_launch import REPORT_MAGIC
    from protocols.shamir_products import secure_phase

    me = mpc.pid

    def refuse(reason: str) -> None:
        # MPyC decodes inside its own tasks; stop the party now, before anything else runs
        print(f"party {me}: {reason}", file=sys.stderr, flush=True)
        os._exit(3)

    # frames over what this job's shapes allow are refused from their header (not buffered)
    guard_mpyc_unpickling(refuse, max_bytes=job_frame_limit(job["shapes"]))
    timeout = float(job["timeout"])

    trace = {} if job.get("trace") else None

    if job["impl"] == "rns":
        from protocols.shamir_rns import warm_up  # noqa: PLC0415

        warm_up()

    async def program():
        await secure_start(mpc)
        await handshake(mpc, job_digest(job), key=key)
        res, rep = await secure_phase(
            mpc, job=job, matrix=own["matrix"], noises=own["noises"], trace=trace
        )
        await mpc.shutdown()
        return res, rep

    try:
        res, rep = mpc.run(asyncio.wait_for(program(), timeout))
    except TimeoutError:
        print(f"party {me}: secure phase exceeded {timeout:g} s", file=sys.stderr)
        return 3
    except (WireError, OSError) as exc:
        print(f"party {me}: {exc}", file=sys.stderr)
        return 3
    report = {"result": res, "trace": trace, "peak_rss_mb": peak_rss_kb() / 1024.0, **rep}
    sys.stdout.buffer.write(REPORT_MAGIC + wire.dumps(report))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    if os.environ.get("SHAMIR_PROFILE"):
        import cProfile

        cProfile.run("rc = main()", os.environ["SHAMIR_PROFILE"] + str(os.getpid()))
        sys.exit(0)
    sys.exit(main())
