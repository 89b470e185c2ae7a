"""Scoring new rows with saved trees.

The label holder's own boosted trees (fm-vfl ``--offset gbdt``, ``local --model gbdt``): their
margin on its own prepared rows, added to the linear margin. A ``secureboost`` model: each
party bins its own columns by the public domain and answers for its own nodes
(``training.tree_routing``), exactly as the training run scored its test rows; the label holder
adds the leaf values and applies the link."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from securevfl.model.files import ModelFileError, Part
from securevfl.models.boosted_trees import Lookup, TreeSet, bin_index
from securevfl.models.tree_arrays import LOGIT_CLIP, tree_margins
from securevfl.training.tree_routing import route_margins


def own_tree_offsets(arrays: Mapping[str, np.ndarray], X: np.ndarray, *, clip: bool) -> np.ndarray:
    """The label holder's own boosted trees' margins of its prepared rows (``models.tree_arrays``,
    checked before the walk); ``clip``: as log-odds clipped like fm-vfl ``--offset gbdt``'s."""
    try:
        margin = tree_margins(dict(arrays), X)
        return np.clip(margin, -LOGIT_CLIP, LOGIT_CLIP) if clip else margin
    except ValueError as exc:
        raise ModelFileError(f"model part: {exc}") from None


def _lookup(part: Part) -> Lookup:
    n_bins = int(part.meta["bins"])
    try:
        return Lookup.from_arrays(part.arrays, len(part.card["columns"]["indices"]), n_bins)
    except ValueError as exc:
        raise ModelFileError(f"model part {str(part.path)!r}: {exc}") from None


def score_trees(
    parts: Mapping[int, Part], L: int, parties: list[int], blocks: Mapping[int, Any], rt: Any
) -> np.ndarray | None:
    """Scores (P(y = 1) or the regression value) at the label holder ``L``; None elsewhere.

    ``parts``/``blocks``: the parts and prepared blocks of the parties living here."""
    any_part = next(iter(parts.values()))
    depth, n_bins = int(any_part.meta["depth"]), int(any_part.meta["bins"])
    bound = float(any_part.card["preprocessing"]["row_norm_bound_sq"])
    lookups = {k: _lookup(p) for k, p in parts.items() if k in parties}
    bins = {k: bin_index(blocks[k], n_bins, bound) for k in lookups}
    trees = n_rows = None
    if rt.here(L):
        head = parts[L]
        try:
            trees = TreeSet.from_arrays(head.arrays, int(head.card["data_parties"]))
        except ValueError as exc:
            raise ModelFileError(f"model part {str(head.path)!r}: {exc}") from None
        if trees.depth() > depth:
            raise ModelFileError(f"model part {str(head.path)!r}: trees deeper than {depth}")
        n_rows = len(blocks[L])
    with rt.meter.in_phase("predict"):
        margin = route_margins(
            rt,
            label_party=L,
            parties=parties,
            depth=depth,
            trees=trees,
            lookups=lookups,
            bins=bins,
            n_rows=n_rows,
        )
    if margin is None:
        return None
    return 1.0 / (1.0 + np.exp(-margin)) if parts[L].meta["link"] == "sigmoid" else margin
