"""The ``securevfl`` command line: run, party, bench, align, datasets, methods, demo.

Bad input prints one line naming the value and the rule and exits with code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.perf_jobs import add_perf_args
from bench.predict_cli import add_checkpoint_args, add_predict_parser, add_save_arg
from bench.run_args import add_run_args, method_in, spec_from_args
from securevfl.errors import ConfigError, SecureVFLError, check_int

EXIT_BAD_INPUT = 2
EXIT_PROTOCOL = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"securevfl: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _print_record(record: dict[str, Any], as_json: bool) -> None:
    from securevfl.run.outcome import strict_json

    for line in record.get("stats", {}).get("warnings", []):  # silently wrong is never silent
        print(f"securevfl: warning: {line}", file=sys.stderr)
    if as_json:
        print(strict_json(record))
        return
    m = ", ".join(
        f"{k}={v:.4f}" if v is not None else f"{k}=n/a" for k, v in record["metrics"].items()
    )
    print(
        f"{record['method']} on {record['dataset']} (K={record['parties']}, "
        f"{record['runtime']}): {m}"
    )
    print(
        f"  train {record['time']['train_s']:.3f} s, total {record['time']['total_s']:.3f} s, "
        f"{record['comm']['bytes_total']:,} bytes in {record['comm']['messages']} messages"
    )
    al = record.get("alignment")
    if al:
        print(
            f"  aligned by PSI on {al['id_column']!r}: kept {al['kept']:,} of {al['rows']} rows, "
            f"{al['comm']['bytes_total']:,} bytes (PSI reveals the intersection and its size)"
        )
    if record["privacy"]:
        p = record["privacy"]
        if p["epsilon"] is None:
            print("  privacy: no ε (" + "; ".join(p.get("outside_guarantee", [])) + ")")
        else:
            target = p.get("target_epsilon")
            asked = "" if target is None else f" for target {target:.4g}"
            print(
                f"  privacy: ε={p['epsilon']:.4g}{asked}, δ={p['delta']:.3g}, unit "
                f"{p.get('unit')} ({p['accountant']})"
            )
            b = p.get("bounds")
            if b:  # a csv: run without --bounds: its scaling ranges are in that ε
                print(
                    f"  scaling ranges: released by parties {b['parties']} under {b['share']:g} "
                    f"of the budget ({b['share_of']}; composed into ε; --bounds spends none)"
                )
            for why in p.get("outside_guarantee", []):
                print(f"  outside the guarantee: {why}")


def cmd_run(args: argparse.Namespace) -> int:
    from securevfl.experiment import run_experiment, run_in_processes

    spec = spec_from_args(args)
    if args.save is not None and args.record_view is not None:
        raise ConfigError("--save does not apply with --record-view (an attack run)")
    from securevfl.model.checkpoint import make_checkpoints

    ck = make_checkpoints(
        spec, every=args.checkpoint_every, directory=args.checkpoint, resume=args.resume
    )
    if ck is not None and (args.processes or args.record_view is not None):
        raise ConfigError("--checkpoint-every/--resume apply to in-process runs only")
    if args.record_view is not None:
        from bench.attack_cli import run_recording

        record = run_recording(spec, args.record_view, processes=args.processes)
    elif args.processes:
        from bench.plugins import plugin_modules

        record = run_in_processes(spec, plugins=plugin_modules(), save=args.save)
    else:
        record = run_experiment(spec, save=args.save, checkpoints=ck)
    _print_record(record, args.json)
    return 0


def cmd_party(args: argparse.Namespace) -> int:
    from securevfl.party import run_party

    spec = spec_from_args(args)
    cert_dir = args.certs if args.certs else (".config" if args.ssl else None)
    record = run_party(
        dict(spec.__dict__),
        args.index,
        args.P,
        cert_dir=cert_dir,
        run_id=args.run_id,
        save=args.save,
    )
    if record is not None:
        _print_record(record, args.json)
    elif not args.json:  # the label holder prints the record; the others say they are done
        saved = f"; its part of the model is in {args.save}" if args.save else ""
        print(f"party {args.index}: the run finished{saved}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from bench.perf_jobs import MAX_RUNS, select_jobs
    from bench.report import render_report
    from bench.runner import failure_of, read_results, run_suite, succeeded
    from bench.suite_filter import Filters, filter_suite, parse_filters, quick
    from bench.suites import load_suite, suite_names

    if args.list:
        for name in suite_names():
            s = load_suite(name)
            jobs = (
                f" + {len(s.perf)} perf jobs ({', '.join(j.name for j in s.perf)})"
                if s.perf
                else ""
            )
            print(f"{name:24s} {len(s.cells):4d} runs{jobs}  {s.description}")
        return 0
    suite = load_suite(args.suite)
    perf_jobs = select_jobs(suite.perf, args.perf_jobs)
    perf_runs = (
        None
        if args.perf_runs is None
        else check_int("--perf-runs", args.perf_runs, minimum=1, maximum=MAX_RUNS)
    )
    filters = parse_filters(args.methods, args.datasets, args.epsilons, args.seeds)
    if args.quick:
        filters = quick(suite, filters)
    if filters != Filters():
        suite = filter_suite(suite, filters)
        print(f"suite {suite.name}: {len(suite.cells)} cells after the filters")
    out = Path(args.out or f"bench-out/{suite.name}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out must be a directory, got the file {str(out)!r}")
    errors: list[str] = []
    peers = None
    if not args.render_only and perf_jobs:  # before any cell: a peer that cannot install stops us
        from bench.perf import prepare_peers, run_perf

        peers = prepare_peers(perf_jobs)
    if not args.render_only and suite.cells and args.perf_jobs is None:
        jobs = check_int("jobs", args.jobs, minimum=1, maximum=os.cpu_count() or 1)
        ran, skipped, errors = run_suite(suite, out, progress=not args.no_progress, jobs=jobs)
        print(
            f"suite {suite.name}: ran {ran}, skipped {skipped} already in {out / 'results.jsonl'}, "
            f"failed {len(errors)}"
        )
    if peers is not None:
        errors += run_perf(perf_jobs, out, runs=perf_runs, peers=peers)
        print(f"suite {suite.name}: {len(perf_jobs)} perf jobs in {out / 'perf.jsonl'}")
    extras = suite.extras + (["perf"] if suite.perf and "perf" not in suite.extras else [])
    cell_ids = {c.cell_id for c in suite.cells}
    records = [
        r
        for r in succeeded(read_results(out / "results.jsonl"))
        if r.get("cell_id") in cell_ids or args.render_only
    ]
    done = {r.get("cell_id") for r in records}
    failed = [  # cells with no result: report.html says which method could not run where
        r
        for r in read_results(out / "results.jsonl")
        if r.get("cell_id") in cell_ids - done and failure_of(r) is not None
    ]
    path = render_report(
        records,
        out,
        title=f"securevfl bench: {suite.name}",
        extras=extras,
        errors=errors,
        failed=failed,
    )
    print(f"report: {path} and {path.with_name('report.html')}")
    return 1 if errors else 0


def cmd_certs(args: argparse.Namespace) -> int:
    from protocols.certs import MAX_PARTIES, make_certs

    n = check_int("parties", args.parties, minimum=1, maximum=MAX_PARTIES)
    days = check_int("days", args.days, minimum=1)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out must be a directory, got the file {args.out!r}")
    paths = make_certs(args.out, n, days=days)
    print(f"wrote {len(paths)} files to {args.out}: mpyc_ca.crt, party_<i>.crt/.key for i < {n}")
    print("give party i mpyc_ca.crt, party_i.crt and party_i.key only; run with --certs DIR")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from securevfl.data import list_datasets

    print(f"{'name':18s} {'n':>7s} {'d':>5s} {'task':11s} {'source'}")
    for info in list_datasets():
        flag = " (optional)" if info.optional else ""
        print(
            f"{info.name:18s} {info.n:7d} {info.d:5d} {info.task:11s} {info.source}{flag}; "
            f"licence: {info.licence}"
        )
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    from bench.method_cards import cards

    for name, m in cards().items():  # the cards: no method is imported to list them
        print(f"{name:14s} [{m.family:6s}] models={','.join(m.models):8s} {m.summary}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from bench.demos import available

    demos = available()
    if args.name not in demos:
        from securevfl.errors import ConfigError

        raise ConfigError(f"demo must be one of {sorted(demos)}, got {args.name!r}")
    return int(demos[args.name].main(args.rest) or 0)


def cmd_align(args: argparse.Namespace) -> int:
    from securevfl.data.align_files import align_files

    bar = None
    progress = None
    if not args.processes and not args.json and not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc="psi", unit="pt", unit_scale=True)
        progress = bar.update
    try:
        rec = align_files(
            args.csv,
            args.id_column,
            args.out,
            processes=args.processes,
            timeout=args.timeout,
            workers=args.workers,
            progress=progress,
        )
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(rec))
        return 0
    rows = ", ".join(f"party {k}: {n:,}" for k, n in enumerate(rec["rows"]))
    print(f"aligned on {rec['id_column']!r}: kept {rec['kept']:,} rows ({rows} before)")
    print(
        f"  {rec['time_s']:.2f} s ({rec['runtime']}), {rec['comm']['bytes_total']:,} bytes in "
        f"{rec['comm']['messages']} messages; wrote {', '.join(rec['files'])}"
    )
    print(f"  revealed: {rec['revealed']}")
    return 0


# commands that neither parse nor use a method: their parser leaves out the method commands
# (whose options list every method's), so they never import the methods (torch and the
# accountant, ~3 s) and `securevfl predict` on new rows starts in a fraction of a second
NO_METHODS = ("predict", "align", "certs", "datasets")
# commands that only show the methods: they read the cards (bench.method_cards), and register
# nothing; the others register the methods once their arguments parse (`--help` exits first)
SHOW_METHODS = ("methods",)
# commands that name one method: they import its module only, the registry loads any other
# name it is asked for (a `securevfl party` process: torch and the accountant only if its
# method uses them, ~3 s of CPU less per process otherwise)
ONE_METHOD = ("run", "party", "attack", "audit")


def _import_only(method: str | None) -> bool:
    """Import ``method``'s module (its card names it); True when that registered it."""
    if method is None:
        return False
    import importlib

    from bench.method_cards import cards
    from securevfl.registry import registered

    importlib.import_module(cards()[method].module)
    return method in registered("method")


def build_parser(method: str | None = None, command: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``run``/``party`` offer the common options and ``method``'s own.
    ``command``: the one being parsed; a known command gets a parser with only its own
    subparser (``run``, ``party``, ``attack`` and ``audit`` each hold every common option and the
    method's: building them all took most of a refused run's time); any other (``--help``, a
    typo) gets every command."""
    ap = _Parser(
        prog="securevfl",
        description="Privacy-preserving vertical federated learning: "
        "DP, MPC and HE methods side by side on one training core.",
    )
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    known = command in _COMMANDS or command in ONE_METHOD
    if not known or command in ONE_METHOD:
        _add_method_commands(sub, method, command if known else None)
    for name, add in _COMMANDS.items():
        if not known or name == command:
            add(sub)
    return ap


def _add_bench_command(sub: Any) -> None:
    p = sub.add_parser("bench", help="run a benchmark suite and render its report")
    p.add_argument(
        "--suite",
        default="default",
        help="suite name (see --list) or path to a .toml; default 'default'",
    )
    p.add_argument(
        "--out",
        help="output directory for results.jsonl, report.md and plots; default bench-out/SUITE",
    )
    p.add_argument(
        "--render-only",
        action="store_true",
        help="re-render the report from results.jsonl, run nothing",
    )
    p.add_argument("--list", action="store_true", help="list the suites and their sizes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--jobs",
        default="1",
        help="cells run at once, each in its own worker process (up to the number of cores); "
        "default 1. With more, each cell's timings are taken beside the others' (records say "
        "bench_jobs): compare times of runs made the same way",
    )
    f = p.add_argument_group(
        "filters",
        "run only some of the suite's cells (comma-separated lists; results land in the same "
        "results.jsonl, so a later full run skips them)",
    )
    f.add_argument("--methods", metavar="M1,M2", help="keep these methods' cells")
    f.add_argument("--datasets", metavar="D1,D2", help="keep these datasets' cells")
    f.add_argument(
        "--epsilons",
        metavar="E1,E2",
        help="keep the DP cells at these ε, and every cell with no ε (the reference points)",
    )
    f.add_argument("--seeds", metavar="S1,S2", help="keep these seeds' cells")
    f.add_argument(
        "--quick",
        action="store_true",
        help="a quick look: the suite's first dataset and first seed, ε 1 and 8 (what a filter "
        "above gives explicitly wins); e.g. `bench --suite compare --quick`",
    )
    add_perf_args(p)
    p.set_defaults(func=cmd_bench)


def _add_align_command(sub: Any) -> None:
    p = sub.add_parser(
        "align",
        help="private entity alignment: keep the rows whose ID every party holds (ECDH-PSI)",
        description="Each party's CSV is keyed by an ID column; PSI finds the common IDs without "
        "revealing the others, and each party's kept rows are written in one agreed order (by ID) "
        "as OUT/<input file name>. The first file is the active party (party 0). PSI reveals the "
        "intersection and its size; party 0 also learns every party's row count.",
    )
    p.add_argument("csv", nargs="+", help="one CSV per party (header row), party 0 first")
    p.add_argument("--id-column", required=True, help="the ID column's name in every file")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--processes",
        action="store_true",
        help="one OS process per party over MPyC's networked runtime (default: in-process)",
    )
    p.add_argument(
        "--workers", type=int, help="processes per party for the group operations; default: cores"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds; default 600")
    p.add_argument("--json", action="store_true", help="print one JSON alignment record")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_align)


def _add_datasets_command(sub: Any) -> None:
    p = sub.add_parser("datasets", help="list datasets (n, d, task, source, licence)")
    p.set_defaults(func=cmd_datasets)


def _add_methods_command(sub: Any) -> None:
    p = sub.add_parser("methods", help="list methods and baselines")
    p.set_defaults(func=cmd_methods)


def _add_certs_command(sub: Any) -> None:
    p = sub.add_parser(
        "certs", help="make a test CA and one TLS key + certificate per party (MPyC's layout)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write them to")
    p.add_argument("--parties", required=True, help="number of parties (MPyC parties, all)")
    p.add_argument("--days", default="30", help="validity in days; default 30")
    p.set_defaults(func=cmd_certs)


def _add_demo_command(sub: Any) -> None:
    p = sub.add_parser("demo", help="protocol demos: show what each party holds and sends")
    p.add_argument("name", help="demo name (shamir, secagg, ckks, ...)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the demo")
    p.set_defaults(func=cmd_demo)


_COMMANDS: dict[str, Callable[[Any], None]] = {
    "bench": _add_bench_command,
    "align": _add_align_command,
    "predict": add_predict_parser,
    "datasets": _add_datasets_command,
    "methods": _add_methods_command,
    "certs": _add_certs_command,
    "demo": _add_demo_command,
}


def _add_method_commands(sub: Any, method: str | None, only: str | None = None) -> None:
    """``run``, ``party``, ``attack`` and ``audit`` (or ``only`` that one): the common options
    and ``method``'s own."""
    if only in (None, "run"):
        _add_run_command(sub, method)
    if only in (None, "party"):
        _add_party_command(sub, method)
    if only in (None, "attack"):
        from bench.attack_cli import add_attack_parser

        add_attack_parser(sub, functools.partial(add_run_args, method=method, method_flag=True))
    if only in (None, "audit"):
        from bench.audit_cli import add_audit_parser

        add_audit_parser(sub, functools.partial(add_run_args, method=method))


def _add_run_command(sub: Any, method: str | None) -> None:
    p = sub.add_parser("run", help="train one method on one dataset and print its result record")
    g = add_run_args(p, method)
    g["protocol"].add_argument(
        "--processes",
        action="store_true",
        help="one OS process per party over MPyC's networked runtime (default: in-process)",
    )
    out = g["output"]
    out.add_argument("--json", action="store_true", help="print exactly one JSON result record")
    add_save_arg(out)
    add_checkpoint_args(out)
    out.add_argument(
        "--record-view",
        type=int,
        metavar="K",
        help="keep every payload party K received (as delivered), its data and model; the "
        "record gets a 'view' summary (in-process runs)",
    )
    p.set_defaults(func=cmd_run)


def _add_party_command(sub: Any, method: str | None) -> None:
    p = sub.add_parser("party", help="run one party of a networked run on this host")
    g = add_run_args(p, method)
    net = g["protocol"]
    net.add_argument(
        "--index", type=int, required=True, help="this party's index (0 = active party)"
    )
    net.add_argument(
        "-P",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="address of every party, in index order (repeat once per party)",
    )
    net.add_argument(
        "--ssl",
        action="store_true",
        help="mutual TLS with the certificates in ./.config (MPyC's layout); see --certs",
    )
    net.add_argument(
        "--certs",
        metavar="DIR",
        help="mutual TLS with the certificates in DIR: mpyc_ca.crt, party_<i>.crt, party_<i>.key "
        "(make a test set with `securevfl certs`); required when a party is off this host",
    )
    net.add_argument(
        "--run-id",
        default="",
        help="a label every party of this run is given (e.g. a date and a name): parties of "
        "another run on the same ports then refuse to connect",
    )
    g["output"].add_argument(
        "--json", action="store_true", help="print the record as JSON (label holder only)"
    )
    add_save_arg(g["output"])
    p.set_defaults(func=cmd_party)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from bench.plugins import load_plugins

        argv = list(sys.argv[1:] if argv is None else argv)
        command = argv[0] if argv else None
        method = method_in(argv) if command in ONE_METHOD else None
        ap = build_parser(method, command)
        args = ap.parse_args(argv)
        if command not in SHOW_METHODS:
            load_plugins(on_demand=command in NO_METHODS or _import_only(method))
        return args.func(args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    except SecureVFLError as exc:
        code = EXIT_PROTOCOL if isinstance(exc, RuntimeError) else EXIT_BAD_INPUT
        print(f"securevfl: error: {exc}", file=sys.stderr)
        return code
    except BrokenPipeError:  # `securevfl run ... | head -1`: the reader left, nothing is wrong
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("securevfl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
