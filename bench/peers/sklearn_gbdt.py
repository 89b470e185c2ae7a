"""Peer side of the SecureBoost perf job: scikit-learn's HistGradientBoosting on the pooled rows
that ``python -m bench.secureboost_bench --dump-blocks DIR`` wrote (same depth, rounds, learning
rate, λ = 1 and bins as the run). Runs in its own environment (bench/peers/envs.toml); seconds
= fit time. The last stdout line is the perf interface's JSON object."""

import argparse
import importlib.metadata
import json
import os
import sys
import time

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", required=True, help="directory holding blocks.npz")
    ap.add_argument(
        "--label-holder-only",
        action="store_true",
        help="fit on the label holder's columns alone (the floor) instead of all of them",
    )
    ap.add_argument("--json", action="store_true", help="only the JSON line on stdout")
    a = ap.parse_args()
    path = os.path.join(a.blocks, "blocks.npz")
    if not os.path.isfile(path):
        print(f"--blocks must hold blocks.npz, got {a.blocks!r}", file=sys.stderr)
        return 2
    with np.load(path, allow_pickle=False) as b:
        trees, depth, bins = (int(v) for v in b["settings"])
        lr = float(b["lr"][0])
        Xtr, ytr, Xte, yte = b["X_train"], b["y_train"], b["X_test"], b["y_test"]
        if a.label_holder_only:
            own = int(b["own_columns"][0])
            Xtr, Xte = Xtr[:, :own], Xte[:, :own]
    model = HistGradientBoostingClassifier(
        max_iter=trees,
        max_depth=depth,
        learning_rate=lr,
        l2_regularization=1.0,
        max_bins=min(bins, 255),
        min_samples_leaf=1,
        max_leaf_nodes=None,
        early_stopping=False,
        random_state=0,
    )
    t0 = time.perf_counter()
    model.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    acc = float(np.mean(model.predict(Xte) == yte))
    out = {
        "seconds": seconds,
        "version": f"scikit-learn {importlib.metadata.version('scikit-learn')}",
        "detail": {"accuracy": acc, "pooled": not a.label_holder_only, "encrypted": False},
    }
    if not a.json:
        print(f"HistGradientBoosting: {seconds:.3f} s, accuracy {acc:.4f}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
