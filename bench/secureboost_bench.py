"""SecureBoost training, timed beside a pooled boosted-trees library on the same rows
(bench/peers/sklearn_gbdt.py; the perf job of bench/suites/perf.d/secureboost.toml).

    python -m bench.secureboost_bench --dataset phishing --n 4000 --bits 2048 --json
    python -m bench.secureboost_bench --processes --dump-blocks build/perf/secureboost
    python -m bench.secureboost_bench --dataset synthetic-logistic --n 100000 --trees 3 \
        --engine dask

The run is ``securevfl run secureboost`` (in-process, or one OS process per party with
``--processes``); seconds = its training time (key generation included, test scoring not).
``--dump-blocks DIR`` writes the run's train/test rows, pooled, with their labels to
``DIR/blocks.npz`` for the peer (the rows the run used, after the public-domain scaling). The
last stdout line is the perf interface's JSON object (``detail``: accuracy, trees, depth).

SecretFlow's SGB was the intended peer; it runs only in a hand-made venv with a shim
(``bench/peers/sgb_secretflow.py``, docs/benchmarks.md "SecureBoost"), so the perf job's peer is
scikit-learn's HistGradientBoosting on the pooled rows: a plaintext reference with the same
depth, rounds, learning rate, λ and bins, not an encrypted protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from securevfl.errors import SecureVFLError
from securevfl.experiment import run_experiment, run_in_processes
from securevfl.run_options import build_spec


def _dump(spec, path: str) -> None:
    from securevfl.data import load_dataset, split_in_place
    from securevfl.run.steps import party_blocks

    seed = spec.seed or 0
    opts = {"n": spec.dataset_options["n"]} if "n" in spec.dataset_options else {}
    ds = load_dataset(spec.dataset, seed=seed, **opts)
    parts = party_blocks(ds.groups, spec, seed)
    cols = np.concatenate(parts)  # the label holder's columns first
    tr, te = split_in_place(ds, seed=seed)
    os.makedirs(path, exist_ok=True)
    np.savez(
        os.path.join(path, "blocks.npz"),
        X_train=tr.X[:, cols],
        y_train=tr.y,
        X_test=te.X[:, cols],
        y_test=te.y,
        settings=np.array([spec.options["trees"], spec.options["depth"], spec.options["bins"]]),
        lr=np.array([spec.lr]),
        own_columns=np.array([len(parts[0])]),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.secureboost_bench", description=__doc__)
    ap.add_argument("--dataset", default="phishing", help="dataset; default phishing")
    ap.add_argument("--n", type=int, default=None, help="rows (a subsample); default all")
    ap.add_argument("--trees", type=int, default=20, help="boosting rounds; default 20")
    ap.add_argument("--depth", type=int, default=3, help="tree depth; default 3")
    ap.add_argument("--bins", type=int, default=32, help="public bins; default 32")
    ap.add_argument("--bits", type=int, default=2048, help="Paillier bits; default 2048")
    ap.add_argument("--seed", type=int, default=0, help="seed; default 0")
    ap.add_argument("--processes", action="store_true", help="one OS process per party")
    ap.add_argument(
        "--engine",
        default="numpy",
        choices=("numpy", "dask"),
        help="where each party's Paillier work runs: in its process (numpy, the default) or "
        "as tasks on a Dask LocalCluster of 2 workers of its own (dask)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds a party waits for a peer (the launcher bounds the whole run by 4x this "
        "plus 60 s; 2048-bit runs on thousands of rows need more than the default 120)",
    )
    ap.add_argument("--dump-blocks", default=None, help="write DIR/blocks.npz for the peer")
    ap.add_argument("--dump-only", action="store_true", help="write the blocks, run nothing")
    ap.add_argument("--json", action="store_true", help="only the JSON line on stdout")
    a = ap.parse_args(argv)
    if a.dump_only and not a.dump_blocks:
        print("secureboost_bench: error: --dump-only needs --dump-blocks DIR", file=sys.stderr)
        return 2
    given = {
        "method": "secureboost",
        "dataset": a.dataset,
        "seed": a.seed,
        "trees": a.trees,
        "depth": a.depth,
        "bins": a.bins,
        "paillier_bits": a.bits,
        "timeout": a.timeout,
        "engine": a.engine,
    }
    if a.n is not None:
        given["n"] = a.n
    try:
        spec = build_spec(given)
        if a.dump_blocks:
            _dump(spec, a.dump_blocks)
        if a.dump_only:
            return 0
        rec = run_in_processes(spec) if a.processes else run_experiment(spec)
    except SecureVFLError as exc:
        print(f"secureboost_bench: error: {exc}", file=sys.stderr)
        return 2
    out = {
        "seconds": rec["time"]["train_s"],
        "bytes": int(rec["comm"]["bytes_total"]),
        "version": f"securevfl {rec['version']}",
        "detail": {
            "accuracy": rec["metrics"]["accuracy"],
            "trees": a.trees,
            "depth": a.depth,
            "bins": a.bins,
            "paillier_bits": a.bits,
            "runtime": rec["runtime"],
            "engine": a.engine,
            "phases_s": rec.get("stats", {}).get("phases_s"),
            "cpu_s": rec["time"].get("cpu_s"),  # the run's CPU (data, training, scoring)
        },
    }
    if not a.json:
        print(f"secureboost: {out['seconds']:.2f} s, accuracy {out['detail']['accuracy']:.4f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
