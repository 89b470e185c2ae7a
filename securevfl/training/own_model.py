"""The label holder's own model beside its partners' releases (release-once's head input).

``--own-model columns``: its prepared columns go into the head as they are (the head, an MLP,
learns from them and the releases together). ``--own-model gbdt``: besides the columns, the
head also gets the log-odds of boosted trees fitted on the label holder's columns alone
(``models.trees.out_of_fold_logits``: a training row's logit from trees that never saw it, so
the head learns how far to trust it as it will on a test row). The head then only has to learn
what the partners' releases add to the label holder's strongest model alone. ``--own-model
auto`` trains a head on each and keeps the one with the lower loss on held-out training rows.

Everything here is the label holder's own columns and labels, computed where they live: no
message, no release, no privacy event (the accountant's ε of a run is unchanged by it).
"""

from __future__ import annotations

import numpy as np

from securevfl.context import RunContext
from securevfl.models.trees import out_of_fold_logits

OWN_MODELS = ("columns", "gbdt", "auto")  # auto: the head picks (``release_once._best_head``)


def own_inputs(ctx: RunContext, own_model: str) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) head inputs from the label holder's own columns (empty blocks when it
    holds none)."""
    L, info = ctx.info.label_party, ctx.info
    if L >= info.data_parties:
        return (
            np.zeros((info.n_train, 0), dtype=np.float32),
            np.zeros((info.n_test, 0), dtype=np.float32),
        )
    v = ctx.views[L]
    X, Xt = np.asarray(v.X_train, dtype=np.float32), np.asarray(v.X_test, dtype=np.float32)
    if own_model != "gbdt" or X.shape[1] == 0:
        return X, Xt
    seed = int(ctx.shared_seed % 2**31)
    lo, lo_t = out_of_fold_logits(
        X, np.asarray(v.y_train), Xt, n_classes=int(info.n_classes or 2), seed=seed
    )
    return np.concatenate([X, lo], axis=1), np.concatenate([Xt, lo_t], axis=1)
