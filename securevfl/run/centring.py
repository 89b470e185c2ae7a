"""Step 5 of a run: each local party centres its numeric columns (on released means with a
budget, on its own training means without).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from securevfl.context import (
    RunSpec,
    has_budget,
    noise_seed,
)
from securevfl.methods.base import Method
from securevfl.privacy.centring import (
    CENTRE_SHARE,
    centre,
    centring_epsilon,
    released_means,
)
from securevfl.rng import make_noise_rng


def center_numeric_columns(
    train: Any, test: Any, facts: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """Centre each numeric column on its training mean, then rescale it into [-1, 1].

    Each party can do this on its own columns with its own data (the operation is column-wise,
    so applying it to the table equals every party applying it to its block). Test values are
    clipped to [-1, 1] so the schema's row-norm bound still holds. One-hot columns are left as
    they are: centred, a one-hot group would no longer contribute at most 1 to ||x||^2.
    Why: GLMs with a norm-bounded weight vector (HDP-VFL's clipping, FM's bounded inputs) and
    no room for an intercept learn a biased threshold on uncentred min-max scaled features.
    """
    numeric = [g[0] for g in train.groups if len(g) == 1]
    if train.columns is not None:  # X holds only some columns: their positions in X
        numeric = [int(j) for j in np.flatnonzero(np.isin(train.columns, numeric))]
    Xtr, Xte = train.X.copy(), test.X.copy()
    mean = Xtr[:, numeric].mean(axis=0)
    scale = np.abs(Xtr[:, numeric] - mean).max(axis=0)
    scale[scale == 0] = 1.0
    Xtr[:, numeric] = (Xtr[:, numeric] - mean) / scale
    Xte[:, numeric] = np.clip((Xte[:, numeric] - mean) / scale, -1.0, 1.0)
    if facts is not None:  # global column -> (mean, scale): a saved model centres new rows so
        held = np.arange(train.X.shape[1]) if train.columns is None else train.columns
        facts["center"] = {
            int(held[j]): (float(m), float(c)) for j, m, c in zip(numeric, mean, scale)
        }
    return dataclasses.replace(train, X=Xtr), dataclasses.replace(test, X=Xte)


def center_released(
    train: Any,
    test: Any,
    spec: RunSpec,
    blocks: list[np.ndarray],
    parties: list[int],
    unit: str,
    facts: dict[str, Any] | None = None,
    share: float = CENTRE_SHARE,
) -> tuple[Any, Any]:
    """Centring in a run with an ε: each party's numeric columns on their Laplace-released
    training means, scaled by the public 1 + |m~| (``privacy.centring``; the record composes
    the releases into its ε). ``parties``: the data parties whose columns this process holds."""
    numeric = np.asarray([g[0] for g in train.groups if len(g) == 1], dtype=int)
    held = np.arange(train.X.shape[1]) if train.columns is None else np.asarray(train.columns)
    Xtr, Xte = train.X.copy(), test.X.copy()
    eps_c = centring_epsilon(float(spec.epsilon), unit=unit, parties=spec.parties, share=share)
    for k in parties:
        cols = np.intersect1d(np.intersect1d(blocks[k], numeric), held)
        pos = np.searchsorted(held, cols)
        rng = make_noise_rng(noise_seed(spec), purpose="noise/centring", party=k)
        mean = released_means(Xtr[:, pos], epsilon=eps_c, rng=rng)
        Xtr[:, pos], Xte[:, pos] = centre(Xtr[:, pos], mean), centre(Xte[:, pos], mean)
        if facts is not None:  # global column -> (released mean, public scale), for new rows
            facts.setdefault("center", {}).update(
                {int(c): (float(m), 1.0 + abs(float(m))) for c, m in zip(cols, mean)}
            )
    return dataclasses.replace(train, X=Xtr), dataclasses.replace(test, X=Xte)


def centre_columns(
    spec: RunSpec,
    method: Method,
    train: Any,
    test: Any,
    blocks: list[np.ndarray],
    wanted: list[int],
    facts: dict[str, Any] | None,
) -> tuple[Any, Any]:
    """Step 5: each local party centres its numeric columns (released means with a budget)."""
    if spec.center and has_budget(spec):  # the means are released under the budget
        K = spec.parties
        here = list(range(K)) if method.pooled_data else [k for k in wanted if k < K]
        return center_released(
            train, test, spec, blocks, here, method.privacy_unit, facts, method.centre_share(spec)
        )
    if spec.center:
        return center_numeric_columns(train, test, facts)
    return train, test
