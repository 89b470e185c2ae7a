"""Run secure block products with local MPyC party processes (through :mod:`protocols.processes`,
the one launcher of local process groups).

Each process (:mod:`protocols.mpyc_party`) receives only its own matrix and its own noise, over
its stdin (never a file: a killed launcher leaves no party's inputs on disk), plus the run's
key; the public job description is on its command line. Each writes its report to stdout.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocols import processes, wire
from protocols.processes import free_ports
from protocols.shamir_products import (
    IMPLS,
    LEGACY_IMPLS,
    MAX_ROWS,
    Pair,
    ShamirProtocolError,
    ShamirTimeoutError,
    check_inputs,
    choose_frac_bits,
    encode_noise,
)
from protocols.shamir_rns import primes_for_job

REPORT_MAGIC = b"SVFL-REPORT\n"
__all__ = ["free_ports"]


@dataclass
class PhaseStats:
    """What each MPyC party measured about itself."""

    secure_s: dict[int, float] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)
    wall_s: float = 0.0
    peak_rss_mb: dict[int, float] = field(default_factory=dict)
    bytes_sent: dict[int, dict[int, int]] = field(default_factory=dict)  # [src][dst]
    frac_bits: int = 0
    trace: dict[int, dict[str, Any]] = field(default_factory=dict)  # demo: each party's shares
    phases_s: dict[int, dict[str, float]] = field(default_factory=dict)  # [party][phase]
    sent: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)  # [src] messages

    def phases_bytes(self) -> dict[str, int]:
        """Payload bytes per phase, all parties."""
        out: dict[str, int] = {}
        for msgs in self.sent.values():
            for phase, _, nb in msgs:
                out[phase] = out.get(phase, 0) + nb
        return out


def job_for(
    shapes: dict[int, tuple[int, int]],
    pairs: Sequence[Pair],
    *,
    receiver: int,
    impl: str,
    frac_bits: int,
    noise_bound: float,
    n_max: int = MAX_ROWS,
) -> dict[str, Any]:
    """The public job description every party agrees on; checks the field sizing premises."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {list(IMPLS)}, got {impl!r}")
    n = next(iter(shapes.values()))[0] if shapes else 0
    job = {
        "shapes": {str(k): list(v) for k, v in shapes.items()},
        "pairs": [[p.a, p.b, p.noise_party] for p in pairs],
        "receiver": receiver,
        "impl": impl,
    }
    if impl in LEGACY_IMPLS:
        if n > n_max:
            raise ValueError(
                f"rows must be <= {n_max} (the range the field was sized for), got {n}"
            )
        if frac_bits > choose_frac_bits(n_max, noise_bound):
            raise ValueError(
                f"frac_bits must be <= {choose_frac_bits(n_max, noise_bound)} for "
                f"n_max {n_max} and noise_bound {noise_bound:.3g}, got {frac_bits}"
            )
    else:
        if (n + noise_bound) * 4.0**frac_bits >= 2.0**62:
            raise ValueError(
                f"(rows + noise_bound) * 4**frac_bits must be < 2**62 (int64 results), got "
                f"({n} + {noise_bound:.3g}) * 4**{frac_bits}"
            )
        job["primes"] = list(primes_for_job(n, frac_bits, noise_bound))
    return job


def run_block_products(
    matrices: dict[int, np.ndarray],
    noises: dict[int, np.ndarray],
    pairs: Sequence[Pair],
    *,
    n_parties: int,
    receiver: int,
    frac_bits: int,
    noise_bound: float,
    impl: str = "vectorized",
    timeout: float = 120.0,
    n_max: int = MAX_ROWS,
    trace: bool = False,
    block_rows: int | None = None,
) -> tuple[dict[int, np.ndarray], PhaseStats]:
    """Spawn ``n_parties`` MPyC processes, run the secure phase, return the opened blocks.

    Raises :class:`ShamirProtocolError` if a party fails and :class:`ShamirTimeoutError` if the
    phase does not finish within ``timeout``.
    """
    if n_parties < 3:
        raise ValueError(f"n_parties must be >= 3 (Shamir threshold t >= 1), got {n_parties}")
    n = check_inputs(matrices, frac_bits, n_max if impl in LEGACY_IMPLS else 2**62)
    shapes = {i: (n, M.shape[1]) for i, M in matrices.items()}
    job = job_for(
        shapes,
        pairs,
        receiver=receiver,
        impl=impl,
        frac_bits=frac_bits,
        noise_bound=noise_bound,
        n_max=n_max,
    )
    job.update(timeout=timeout, trace=trace)
    if block_rows is not None:  # impl rns: the rows streamed per block (default: its own)
        job["block_rows"] = int(block_rows)
    enc_noise = {j: encode_noise(noises[j], frac_bits, noise_bound) for j in noises}
    addresses = [f"127.0.0.1:{p}" for p in free_ports(n_parties)]
    key = secrets.token_bytes(32)
    t0 = time.perf_counter()
    procs = []
    for i in range(n_parties):  # a party is handed only its own inputs
        own = {
            "matrix": matrices.get(i),
            "noises": {j: v for j, v in enc_noise.items() if pairs[j].noise_party == i},
        }
        procs.append(spawn_party(job, own, i, addresses, key))
    reports = wait_all(procs, timeout + 10.0)
    stats = PhaseStats(wall_s=time.perf_counter() - t0, frac_bits=frac_bits)
    for i, rep in enumerate(reports):
        stats.secure_s[i] = rep["secure_s"]
        stats.cpu_s[i] = rep["cpu_s"]
        stats.peak_rss_mb[i] = rep["peak_rss_mb"]
        stats.phases_s[i] = rep["phases_s"]
        stats.sent[i] = [tuple(s) for s in rep["sent"]]
        row: dict[int, int] = {}
        for _, dst, nb in stats.sent[i]:
            row[int(dst)] = row.get(int(dst), 0) + int(nb)
        stats.bytes_sent[i] = row
        if trace:
            stats.trace[i] = rep["trace"]
    return reports[receiver]["result"], stats


def spawn_party(
    job: dict[str, Any],
    own: dict[str, Any],
    index: int,
    addresses: Sequence[str],
    key: bytes,
    program: str = "protocols.mpyc_party",
) -> processes.PartyProcess:
    """Start MPyC party ``index`` of ``job``; ``own`` (its inputs) and ``key`` go over stdin.
    ``program``: the module the party runs (a test runs a hostile party's)."""
    cmd = [sys.executable, "-m", program, "--job-json", json.dumps(job)]
    cmd += ["-I", str(index), "--no-log"]
    for a in addresses:
        cmd += ["-P", a]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # one BLAS thread per party: the parties already share the cores between them
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    # glibc: keep freed share blocks (up to 32 MiB each, its largest mmap threshold) in the heap
    # for the next block instead of unmapping them; each fresh mapping costs a page fault per
    # 4 KiB (at 100k rows the receiver took 33k page faults in its secure phase, 3k with these)
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
    stdin = wire.dumps({"key": key, **own})
    return processes.PartyProcess(cmd, stdin, env=env, capture=True)


def wait_all(procs: list[processes.PartyProcess], timeout: float) -> list[dict[str, Any]]:
    """Wait for every MPyC party; on the first failure or the deadline kill the rest and raise.
    Returns each party's report."""

    def failed(i: int, line: str) -> Exception:
        if os.environ.get("SHAMIR_DEBUG"):
            print(line, file=sys.stderr)
        return ShamirProtocolError(f"MPyC party {i} failed: {line}")

    outs = processes.wait_group(
        procs,
        timeout,
        on_failure=failed,
        on_timeout=lambda: ShamirTimeoutError(
            f"the {len(procs)} MPyC parties did not finish within {timeout:g} s"
        ),
    )
    reports = []
    for i, data in enumerate(outs):
        if not data.startswith(REPORT_MAGIC):
            raise ShamirProtocolError(f"MPyC party {i} exited without a report")
        reports.append(wire.loads(data[len(REPORT_MAGIC) :]))
    return reports


def decode_products(blocks: dict[int, np.ndarray], frac_bits: int) -> dict[int, np.ndarray]:
    """Opened integers -> floats: divide by ``2**(2f)`` (exact ints until this division)."""
    return {
        j: np.asarray(B, dtype=object).astype(np.float64) / float(4**frac_bits)
        for j, B in blocks.items()
    }
