"""Label inference by a passive party from what it received (binary tasks for the scorings).

- ``label-norm`` (Li et al. 2022, "Label leakage and protection in two-party split learning"):
  the gradient w.r.t. a row's embedding has a larger norm for the rarer class, whose rows the
  model predicts less confidently; score = per-row norm of what the label holder sent back.
- ``label-direction`` (same paper): gradients of rows of one class point one way, of the other
  class the opposite way; score = cosine with the gradient of a row the attacker knows to be of
  the rarer class (it holds a few labelled rows).
- ``model-completion`` (Fu et al. 2022, USENIX Security): the attacker fits a classifier on its
  own bottom model's outputs for a few labelled rows per class and labels every other row.

Each scoring works per training batch (scales change as training goes on); a batch in which the
party received no per-row number (ciphertexts, masked sums) scores every row alike: chance.
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from securevfl.attacks.views import per_row, represent
from securevfl.runtime.view import View

Scored = list[tuple[np.ndarray, np.ndarray]]  # (rows of a batch, one score per row)


def norm_scores(view: View, *, label_party: int) -> Scored:
    """Per batch: the norm of the per-row gradient each row got back (0 where none)."""
    out = []
    for batch in view.train_batches():
        g = per_row(view, batch, sender=label_party)
        s = np.zeros(len(batch.rows)) if g is None else np.linalg.norm(g, axis=1)
        out.append((batch.rows, s))
    return out


def direction_scores(view: View, *, label_party: int, known_rare: set[int]) -> Scored:
    """Per batch: cosine of each row's gradient with the mean gradient of the batch's known
    rare-class rows (or, in a batch without one, the last such reference seen). Batches before
    any reference are left out (the attacker cannot orient them)."""
    out = []
    ref = None
    for batch in view.train_batches():
        g = per_row(view, batch, sender=label_party)
        if g is None:
            out.append((batch.rows, np.zeros(len(batch.rows))))
            continue
        mine = [i for i, r in enumerate(batch.rows) if int(r) in known_rare]
        if mine:
            ref = g[mine].mean(axis=0)
        if ref is None:
            continue
        norms = np.linalg.norm(g, axis=1) * (np.linalg.norm(ref) or 1.0)
        out.append((batch.rows, (g @ ref) / np.where(norms == 0, 1.0, norms)))
    return out


def batch_auc(scored: Scored, is_rare: np.ndarray, *, exclude: set[int]) -> dict[str, float]:
    """Leak AUC of scores for "row is of the rare class", per batch (rows the attacker already
    knew left out), averaged over all batches and over the first and last epoch's."""
    aucs = []
    for rows, s in scored:
        keep = np.array([int(r) not in exclude for r in rows], dtype=bool)
        t = is_rare[rows[keep]]
        if t.min(initial=1) == t.max(initial=0):  # one class only: AUC undefined
            aucs.append(np.nan)
            continue
        aucs.append(float(roc_auc_score(t, s[keep])))
    a = np.array(aucs, dtype=float)
    if not np.isfinite(a).any():
        return {"auc": 0.5, "auc_first_epoch": 0.5, "auc_last_epoch": 0.5, "batches": 0}
    per_epoch = max(1, len(a) // max(1, _epochs_in(scored, len(is_rare))))
    return {
        "auc": float(np.nanmean(a)),
        "auc_first_epoch": float(np.nanmean(a[:per_epoch])),
        "auc_last_epoch": float(np.nanmean(a[-per_epoch:])),
        "batches": int(np.isfinite(a).sum()),
    }


def _epochs_in(scored: Scored, n_train: int) -> int:
    return max(1, round(sum(len(r) for r, _ in scored) / max(1, n_train)))


def model_completion(
    view: View, known: dict[int, int], *, seed: int, use_model: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, predicted labels) for every training row the attacker did not know, from a
    classifier fitted on its own model's outputs (or its raw rows) for the known rows."""
    Z = represent(view.model if use_model else None, view.own.X_train)
    rows = np.array(sorted(known), dtype=int)
    labels = np.array([known[int(r)] for r in rows])
    rest = np.setdiff1d(np.arange(len(Z)), rows)
    if len(np.unique(labels)) < 2:
        return rest, np.full(len(rest), labels[0])
    scaler = StandardScaler().fit(Z[rows])
    clf = LogisticRegression(max_iter=2000, random_state=seed)
    clf.fit(scaler.transform(Z[rows]), labels)
    return rest, clf.predict(scaler.transform(Z[rest]))
