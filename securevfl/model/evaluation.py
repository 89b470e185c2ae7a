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
            out["auc"] = binary_auc(y_true, p)
        return out
    if task == "multiclass":
        return {"accuracy": float(np.mean(np.argmax(scores, axis=1) == y_true))}
    return {"mse": float(np.mean((scores - y_true) ** 2))}


def average_precision(y_true: np.ndarray, scores: np.ndarray) -> float:
    """The average precision of ``scores`` for the label value 1 (pbm-vfl's AUPRC, the seed
    paper's phishing metric): Σ_k (R_k - R_(k-1)) P_k over the distinct scores from the highest
    down, P_k and R_k the precision and recall of "score >= the k-th value" (R_0 = 0), which is
    what scikit-learn's ``average_precision_score`` computes (a test holds the two equal). In
    numpy for the same reason as :func:`binary_auc`: the import of ``sklearn.metrics`` (with the
    pandas it pulls in) cost each label holder's process about 2 CPU-s for this one number."""
    y = np.asarray(y_true) == 1
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # the last row of each distinct score
    tps = np.cumsum(y)[last].astype(np.float64)
    fps = (last + 1) - tps
    if tps[-1] == 0:  # no positive row: scikit-learn sets the recall to 1, so AP is 0
        return 0.0
    recall = tps / tps[-1]
    precision = tps / (tps + fps)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def binary_auc(y_true: np.ndarray, scores: np.ndarray) -> float:
    """The ROC AUC of ``scores`` for the larger of two label values: the Mann-Whitney U over
    n_pos n_neg, tied scores counted one half (average ranks), which is the area under the
    trapezoidal ROC curve that scikit-learn's ``roc_auc_score`` computes (a test holds the two
    equal). In numpy because a run's label holder would otherwise import scikit-learn (about
    2.5 CPU-s a process) for this one number."""
    y = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    classes = np.unique(y)
    if len(classes) != 2:
        raise ValueError(f"y_true must hold exactly two classes, got {len(classes)}")
    pos = y == classes[1]
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based, ties averaged
    n_pos = int(pos.sum())
    n_neg = len(y) - n_pos
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
