"""Entry point of one party process: ``python -m securevfl.runtime.party``.

The launcher (``securevfl run --processes``) starts one of these per party; on a multi-host
deployment ``securevfl party --index i -P host:port ...`` does the same by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from securevfl.errors import SecureVFLError


def run_party(
    spec_dict: dict[str, Any], index: int, addresses: Sequence[str], *, ssl: bool = False
) -> dict[str, Any] | None:
    """Run this process's party of ``spec_dict``; the label holder returns the record."""
    from securevfl.experiment import run_experiment, spec_from_dict
    from securevfl.runtime.networked import NetworkedRuntime

    spec = spec_from_dict(spec_dict)
    rt = NetworkedRuntime(index, addresses, timeout=spec.timeout, ssl=ssl)
    try:
        return run_experiment(spec, rt)
    finally:
        rt.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m securevfl.runtime.party")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("-P", dest="addresses", action="append", required=True)
    ap.add_argument("--spec-json", required=True)
    ap.add_argument("--result-file")
    ap.add_argument("--ssl", action="store_true")
    ap.add_argument("--plugins", default="", help="comma-separated modules to import (registries)")
    args = ap.parse_args(argv)
    import importlib

    for name in filter(None, args.plugins.split(",")):
        mod = importlib.import_module(name)
        if hasattr(mod, "load_all"):
            mod.load_all()
    try:
        record = run_party(json.loads(args.spec_json), args.index, args.addresses, ssl=args.ssl)
    except SecureVFLError as exc:
        print(str(exc), file=sys.stderr)
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
