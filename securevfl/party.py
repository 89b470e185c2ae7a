"""Entry point of one party process: ``python -m securevfl.party``.

It runs the experiment, so it sits above ``securevfl.experiment`` (not in ``runtime/``).

The launcher (``securevfl run --processes``) starts one of these per party and hands each the
run's secret key on stdin (``--key-stdin``); on a multi-host deployment ``securevfl party
--index i -P host:port ... --certs DIR --run-id ID`` does the same by hand.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from securevfl.errors import ConfigError, SecureVFLError


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_addresses(addresses: Sequence[str], cert_dir: str | None) -> None:
    """Without TLS every party must be on loopback: elsewhere peers would be unauthenticated."""
    for a in addresses:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"party address must be HOST:PORT with a port in 1..65535, got {a!r}")
        if cert_dir is None and not _is_loopback(a):
            raise ConfigError(
                f"a party address off this host needs TLS (--ssl/--certs DIR), got {a!r}"
            )


def check_party_spec(n_parties: int, index: int, addresses: Sequence[str]) -> None:
    """A party's own arguments must agree before it waits for anyone: one address per party."""
    if len(addresses) != n_parties:
        raise ConfigError(
            f"-P must be given once per party ({n_parties} for this method and --parties), "
            f"got {len(addresses)}"
        )
    if not 0 <= index < n_parties:
        raise ConfigError(f"--index must be in [0, {n_parties}), got {index}")


def check_own_data(spec: Any, index: int) -> None:
    """A party names only its own data: ``--data MINE.csv`` (the server: none), never the files
    of every party (``--dataset csv:A.csv,B.csv`` is the one-process form)."""
    from securevfl.data.arrow_input import is_parquet_source
    from securevfl.data.custom import FILE_PREFIXES

    if spec.dataset.startswith(FILE_PREFIXES):
        raise ConfigError(
            f"a party names only its own file: --data MINE.csv (with --id-column to align the "
            f"rows by PSI), got --dataset {spec.dataset!r}"
        )
    if spec.dataset != "csv":
        return
    if index < spec.parties and not spec.data:
        raise ConfigError(f"party {index} must name its own file with --data FILE, got none")
    if index >= spec.parties and spec.data:
        raise ConfigError(f"party {index} is the server, it holds no data: got --data {spec.data}")
    if spec.data and not (os.path.isfile(spec.data) or is_parquet_source(spec.data)):
        raise ConfigError(f"--data must be a file (or a Parquet folder or glob), got {spec.data!r}")


def run_party(
    spec_dict: dict[str, Any],
    index: int,
    addresses: Sequence[str],
    *,
    cert_dir: str | None = None,
    run_id: str = "",
    key: bytes = b"",
    save: str | None = None,
) -> dict[str, Any] | None:
    """Run this process's party of ``spec_dict``; the label holder returns the record."""
    from securevfl.experiment import check_spec, run_experiment, spec_from_dict
    from securevfl.runtime.networked import NetworkedRuntime
    from securevfl.runtime.runspec import run_digest, run_digest_parts

    check_addresses(addresses, cert_dir)
    if cert_dir is not None:
        from protocols.mpyc_net import cert_paths

        for path in cert_paths(cert_dir, index):
            if not os.path.isfile(path):
                raise ConfigError(
                    f"--certs must hold {os.path.basename(path)} for party {index} "
                    f"(make a set with `securevfl certs`), not found in {cert_dir!r}"
                )
    spec = spec_from_dict(spec_dict)
    check_party_spec(check_spec(spec).n_parties(spec), index, addresses)  # before connecting
    check_own_data(spec, index)
    digest = run_digest(spec_dict, run_id=run_id, n_parties=len(addresses))
    # a handshake mismatch then names the option that differs, not two hashes
    parts = run_digest_parts(spec_dict, run_id=run_id, n_parties=len(addresses))
    rt = NetworkedRuntime(
        index,
        addresses,
        digest=digest,
        timeout=spec.timeout,
        cert_dir=cert_dir,
        key=key,
        digest_parts=parts,
    )
    try:
        record = run_experiment(spec, rt, save=save)
    except BaseException:
        rt.close(graceful=False)
        raise
    rt.close()
    return record


def read_key(stream: Any) -> bytes:
    """The run's secret key: one hex line on stdin (a pipe from the launcher, never a file)."""
    line = stream.readline().strip()
    try:
        key = bytes.fromhex(line)
    except ValueError:
        raise ConfigError("the key on stdin must be one line of hex") from None
    if len(key) < 16:
        raise ConfigError(f"the key on stdin must be >= 16 bytes, got {len(key)}")
    return key


def share_host_cores(parties: int) -> int:
    """Cap this process's BLAS threads at its share of the host's cores (at least 1) when
    ``parties`` processes of one run share the host (the launcher's ``--processes``), as the
    MPyC product parties are capped (protocols/shamir_launch.py); returns the cap.

    Why: OpenBLAS's idle threads spin for a while after each multithreaded call, so a party
    whose BLAS ran on every core took CPU from the others on a shared host even inside
    ``threadpool_limits(1)``: fm-vfl's secure phase at 100k rows on 2 cores (3 parties, nice
    -10, load ~8) took 0.10-0.14 CPU-s a data party and 0.10-0.12 the server with the default
    threads, 0.09-0.11 and 0.05-0.08 with one thread (the isolated kernel: 0.10-0.11, 0.06-0.07)."""
    from threadpoolctl import threadpool_limits

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        cores = os.cpu_count() or 1
    cap = max(1, cores // max(1, parties))
    threadpool_limits(limits=cap, user_api="blas")
    return cap


def main(argv: Sequence[str] | None = None) -> int:
    from protocols.processes import die_with_parent

    die_with_parent()
    ap = argparse.ArgumentParser(prog="python -m securevfl.party")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("-P", dest="addresses", action="append", required=True)
    ap.add_argument("--spec-json", required=True)
    ap.add_argument("--result-file")
    ap.add_argument("--certs", help="TLS certificate directory (MPyC layout)")
    ap.add_argument("--run-id", default="")
    ap.add_argument("--key-stdin", action="store_true", help="read the run's key from stdin")
    ap.add_argument("--plugins", default="", help="comma-separated modules to import (registries)")
    ap.add_argument(
        "--method-module",
        default="",
        help="the module that registers the run's method (imported first: the packages in "
        "--plugins then import their other methods only if the run names one)",
    )
    ap.add_argument("--save", help="directory: this party writes its own trained part there")
    ap.add_argument(
        "--host-parties",
        type=int,
        default=0,
        help="how many parties of this run share this host (the launcher's --processes): each "
        "caps its BLAS threads at its share of the cores; 0 (default): no cap",
    )
    args = ap.parse_args(argv)
    if args.host_parties > 1:
        share_host_cores(args.host_parties)
    import importlib

    from securevfl.registry import load_all_of

    if args.method_module:
        importlib.import_module(args.method_module)
    for name in filter(None, args.plugins.split(",")):
        # the method packages are left to the registry: this process imports only its own
        # method's module (torch, the accountant: ~3 s)
        load_all_of(importlib.import_module(name), on_demand=True)
    try:
        key = read_key(sys.stdin) if args.key_stdin else b""
        record = run_party(
            json.loads(args.spec_json),
            args.index,
            args.addresses,
            cert_dir=args.certs,
            run_id=args.run_id,
            key=key,
            save=args.save,
        )
    except SecureVFLError as exc:
        print(str(exc), file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 3
    except Exception as exc:  # the launcher shows one line per party: never a traceback's last
        print(f"party {args.index}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    if record is not None:
        text = json.dumps(record)
        if args.result_file:
            with open(args.result_file, "w") as f:
                f.write(text)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
