"""Membership inference on the trained model's outputs, as the label holder receives them.

- ``membership``: Shokri et al. 2017 (S&P), shadow models. The attacker holds a pool of rows
  from the same distribution (all columns: the usual assumption) disjoint from the target's
  training rows. Each shadow model is trained like the target on one half of a random split of
  the pool; its output vectors on that half ("in") and the other half ("out") train one attack
  classifier per true class, which then labels the target's outputs member / non-member.
  AIJack's ShadowMembershipInferenceAttack was read as a reference.
- ``membership-loss``: Yeom et al. 2018's loss threshold: rows with lower loss are members; the
  query set is balanced, so the median loss is the threshold.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier

N_SHADOWS = 4


def shadow_model(model: str, *, epochs: int, batch_size: int, hidden: int, lr: float, seed: int):
    """An estimator trained like the target: an MLP for split-NN methods (CNN bottoms too:
    scikit-learn has no CNN, an MLP is the nearest neural shadow), else a GLM."""
    if model in ("mlp", "cnn"):
        return MLPClassifier(
            hidden_layer_sizes=(hidden, hidden),
            max_iter=epochs,
            batch_size=batch_size,
            learning_rate_init=lr,
            random_state=seed,
        )
    return LogisticRegression(C=1e4, max_iter=max(100, epochs * 10), random_state=seed)


def _probs(est, X: np.ndarray, n_classes: int) -> np.ndarray:
    p = np.zeros((len(X), n_classes))
    p[:, est.classes_] = est.predict_proba(X)
    return np.clip(p, 1e-12, 1.0)


def train_attack(
    X_pool: np.ndarray, y_pool: np.ndarray, n_classes: int, *, make_shadow, seed: int
) -> dict[int, RandomForestClassifier | float]:
    """Per-class attack classifiers from shadow models' outputs on their in / out halves
    (a class the shadows never saw both ways gets a constant: the share of "in" rows)."""
    rng = np.random.default_rng(seed)
    feats, labels, member = [], [], []
    for j in range(N_SHADOWS):
        perm = rng.permutation(len(y_pool))
        half = len(perm) // 2
        inn, out = perm[:half], perm[half : 2 * half]
        est = make_shadow(seed + 1 + j)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X_pool[inn], y_pool[inn])
        for rows, m in ((inn, 1), (out, 0)):
            feats.append(_probs(est, X_pool[rows], n_classes))
            labels.append(y_pool[rows])
            member.append(np.full(len(rows), m))
    F, Y, M = np.vstack(feats), np.concatenate(labels), np.concatenate(member)
    attack: dict[int, RandomForestClassifier | float] = {}
    for c in range(n_classes):
        sel = Y == c
        if sel.sum() < 4 or len(np.unique(M[sel])) < 2:
            attack[c] = float(M[sel].mean()) if sel.any() else 0.5
            continue
        clf = RandomForestClassifier(n_estimators=100, min_samples_leaf=3, random_state=seed)
        attack[c] = clf.fit(F[sel], M[sel])
    return attack


def shadow_scores(attack: dict, probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(member) of each queried row from the attack classifier of its class."""
    s = np.zeros(len(y))
    for c, clf in attack.items():
        sel = y == c
        if not sel.any():
            continue
        if isinstance(clf, float):
            s[sel] = clf
        else:
            col = list(clf.classes_).index(1) if 1 in clf.classes_ else None
            s[sel] = clf.predict_proba(probs[sel])[:, col] if col is not None else 0.0
    return s


def loss_scores(probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Minus the cross-entropy loss of each queried row (higher: more likely a member)."""
    return np.log(probs[np.arange(len(y)), y])
