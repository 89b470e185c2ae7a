"""Reading a recorded party view: the per-row numbers it holds, and its own model's outputs.

Attacks see payloads only as the runtime delivered them. A payload counts as *per-row* when it
is a numeric numpy array whose first axis has one entry per row of the batch in progress;
anything else (a CKKS ciphertext, a key, a masked sum's bookkeeping, an aggregate over the
batch) carries no per-row number the attacker could read, and the attacks treat it so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from securevfl.runtime.view import Batch, View


def numeric(payload: Any) -> np.ndarray | None:
    """The payload as a float array if it is a numeric numpy array, else None."""
    if isinstance(payload, np.ndarray) and payload.dtype.kind in "fiub":
        return payload.astype(np.float64)
    return None


def per_row(view: View, batch: Batch, *, sender: int | None = None) -> np.ndarray | None:
    """The per-row numbers ``view``'s party received during ``batch`` (from ``sender``), one
    row per batch row (messages concatenated along the columns); None if it received none."""
    b = len(batch.rows)
    parts = []
    for r in view.messages_of(batch, sender=sender):
        a = numeric(r.payload)
        if a is not None and a.ndim >= 1 and a.shape[0] == b:
            parts.append(a.reshape(b, -1))
    return np.hstack(parts) if parts else None


def latest_per_row(view: View, *, sender: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, values): for every training row, the per-row numbers ``sender`` sent about it the
    last time it was in a batch (the final epoch's, made by the nearly final model)."""
    latest: dict[int, np.ndarray] = {}
    for batch in view.train_batches():
        got = per_row(view, batch, sender=sender)
        if got is None:
            continue
        for i, row in enumerate(batch.rows):
            latest[int(row)] = got[i]
    rows = np.array(sorted(latest), dtype=int)
    if not rows.size:
        return rows, np.zeros((0, 0))
    return rows, np.stack([latest[int(r)] for r in rows])


def represent(model: Any, X: np.ndarray) -> np.ndarray:
    """What the party's own local model makes of its rows: a torch bottom model's embedding,
    or a linear block's score ``X w`` (GLM); the raw rows when it kept no model."""
    if model is None:
        return np.asarray(X, dtype=np.float64)
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return model(torch.as_tensor(X, dtype=torch.float32)).numpy().astype(np.float64)
    w = np.asarray(model, dtype=np.float64)
    return (np.asarray(X, dtype=np.float64) @ w).reshape(len(X), -1)


def class_probabilities(outputs: np.ndarray, n_classes: int) -> np.ndarray:
    """Label-holder scores as an (n, C) probability matrix (a binary GLM gives P(y = 1))."""
    p = np.asarray(outputs, dtype=np.float64)
    if p.ndim == 1:
        p = np.clip(p, 0.0, 1.0)
        p = np.column_stack([1.0 - p, p])
    if p.shape[1] != n_classes:
        raise ValueError(f"outputs must have {n_classes} columns, got {p.shape[1]}")
    return np.clip(p, 1e-12, 1.0)
