"""scikit-learn's HistGradientBoosting as plain number arrays, and its scores from them.

A saved model holds numbers only (``model.files``: .npy without pickle), so the label holder's
boosted trees are written as their nodes: per node its column, threshold, where a blank (NaN)
goes, its two children, whether it is a leaf and its value; per tree its first node; and the
model's baseline. Scoring walks every row down every tree with numpy, as scikit-learn's
predictor does (``x <= threshold`` goes left, a NaN goes where ``missing_go_to_left`` says),
and adds the leaf values to the baseline: the raw margin (binary: the log-odds). Arrays read
from a file are checked before use (children after their parent, so a walk ends; columns
within the rows' width), so a hostile file can raise but never loop or index out of bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PREFIX = "own_trees_"
FIELDS = ("feature", "threshold", "missing_left", "left", "right", "leaf", "value")
LOGIT_CLIP = float(np.log((1 - 1e-6) / 1e-6))  # models.trees._logits' probability clip


def trees_to_arrays(model: Any) -> dict[str, np.ndarray]:
    """A fitted single-output HistGradientBoosting (binary or regression) as arrays."""
    if getattr(model, "n_trees_per_iteration_", 1) != 1:
        raise ValueError("only single-output boosted trees (binary, regression) are exported")
    nodes = [p[0].nodes for p in model._predictors]
    if any(np.any(n["is_categorical"]) for n in nodes):
        raise ValueError("categorical splits are not exported")
    starts = np.cumsum([0, *[len(n) for n in nodes[:-1]]]).astype(np.int64)
    cat = np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.float64)
    shift = np.repeat(starts, [len(n) for n in nodes])
    leaf = cat["is_leaf"].astype(np.uint8)
    return {
        PREFIX + "feature": cat["feature_idx"].astype(np.int64),
        PREFIX + "threshold": cat["num_threshold"].astype(np.float64),
        PREFIX + "missing_left": cat["missing_go_to_left"].astype(np.uint8),
        PREFIX + "left": np.where(leaf, -1, cat["left"].astype(np.int64) + shift),
        PREFIX + "right": np.where(leaf, -1, cat["right"].astype(np.int64) + shift),
        PREFIX + "leaf": leaf,
        PREFIX + "value": cat["value"].astype(np.float64),
        PREFIX + "roots": starts,
        PREFIX + "baseline": np.asarray(model._baseline_prediction, dtype=np.float64).reshape(1),
    }


def check_tree_arrays(arrays: dict[str, np.ndarray], n_columns: int) -> None:
    """ValueError unless the arrays describe finite trees over ``n_columns`` columns."""
    missing = [f for f in (*FIELDS, "roots", "baseline") if PREFIX + f not in arrays]
    if missing:
        raise ValueError(f"boosted trees need arrays {[PREFIX + f for f in missing]}")
    a = {f: np.asarray(arrays[PREFIX + f]) for f in (*FIELDS, "roots", "baseline")}
    n = len(a["leaf"])
    if any(a[f].shape != (n,) for f in FIELDS) or a["baseline"].shape != (1,):
        raise ValueError(f"boosted trees' node arrays must all have {n} entries")
    idx = np.arange(n)
    inner = a["leaf"] == 0
    for side in ("left", "right"):  # a child after its parent: every walk ends
        c = a[side][inner]
        if np.any(c <= idx[inner]) or np.any(c >= n):
            raise ValueError(f"boosted trees' {side} children must follow their node")
    if np.any((a["feature"][inner] < 0) | (a["feature"][inner] >= n_columns)):
        raise ValueError(f"boosted trees' columns must be in [0, {n_columns})")
    if np.any((a["roots"] < 0) | (a["roots"] >= max(n, 1))):
        raise ValueError("boosted trees' roots must be nodes")
    if not np.all(np.isfinite(a["value"])) or not np.all(np.isfinite(a["baseline"])):
        raise ValueError("boosted trees' values must be finite")


def tree_margins(arrays: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """The raw margin of every row of ``X``: baseline + the leaf value of each tree."""
    X = np.asarray(X, dtype=np.float64)
    check_tree_arrays(arrays, X.shape[1])
    a = {f: np.asarray(arrays[PREFIX + f]) for f in (*FIELDS, "roots", "baseline")}
    rows = np.arange(len(X))
    out = np.full(len(X), float(a["baseline"][0]))
    for root in a["roots"]:
        node = np.full(len(X), int(root), dtype=np.int64)
        while True:
            inner = a["leaf"][node] == 0
            if not inner.any():
                break
            f = np.where(inner, a["feature"][node], 0)
            x = X[rows, f]
            go_left = np.where(np.isnan(x), a["missing_left"][node] == 1, x <= a["threshold"][node])
            nxt = np.where(go_left, a["left"][node], a["right"][node])
            node = np.where(inner, nxt, node)
        out += a["value"][node]
    return out


def clipped_log_odds(arrays: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """The trees' margins clipped to ±``LOGIT_CLIP`` (fm-vfl's offsets, as a saved model
    scores them: ``model.predict_trees.own_tree_offsets``)."""
    return np.clip(tree_margins(arrays, X), -LOGIT_CLIP, LOGIT_CLIP)
