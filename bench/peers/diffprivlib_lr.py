"""IBM diffprivlib's LogisticRegression on securevfl's own splits: an OPTIONAL central reference
(issue 25), never needed by ``make test``.

diffprivlib 0.6.6 needs scikit-learn < 1.6, so it lives in its own venv, created here on demand
(``--venv``, default ``~/.cache/securevfl/diffprivlib-venv``: ``python3 -m venv`` then
``pip install diffprivlib==0.6.6 'scikit-learn<1.6'``). For each dataset and seed this script
exports securevfl's pooled split (the same rows, columns, scaling and row-norm bound as every
method's run at that seed) to an ``.npz`` (arrays only), runs ``diffprivlib_worker.py`` in that
venv at each ε, and appends one line per run to ``OUT/peers/diffprivlib.jsonl``; the compare
suite's report (``bench/reports/diffprivlib.py``) shows them beside securevfl's DP methods.

diffprivlib's guarantee: ε-DP (δ = 0) by objective perturbation (Chaudhuri, Monteleoni & Sarwate
2011) for rows of L2 norm <= data_norm = 1 (securevfl's public row-norm bound), its own analysis.

Usage: python -m bench.peers.diffprivlib_lr --out DIR [--datasets breast,phishing,adult]
[--epsilon 0.5,1,2,4,8] [--seeds 0,1,2] [--n 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import baselines
from securevfl.experiment import build_views
from securevfl.registry import lookup
from securevfl.run_options import build_spec

PIN = ["diffprivlib==0.6.6", "scikit-learn<1.6"]
WORKER = Path(__file__).with_name("diffprivlib_worker.py")
DEFAULT_VENV = Path.home() / ".cache" / "securevfl" / "diffprivlib-venv"
TIMEOUT_S = 600


def ensure_venv(venv: Path) -> Path:
    """The venv's python, created with diffprivlib installed when missing."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=TIMEOUT_S)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PIN], check=True, timeout=TIMEOUT_S)
    return py


def export_split(dataset: str, seed: int, n: int | None, path: Path) -> dict:
    """securevfl's pooled split of ``dataset`` at ``seed`` as arrays in ``path``."""
    baselines.load_all()  # the registry: the split is centralized's (pooled rows)
    params: dict = {"method": "centralized", "model": "glm", "dataset": dataset, "seed": seed}
    if n:
        params["n"] = n
    spec = build_spec(params)
    info, _, pooled = build_views(spec, lookup("method", "centralized")(), [0])
    X, y, Xt, yt = pooled()
    np.savez(path, X=X, y=y, Xt=Xt, yt=yt)
    return {"n_train": int(len(y)), "n_test": int(len(yt)), "task": info.task}


def run_one(py: Path, split: Path, epsilon: float, seed: int) -> dict:
    done = subprocess.run(
        [str(py), str(WORKER), str(split), repr(epsilon), str(seed)],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--datasets", default="breast,phishing,adult")
    ap.add_argument("--epsilon", default="0.5,1,2,4,8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--n", type=int, default=4000, help="rows of phishing/adult (0: all)")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    a = ap.parse_args(argv)
    py = ensure_venv(a.venv)
    dest = a.out / "peers" / "diffprivlib.jsonl"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for ds in a.datasets.split(","):
            for seed in [int(s) for s in a.seeds.split(",")]:
                split = Path(tmp) / f"{ds}-{seed}.npz"
                meta = export_split(ds, seed, None if ds == "breast" else a.n or None, split)
                if meta["task"] != "binary":
                    continue  # the reference is binary logistic regression
                for eps in [float(e) for e in a.epsilon.split(",")]:
                    res = run_one(py, split, eps, seed)
                    rec = {
                        "method": "diffprivlib-lr",
                        "dataset": ds,
                        "seed": seed,
                        **meta,
                        "epsilon": eps,
                        "delta": 0.0,
                        "unit": "sample",
                        "accountant": f"diffprivlib {res.pop('version')} LogisticRegression "
                        "(objective perturbation, pure ε, data_norm 1)",
                        **res,
                    }
                    with dest.open("a") as f:
                        f.write(json.dumps(rec) + "\n")
                    print(f"{ds} seed {seed} ε {eps:g}: accuracy {rec['accuracy']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
