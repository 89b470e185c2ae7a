"""Scoring throughput of saved models: ``python -m bench.predict_bench --out bench-out/predict``.

For each method: train it (seeded) with ``--save``, reload the saved model, and score the
dataset's rows tiled to ``--rows`` rows in-process (``Model.predict``: each party prepares its
raw block with its card's scaling and sends its message to the label holder, metered). Appends
one JSON line per method to OUT/results.jsonl and prints a markdown table: rows per second
(preparation included), bytes each party sends per scored row, the load average at the start
(the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_METHODS = "vfl,hdp-vfl,fm-vfl,vfl:mlp,npq:mlp,centralized,local"
EPSILON = {"hdp-vfl": 1.0, "fm-vfl": 1.0, "fm-central": 1.0, "dpsgd-c": 1.0}


def measure(method: str, dataset: str, rows: int, *, seed: int = 1) -> dict[str, Any]:
    """Train ``method`` (``name`` or ``name:model``), save, reload, score ``rows`` rows."""
    import securevfl
    from securevfl.data import load_dataset
    from securevfl.run_options import build_spec

    name, _, model = method.partition(":")
    spec = {"method": name, "dataset": dataset, "seed": seed, "epochs": 2}
    if model:
        spec["model"] = model
    if name in EPSILON:
        spec["epsilon"] = EPSILON[name]
    with tempfile.TemporaryDirectory() as d:
        securevfl.run_experiment(build_spec(spec), save=d)
        m = securevfl.load_model(d)
    ds = load_dataset(dataset, seed=0)
    X = np.tile(ds.X, (-(-rows // len(ds.X)), 1))[:rows]
    blocks = [
        X[:, m.columns(k)["indices"]] if m.reads(k) else X[:, :0] for k in range(m.data_parties)
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    pred = m.predict(blocks)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "method": method,
        "dataset": dataset,
        "rows": rows,
        "seconds": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "rows_per_s": round(rows / wall, 1),
        "bytes_per_row": pred.record["bytes_per_row"],
        "sent_per_row": pred.record["sent_per_row"],
        "load_avg": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.predict_bench", description=__doc__)
    ap.add_argument("--dataset", default="phishing")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--methods", default=DEFAULT_METHODS, help="comma-separated, name[:model]")
    ap.add_argument("--out", default="bench-out/predict")
    args = ap.parse_args(argv)
    import baselines

    baselines.load_all()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("| method | rows | rows/s | bytes/row (all) | sent per row by party | load |")
    print("|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        r = measure(method, args.dataset, args.rows)
        with (out / "results.jsonl").open("a") as f:
            f.write(json.dumps(r) + "\n")
        sent = ", ".join(f"{k}: {v:.1f}" for k, v in r["sent_per_row"].items())
        print(
            f"| {method} | {r['rows']:,} | {r['rows_per_s']:,.0f} | {r['bytes_per_row']:.1f} "
            f"| {sent} | {r['load_avg']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
