"""Scoring rows with trees split across parties (SPMD): each row walks every tree, one level per
round, and at a node owned by party k only k can say which way it goes.

Per level the label holder sends each party k the record ids it must answer (one int32 per row
and tree, -1 where the row's current node is not k's) and k returns one byte per query: left or
right. So party k learns, for each scored row, which of its own records the row reached (the
instance space of its nodes); the label holder learns each row's path, as SecureBoost's
prediction does. Used by ``secureboost``'s test scoring and by ``securevfl predict``, so both
give the same scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from securevfl.models.boosted_trees import LEAF, Lookup, TreeSet
from securevfl.runtime.expect import Expect


def _answer(lookup: Lookup, bins: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Party k's answers: 1 where the row goes left at the queried record (0 elsewhere)."""
    q = np.asarray(queries)
    if q.shape[0] != len(bins) or q.ndim != 2:
        raise ValueError(f"queries must have one row per scored row ({len(bins)}), got {q.shape}")
    out = np.zeros(q.shape, dtype=np.uint8)
    rows, trees = np.nonzero(q >= 0)
    if len(rows):
        rec = q[rows, trees].astype(np.int64)
        if rec.max() >= len(lookup.column):
            raise ValueError(f"a query names record {rec.max()}, beyond the party's table")
        out[rows, trees] = lookup.goes_left(bins, rows, rec)
    return out


def _query_rule(lookup: Lookup | None, bins: np.ndarray | None) -> Expect:
    """A party's queries: a record of its table (-1: none) per scored row and tree."""
    rows = None if bins is None else len(bins)
    top = None if lookup is None else len(lookup.column) - 1
    return Expect("tree queries", dtype="i", shape=(rows, None), lo=-1, hi=top)


def route_margins(
    rt: Any,
    *,
    label_party: int,
    parties: list[int],
    depth: int,
    trees: TreeSet | None,
    lookups: Mapping[int, Lookup],
    bins: Mapping[int, np.ndarray],
    n_rows: int | None,
) -> np.ndarray | None:
    """The margin (base + sum of leaf values) of every row at the label holder; None elsewhere.

    ``trees``: the skeleton (at the label holder); ``lookups``/``bins``: the tables and binned
    rows of the parties living here; ``depth``: public, the number of rounds."""
    L = label_party
    cur = owner = record = None
    if rt.here(L):
        n_trees = len(trees.roots)
        owner = np.asarray(trees.owner, dtype=np.int64)
        record = np.asarray(trees.record, dtype=np.int64)
        cur = np.tile(np.asarray(trees.roots, dtype=np.int64), (n_rows, 1))
        if n_trees == 0:
            cur = np.zeros((n_rows, 0), dtype=np.int64)
    others = [k for k in parties if k != L]
    for _ in range(depth):
        asked: dict[int, Any] = {}
        for k in others:
            q = None
            if rt.here(L):
                q = np.where(owner[cur] == k, record[cur], -1).astype(np.int32)
            q = rt.send(q, src=L, dst=k, expect=_query_rule(lookups.get(k), bins.get(k)))
            asked[k] = rt.local(k, _answer, lookups.get(k), bins.get(k), q)
        answers = None if cur is None else cur.shape
        got = rt.gather(asked, dst=L, expect=Expect("tree answers", dtype="u", shape=answers, hi=1))
        if rt.here(L):
            left = np.zeros(cur.shape, dtype=bool)
            for k, a in (got or {}).items():
                mine = owner[cur] == k
                left |= mine & (np.asarray(a) == 1)
            own = owner[cur] == L
            if own.any():
                left |= _answer(lookups[L], bins[L], np.where(own, record[cur], -1)) == 1
            inner = owner[cur] != LEAF
            nxt = np.where(left, np.asarray(trees.left)[cur], np.asarray(trees.right)[cur])
            cur = np.where(inner, nxt, cur)
    if not rt.here(L):
        return None
    values = np.asarray(trees.value, dtype=np.float64)
    return trees.base + values[cur].sum(axis=1)
