"""Worker of bench/peers/diffprivlib_lr.py, run in ITS OWN venv (diffprivlib 0.6.6 needs
scikit-learn < 1.6): fits diffprivlib's LogisticRegression on one exported split and prints one
JSON line. Imports numpy and diffprivlib only (never securevfl).

Usage: diffprivlib_worker.py SPLIT.npz EPSILON SEED"""

import json
import sys
import time

import numpy as np


def main(path: str, epsilon: float, seed: int) -> dict:
    import diffprivlib
    from diffprivlib.models import LogisticRegression

    with np.load(path, allow_pickle=False) as z:  # arrays only: nothing in it executes
        X, y, Xt, yt = z["X"], z["y"], z["Xt"], z["yt"]
    norm = float(np.linalg.norm(X, axis=1).max())
    # data_norm: securevfl's rows have L2 norm <= 1 (the public row-norm bound), so 1 is public
    model = LogisticRegression(epsilon=epsilon, data_norm=1.0, random_state=seed, max_iter=1000)
    t0 = time.perf_counter()
    model.fit(X, y)
    train_s = time.perf_counter() - t0
    scores = model.predict_proba(Xt)[:, 1] if len(model.classes_) == 2 else None
    out = {
        "accuracy": float((model.predict(Xt) == yt).mean()),
        "train_s": train_s,
        "max_row_norm": norm,
        "version": diffprivlib.__version__,
    }
    if scores is not None:
        pos, neg = scores[yt == model.classes_[1]], scores[yt != model.classes_[1]]
        # AUC as the share of (positive, negative) pairs ranked right, ties half
        out["auc"] = float(
            (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
        )
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))))
