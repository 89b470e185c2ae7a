"""Test metrics, computed by the label holder from the scores a method returns."""

from __future__ import annotations

import numpy as np


def metrics_for(task: str, y_true: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """accuracy and AUC (binary), accuracy (multiclass), MSE (regression)."""
    scores = np.asarray(scores, dtype=float)
    if not np.all(np.isfinite(scores)):
        # a diverged model is reported as such, never as a number that looks fine
        return {"accuracy": float("nan")} if task != "regression" else {"mse": float("nan")}
    if task == "binary":
        p = scores if scores.ndim == 1 else scores[:, 1]
        out = {"accuracy": float(np.mean((p >= 0.5).astype(int) == y_true))}
        if len(np.unique(y_true)) == 2:
            from sklearn.metrics import roc_auc_score  # here: importing sklearn costs ~1 s

            out["auc"] = float(roc_auc_score(y_true, p))
        return out
    if task == "multiclass":
        return {"accuracy": float(np.mean(np.argmax(scores, axis=1) == y_true))}
    return {"mse": float(np.mean((scores - y_true) ** 2))}
