"""``securevfl align``: align per-party CSV files by PSI and write each party's kept rows.

In-process by default; with ``processes=True`` one OS process per party over the networked
runtime, each reading only its own file (``python -m securevfl.data.align_files`` is one party).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from securevfl.data.alignment import align_tables, default_workers, read_party_csv, write_table
from securevfl.data.arrow_input import output_name
from securevfl.errors import (
    ConfigError,
    PartyTimeoutError,
    ProtocolError,
    SecureVFLError,
    check_int,
    check_positive,
)


def check_inputs(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> list[Path]:
    """At least two distinct input files, distinct output names, outputs not the inputs."""
    ps = [Path(p) for p in paths]
    if len(ps) < 2:
        raise ConfigError(f"align needs >= 2 party CSV files, got {len(ps)}")
    names = [p.name for p in ps]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(f"party CSV file names must be distinct (outputs use them), got {dup!r}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ConfigError(f"--out must name a directory, got the file {str(out_dir)!r}")
    out = Path(out_dir).resolve()
    for p in ps:
        if (out / p.name) == p.resolve():
            raise ConfigError(f"--out must not be the inputs' directory, got {str(out_dir)!r}")
    return ps


def align_files(
    paths: Sequence[str | os.PathLike],
    id_column: str,
    out_dir: str | os.PathLike,
    *,
    processes: bool = False,
    timeout: float = 600.0,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Align the parties' files (the first is the active party) into ``out_dir``; the record."""
    ps = check_inputs(paths, out_dir)
    check_positive("timeout", timeout)
    if workers is not None:
        check_int("workers", workers, minimum=1)
    t0 = time.perf_counter()
    if processes:  # a party's bad input ends the group as a ConfigError (_party_error): exit 2
        record = _run_processes(ps, id_column, Path(out_dir), timeout=timeout, workers=workers)
    else:
        from securevfl.runtime.inprocess import InProcessRuntime

        tables = {k: read_party_csv(p, id_column, k) for k, p in enumerate(ps)}
        rt = InProcessRuntime(len(ps))
        kept, record = align_tables(rt, tables, workers=workers, progress=progress)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for t in kept.values():
            write_table(t, Path(out_dir) / output_name(t.path))
        record["runtime"] = "inprocess"
    record["files"] = [str(Path(out_dir) / output_name(p)) for p in ps]
    record["time_s"] = round(time.perf_counter() - t0, 3)
    return record


def _party_error(i: int, line: str) -> Exception:
    """A party's last stderr line as an error: bad input stays bad input (exit 2 at the CLI)."""
    kind, _, msg = line.partition(": ")
    if kind in ("ConfigError", "DataError"):
        return ConfigError(msg)
    return ProtocolError(f"party {i} failed: {line}")


def _run_processes(
    ps: list[Path], id_column: str, out_dir: Path, *, timeout: float, workers: int | None
) -> dict[str, Any]:
    from protocols.processes import free_ports, run_group

    addresses = [f"127.0.0.1:{port}" for port in free_ports(len(ps))]
    w = workers or default_workers()
    out_dir.mkdir(parents=True, exist_ok=True)
    run_id = secrets.token_hex(16)  # this run's parties only: a foreign run cannot join
    with tempfile.TemporaryDirectory(prefix="securevfl-align-") as tmp:
        cmds = []
        for i, p in enumerate(ps):
            cmd = [sys.executable, "-m", "securevfl.data.align_files", "--index", str(i)]
            out = str(out_dir / output_name(p))
            cmd += ["--csv", str(p), "--id-column", id_column, "--out", out]
            cmd += ["--timeout", str(timeout), "--workers", str(w)]
            cmd += ["--record", os.path.join(tmp, "record.json"), "--run-id", run_id]
            for a in addresses:
                cmd += ["-P", a]
            cmds.append(cmd)
        run_group(  # the one launcher of local process groups (protocols/processes.py)
            cmds,
            [b""] * len(cmds),
            timeout + 60,
            on_failure=_party_error,
            on_timeout=lambda: PartyTimeoutError(
                f"the {len(ps)} party processes did not finish within {timeout + 60:g} s"
            ),
            capture=False,
        )
        with open(os.path.join(tmp, "record.json")) as f:
            return json.load(f)


def party_main(argv: Sequence[str] | None = None) -> int:
    """One party of a networked alignment: reads only its own CSV, writes only its own rows."""
    ap = argparse.ArgumentParser(prog="python -m securevfl.data.align_files")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("-P", dest="addresses", action="append", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--id-column", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--record", help="where party 0 writes the alignment record (JSON)")
    ap.add_argument("--certs", help="TLS certificate directory (MPyC's layout)")
    ap.add_argument("--run-id", default="", help="the launcher's run ID (all parties agree on it)")
    a = ap.parse_args(argv)
    from securevfl.runtime.networked import NetworkedRuntime
    from securevfl.runtime.runspec import run_digest

    try:
        table = read_party_csv(a.csv, a.id_column, a.index)
        # every party must be running the same job: the handshake compares these digests
        job = {"job": "psi-align", "id_column": a.id_column}
        digest = run_digest(job, run_id=a.run_id, n_parties=len(a.addresses))
        rt = NetworkedRuntime(
            a.index, a.addresses, digest=digest, timeout=a.timeout, cert_dir=a.certs
        )
        try:
            kept, record = align_tables(rt, {a.index: table}, workers=a.workers)
        finally:
            rt.close()
    except SecureVFLError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    write_table(kept[a.index], Path(a.out))
    if record is not None:
        record["runtime"] = "processes"
        text = json.dumps(record)
        if a.record:
            Path(a.record).write_text(text)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(party_main())
