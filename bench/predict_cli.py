"""``securevfl predict`` and the ``--save`` option of ``run`` / ``party``.

``securevfl predict --model DIR --dataset csv:A.csv,B.csv --id-column ID --out scores.csv``
aligns the parties' new rows by PSI, scores every row all parties hold and writes ``id,class,
score``. Without ``--dataset`` it scores the training run's own test split (reloaded from the
model card's settings) and says whether the classes equal those at training's end.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.data.custom import FILE_PREFIXES, file_sources
from securevfl.errors import ConfigError


def add_save_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--save",
        metavar="DIR",
        help="write the trained model: each party its own part in DIR/party_<k>/ (.npy arrays "
        "and a JSON model card with each file's sha256; loading never runs code)",
    )


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint-every",
        type=int,
        metavar="N",
        help="write each party's training state every N epochs to --checkpoint DIR (GLM or "
        "split-NN trainer, plain runs; needs --seed)",
    )
    p.add_argument("--checkpoint", metavar="DIR", help="where --checkpoint-every writes")
    p.add_argument(
        "--resume",
        metavar="DIR",
        help="continue a run from its checkpoint (same settings and --seed): the same model as "
        "an uninterrupted run",
    )


def add_predict_parser(sub: Any) -> None:
    p = sub.add_parser(
        "predict",
        help="score new rows with a model saved by `run --save` (per-party CSVs aligned by PSI)",
        description="Each party prepares its own columns as training did (its part's saved "
        "encoder and scaling), sends its part's message for every row to the label holder, which "
        "scores it. Without --dataset: the training run's own test split. New rows' columns are "
        "matched by name (any order); extra columns (the label, notes) are ignored and named in "
        "a warning; a missing column, or a non-number in a numeric column, is one error line "
        "naming the column (and line). A blank cell follows the training rule (its column's "
        "range midpoint, its _missing indicator set where training had one); a category unseen "
        "in training is encoded as all zeros of its column's group and counted in a warning. "
        "Categories come from the saved model: no --categories needed. See docs/predict.md.",
    )
    p.add_argument("--model", required=True, metavar="DIR", help="directory written by --save")
    p.add_argument(
        "--dataset",
        metavar="csv:A.csv,B.csv",
        help="one CSV per data party (party 0 first): the raw columns that party trained on "
        "(by name, any order; text categories and blank cells as in training) plus the ID "
        "column; default: the training run's test split",
    )
    p.add_argument("--id-column", help="the ID column of every CSV (required with --dataset)")
    p.add_argument("--out", metavar="FILE", help="write id,class,score per scored row here")
    p.add_argument("--json", action="store_true", help="print one JSON prediction record")
    g = p.add_argument_group(
        "networked (one party per host)",
        "with --index: this host's party loads only its own part (--model DIR/party_K or DIR) "
        "and its own CSV (--dataset csv:MINE.csv); the label holder writes --out",
    )
    p.add_argument(
        "--processes",
        action="store_true",
        help="one local OS process per party, each loading only its own part (loopback)",
    )
    g.add_argument("--index", type=int, help="this party's index (0 = label holder)")
    g.add_argument("-P", action="append", metavar="HOST:PORT", help="every party, in index order")
    g.add_argument("--certs", metavar="DIR", help="mutual TLS certificates (`securevfl certs`)")
    g.add_argument("--run-id", default="", help="a label every party of this predict is given")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per message; default 120")
    g.add_argument("--key-stdin", action="store_true", help=argparse.SUPPRESS)  # --processes
    p.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    from securevfl.model.predict import load_model

    # numpy's and pandas' warnings would add unexplained lines before a one-line error
    if getattr(args, "out", None):
        check_out(Path(args.out))  # before any scoring: a bad path costs nothing
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if args.index is not None:
            return _party(args)
        if args.processes:
            return _processes(args)
        if args.P:
            raise ConfigError("-P applies with --index (a networked predict), got no --index")
        model = load_model(args.model)
        if args.dataset is None:
            return _test_split(model, args)
        if not args.dataset.startswith(FILE_PREFIXES):
            raise ConfigError(
                f"--dataset must be csv:A.csv,B.csv,... or parquet:A,B,..., got {args.dataset!r}"
            )
        if not args.id_column:
            raise ConfigError("--id-column must be given with --dataset csv:...")
        if not args.out:
            raise ConfigError("--out must be given with --dataset csv:... (the scores file)")
        paths = file_sources(args.dataset)
        pred = model.predict_csv(paths, args.id_column)
    _write(Path(args.out), pred.ids, pred.classes, model.score_column(pred.scores, model.task))
    rec = {**pred.record, "out": args.out}
    _warn(rec)
    if args.json:
        print(json.dumps(rec, default=str))
        return 0
    print(_summary(rec))
    return 0


def _party(args: argparse.Namespace) -> int:
    from securevfl.model.predict import Model
    from securevfl.model.predict_party import predict_party

    if not args.dataset or not args.dataset.startswith(FILE_PREFIXES) or "," in args.dataset:
        raise ConfigError(
            f"--dataset must be csv:MINE.csv (this party's file), got {args.dataset!r}"
        )
    if not args.id_column or not args.P:
        raise ConfigError("--id-column and -P (every party) must be given with --index")
    key = b""
    if args.key_stdin:
        from securevfl.party import read_key

        key = read_key(sys.stdin)
    notes: list[str] = []  # this party's own encoding warnings (they stay on its host)
    pred = predict_party(
        args.model,
        file_sources(args.dataset)[0],
        args.id_column,
        args.index,
        args.P,
        cert_dir=args.certs,
        run_id=args.run_id,
        timeout=args.timeout,
        key=key,
        warn=notes.append,
    )
    if pred is None:
        _warn({"warnings": notes})
        sent = {"party": args.index, "sent": True, "warnings": notes}
        text = f"party {args.index}: sent its messages to the label holder"
        print(json.dumps(sent) if args.json else text)
        return 0
    if not args.out:
        raise ConfigError("--out must be given at the label holder (the scores file)")
    _write(
        Path(args.out), pred.ids, pred.classes, Model.score_column(pred.scores, pred.record["task"])
    )
    rec = {**pred.record, "out": args.out}
    _warn(rec)
    print(json.dumps(rec, default=str) if args.json else _summary(rec))
    return 0


def _warn(rec: dict[str, Any]) -> None:
    """The rows the encoding rules changed (unseen categories, blanks without an indicator,
    ignored columns): one stderr line each, and kept in the record."""
    for w in rec.get("warnings") or []:
        print(f"warning: {w}", file=sys.stderr)


def _processes(args: argparse.Namespace) -> int:
    """Start one local process per party (``--index k``), each loading only its own part."""
    import secrets

    from protocols.processes import free_ports, run_group
    from securevfl.errors import PartyTimeoutError, ProtocolError
    from securevfl.model.files import party_dir
    from securevfl.runtime.launcher import preload_modules

    if not args.dataset or not args.dataset.startswith(FILE_PREFIXES) or not args.id_column:
        raise ConfigError("--processes needs --dataset csv:A.csv,B.csv,... and --id-column")
    if not args.out:
        raise ConfigError("--out must be given with --dataset csv:... (the scores file)")
    paths = file_sources(args.dataset)
    n = len(paths)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(n)]
    run_id, key = secrets.token_hex(8), secrets.token_bytes(32)
    cmds = []
    for k, path in enumerate(paths):
        cmd = [sys.executable, "-m", "bench.cli", "predict", "--index", str(k), "--model"]
        cmd += [str(party_dir(args.model, k)), "--dataset", f"csv:{path}"]  # read by its path
        cmd += ["--id-column", args.id_column, "--run-id", run_id, "--key-stdin", "--json"]
        cmd += ["--timeout", str(args.timeout)] + (["--out", args.out] if k == 0 else [])
        for a in addresses:
            cmd += ["-P", a]
        cmds.append(cmd)
    outs = run_group(
        cmds,
        [key.hex().encode() + b"\n"] * n,
        args.timeout * 4 + 60,
        on_failure=lambda i, line: ProtocolError(f"party {i} failed: {line}"),
        on_timeout=lambda: PartyTimeoutError(f"the {n} predict processes did not finish"),
        preload=preload_modules("bench.cli"),  # forked from the warm server, as a run's parties
    )
    rec = json.loads(outs[0])
    # every local party's own warnings (one user's processes on one host)
    rec["warnings"] = [w for out in outs for w in json.loads(out).get("warnings") or []]
    _warn(rec)
    print(json.dumps(rec, default=str) if args.json else _summary(rec))
    return 0


def _summary(rec: dict[str, Any]) -> str:
    al = rec["alignment"]
    sent = ", ".join(f"party {k}: {v:.1f}" for k, v in rec["sent_per_row"].items())
    return (
        f"{rec['method']}: scored {rec['rows']:,} rows (the IDs all {len(al['rows'])} parties "
        f"hold; rows per party {al['rows']}), wrote {rec['out']}\n"
        f"  bytes sent per scored row: {sent} ({rec['bytes_per_row']:.1f} in all); PSI "
        f"{al['comm']['bytes_total']:,} bytes (reveals the intersection)\n"
        f"  privacy: {_privacy_line(rec['privacy'])}"
    )


def _privacy_line(priv: dict[str, Any]) -> str:
    """What scoring released, with its ε per scored row where it is a noisy release."""
    eps = priv.get("scored_rows_epsilon")
    if eps is None and priv.get("not_a_guarantee"):
        return f"{priv['release']}; no ε: {priv['not_a_guarantee']}"
    if eps is None:
        return str(priv["release"])
    return (
        f"{priv['release']}: ε = {eps:.4g} per scored row (unit {priv['unit']}, δ = "
        f"{priv['delta']:.3g}; sample unit {priv['by_unit']['sample']:.4g})"
    )


def _test_split(model: Any, args: argparse.Namespace) -> int:
    from securevfl.model.evaluation import metrics_for
    from securevfl.model.files import classes_digest

    scores, y = model.predict_test_split()
    metrics = metrics_for(model.task, y, scores)
    card = model.card
    same = classes_digest(model.task, scores) == card.get("test_classes_sha256")
    if args.out:
        _write(
            Path(args.out),
            [str(i) for i in range(len(scores))],
            model.classify(scores),
            model.score_column(scores, model.task),
        )
    privacy = model.scoring_privacy()
    noisy = privacy.get("mechanism") is not None  # fresh noise: no identity to check
    rec = {
        "method": model.method,
        "rows": len(scores),
        "metrics": metrics,
        "same_classes": None if noisy else same,
        "privacy": privacy,
    }
    if args.json:
        print(json.dumps(rec, default=str))
        return 0
    m = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
    print(f"{model.method} on its test split ({len(scores)} rows): {m}")
    if noisy:
        print(
            "  scored through the method's noisy release (fresh noise): the classes are not "
            "compared with training's; each test row was released once more"
        )
        print(f"  privacy: {_privacy_line(privacy)}")
        return 0
    print(f"  classes identical to those at training's end: {'yes' if same else 'NO'}")
    return 0 if same else 1


def check_out(path: Path) -> None:
    """--out must name a file this process can write: not a directory, in a directory that
    exists and is writable (one line, exit 2, instead of a traceback after scoring)."""
    if path.is_dir():
        raise ConfigError(f"--out must name a file, got the directory {str(path)!r}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"--out must be in a directory that exists, got {str(path)!r}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"--out must be a path this user can write, got {str(path)!r}")


def _write(path: Path, ids: Any, classes: np.ndarray, scores: np.ndarray) -> None:
    try:
        with path.open("w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["id", "class", "score"])
            for i, c, s in zip(ids, classes.tolist(), scores.tolist()):
                w.writerow([i, c, repr(float(s))])
    except OSError as exc:
        raise ConfigError(f"--out {str(path)!r} cannot be written: {exc.strerror}") from None
