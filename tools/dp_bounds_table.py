"""Accuracy of DP methods on CSV pairs with DP bounds, public bounds and the exact min/max.

Writes each dataset as two parties' CSV files into OUT_DIR, then runs every (method, ε, seed)
three ways: without ``--bounds`` (each party's ranges released under the budget, the default
share), with a public ``--bounds`` file, and with a ``--bounds`` file holding the data's own
exact min/max (what a run without ``--bounds`` used before: no budget spent, the ranges outside
the guarantee). Prints one markdown table (docs/privacy-boundaries.md holds its output).

    python tools/dp_bounds_table.py OUT_DIR [--datasets breast,phishing,bank] [--seeds 3]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from securevfl.data import domains  # noqa: E402
from securevfl.experiment import run_experiment  # noqa: E402
from securevfl.run_options import build_spec  # noqa: E402

ARMS = ("dp", "public", "exact")


def _write(path: Path, header: list[str], rows: np.ndarray | list) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _bounds(path: Path, ranges: dict[str, tuple[float, float]]) -> str:
    _write(path, ["column", "lo", "hi"], [[c, lo, hi] for c, (lo, hi) in ranges.items()])
    return str(path)


def _pair(root: Path, name: str, X: np.ndarray, y: np.ndarray, split: int, public) -> dict:
    """Party 0: columns [0, split) and the label; party 1: the rest. Bounds files: public and
    exact min/max."""
    root.mkdir(parents=True, exist_ok=True)
    cols = [f"c{j}" for j in range(X.shape[1])]
    p0, p1 = root / f"{name}_0.csv", root / f"{name}_1.csv"
    _write(p0, [*cols[:split], "label"], np.column_stack([X[:, :split], y]).tolist())
    _write(p1, cols[split:], X[:, split:].tolist())
    exact = {c: (float(X[:, j].min()), float(X[:, j].max())) for j, c in enumerate(cols)}
    return {
        "dataset": f"csv:{p0},{p1}",
        "public": _bounds(root / f"{name}_public.csv", dict(zip(cols, public, strict=True))),
        "exact": _bounds(root / f"{name}_exact.csv", exact),
    }


def breast(root: Path) -> dict:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    return _pair(root, "breast", d.data, d.target, 15, domains.BREAST)


def phishing(root: Path) -> dict:
    from securevfl.data import load_dataset

    ds = load_dataset("phishing")  # the coding {-1, 0, 1}: scaled by its domain, unchanged
    X = np.rint(ds.X)
    return _pair(root, "phishing", X, ds.y, X.shape[1] // 2, [(-1.0, 1.0)] * X.shape[1])


def bank(root: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from deploy_data import write_pair

    write_pair(root / "bank", root / "insurer", n=2000)
    bank_csv, ins_csv = root / "bank" / "bank.csv", root / "insurer" / "insurer.csv"
    cols = {"income": [], "claims": [], "premium": []}
    for path in (bank_csv, ins_csv):
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                for c in cols:
                    if r.get(c):
                        cols[c].append(float(r[c]))
    exact = {c: (min(v), max(v)) for c, v in cols.items()}
    public = {"income": (0.0, 150.0), "claims": (0.0, 20.0), "premium": (0.0, 3000.0)}
    return {
        "dataset": f"csv:{bank_csv},{ins_csv}",
        "public": _bounds(root / "bank_public.csv", public),
        "exact": _bounds(root / "bank_exact.csv", exact),
        "id_column": "customer_id",
        "label_column": "default_12m",
        "categories": str(root / "bank" / "categories.json"),
    }


def accuracy(pair: dict, method: str, eps: float, seed: int, arm: str) -> float:
    spec = {"method": method, "dataset": pair["dataset"], "parties": 2, "epsilon": eps}
    spec.update(seed=seed, delta=1e-5)
    for key in ("id_column", "label_column", "categories"):
        if key in pair:
            spec[key] = pair[key]
    if arm != "dp":
        spec["bounds"] = pair[arm]
    rec = run_experiment(build_spec(spec))
    if arm == "dp":  # the bounds were released and composed
        assert rec["privacy"]["bounds"]["parties"] == [0, 1], rec["privacy"]
    return float(rec["metrics"]["accuracy"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--datasets", default="breast,phishing,bank")
    ap.add_argument("--methods", default="hdp-vfl,fm-vfl")
    ap.add_argument("--epsilons", default="2,8")
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    makers = {"breast": breast, "phishing": phishing, "bank": bank}
    print("| data | method | ε | DP bounds | public --bounds | exact min/max (old hole) |")
    print("|---|---|---|---|---|---|")
    for name in a.datasets.split(","):
        pair = makers[name](a.out)
        for method in a.methods.split(","):
            for eps in map(float, a.epsilons.split(",")):
                cells = []
                for arm in ARMS:
                    accs = [accuracy(pair, method, eps, s, arm) for s in range(a.seeds)]
                    sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
                    cells.append(f"{statistics.mean(accs):.3f} ± {sd:.3f}")
                print(f"| {name} | {method} | {eps:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
