"""Vertical partitioning of columns among parties, and the public row-norm bound.

Partitioning works on column *groups* (one per one-hot categorical, a singleton per numeric
column) so that a one-hot attribute is never split between parties.

Why a global row-norm bound holds without pooling data
-------------------------------------------------------
Mechanisms such as HDP-VFL need ``||x_i|| <= 1`` for every full row ``x_i``, yet no party may see
another's values. The bound follows from the *public schema* alone (column types and groups), not
from the data: every numeric column lies in [-1, 1], so it adds at most 1 to ``||x_i||^2``; a
one-hot group has exactly one active 0/1 entry (a 0/1 indicator at most one), so it adds at most
1 as well. Party k's block therefore satisfies ``||x_i^(k)||^2 <= B_k^2`` where ``B_k^2`` is the
number of groups it holds (:func:`schema_norm_bound`), and the full row satisfies
``||x_i||^2 = sum_k ||x_i^(k)||^2 <= sum_k B_k^2 = T``. T is a public number (the total number of
groups), so each party divides its own block by ``sqrt(T)`` (:func:`scale_block_to_unit_rows`) and
every full row then has norm <= 1, with no party having looked at another's columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from securevfl.errors import ConfigError, check_int, check_positive
from securevfl.rng import make_rng

SCHEMES = ("contiguous", "random")


def _check_groups(groups: Sequence[Sequence[int]]) -> int:
    """Return the column count; groups must cover 0..d-1 exactly once."""
    flat = [int(c) for g in groups for c in g]
    if any(len(g) == 0 for g in groups):
        raise ConfigError("column groups must be non-empty, got an empty group")
    if sorted(flat) != list(range(len(flat))):
        raise ConfigError(
            f"column groups must cover columns 0..{len(flat) - 1} exactly once, "
            f"got {sorted(flat)[:10]}..."
        )
    return len(flat)


def _contiguous(sizes: list[int], parties: int) -> list[list[int]]:
    """Split group indices into consecutive chunks whose column counts are as even as possible."""
    cum = np.concatenate([[0], np.cumsum(sizes)])  # cum[g] = columns in the first g groups
    total, n_groups = int(cum[-1]), len(sizes)
    cuts = [0]
    for j in range(1, parties):
        # the j-th cut goes at the group boundary closest to j*total/parties, leaving at least
        # one group for each later party (so no party is empty)
        lo, hi = cuts[-1] + 1, n_groups - (parties - j)
        cand = np.arange(lo, hi + 1)
        cuts.append(int(cand[np.argmin(np.abs(cum[cand] - j * total / parties))]))
    cuts.append(n_groups)
    return [list(range(cuts[k], cuts[k + 1])) for k in range(parties)]


def _random(sizes: list[int], parties: int, seed: int) -> list[list[int]]:
    """Shuffle groups, then give each to the party holding the fewest columns so far."""
    order = make_rng(seed, purpose="partition").permutation(len(sizes))
    load = [0] * parties
    out: list[list[int]] = [[] for _ in range(parties)]
    for g in order:
        k = min(range(parties), key=lambda p: (load[p], p))
        out[k].append(int(g))
        load[k] += sizes[g]
    return out


def _explicit(
    groups: Sequence[Sequence[int]], d: int, parties: int, scheme: Sequence[Sequence[int]]
) -> list[np.ndarray]:
    if len(scheme) != parties:
        raise ConfigError(
            f"an explicit partition must list one column set per party "
            f"({parties}), got {len(scheme)}"
        )
    owner = np.full(d, -1)
    for k, cols in enumerate(scheme):
        if len(cols) == 0:
            raise ConfigError(f"every party must hold at least one column, party {k} holds none")
        for c in cols:
            c = int(c)
            if not 0 <= c < d:
                raise ConfigError(f"column indices must be in [0, {d - 1}], got {c} (party {k})")
            if owner[c] != -1:
                raise ConfigError(
                    f"each column must belong to exactly one party, column {c} is "
                    f"given to parties {owner[c]} and {k}"
                )
            owner[c] = k
    if (owner == -1).any():
        raise ConfigError(
            f"each column must belong to exactly one party, column "
            f"{int(np.flatnonzero(owner == -1)[0])} is given to none"
        )
    for g in groups:
        holders = sorted({int(owner[c]) for c in g})
        if len(holders) > 1:
            raise ConfigError(
                f"a one-hot group must stay with one party, group {list(g)} is "
                f"split across parties {holders}"
            )
    return [np.sort(np.asarray(cols, dtype=np.int64)) for cols in scheme]


def partition_columns(
    groups: list[list[int]],
    parties: int,
    *,
    scheme: str | Sequence[Sequence[int]] = "contiguous",
    seed: int = 0,
) -> list[np.ndarray]:
    """Column indices held by each party k = 0..parties-1 (sorted int64 arrays).

    Parameters
    ----------
    groups : column groups of the dataset (``Dataset.groups``); never split.
    parties : number of parties, 2 <= parties <= number of groups.
    scheme : 'contiguous' (consecutive groups, column counts as even as possible), 'random'
        (groups shuffled with ``make_rng(seed, purpose="partition")``, then dealt to the party
        holding fewest columns), or an explicit list of one column list per party.
    seed : used by 'random' only.
    """
    k = check_int("parties", parties, minimum=2)
    d = _check_groups(groups)
    if k > len(groups):
        raise ConfigError(f"parties must be <= number of column groups ({len(groups)}), got {k}")
    if not isinstance(scheme, str):
        return _explicit(groups, d, k, scheme)
    sizes = [len(g) for g in groups]
    if scheme == "contiguous":
        assign = _contiguous(sizes, k)
    elif scheme == "random":
        assign = _random(sizes, k, seed)
    else:
        raise ConfigError(
            f"scheme must be one of {list(SCHEMES)} or a list of column lists, got {scheme!r}"
        )
    return [np.sort(np.asarray([c for g in a for c in groups[g]], dtype=np.int64)) for a in assign]


def schema_norm_bound(groups: list[list[int]], columns: Sequence[int]) -> float:
    """Public bound B^2 on the squared L2 norm of a row restricted to ``columns``.

    Each group touched by ``columns`` adds at most 1 (a numeric column in [-1, 1], or a one-hot
    group with one active 0/1 entry), so B^2 is the number of such groups.
    """
    cols = {int(c) for c in columns}
    return float(sum(1 for g in groups if cols.intersection(g)))


def row_norm_bound(groups: list[list[int]], columns: Sequence[int]) -> float:
    """Public bound B on the L2 norm of a row restricted to ``columns`` (sqrt of the above)."""
    return math.sqrt(schema_norm_bound(groups, columns))


def scale_block_to_unit_rows(X_block: np.ndarray, *, total_bound_sq: float) -> np.ndarray:
    """Divide a party's block by sqrt(total_bound_sq) so every FULL row has norm <= 1.

    ``total_bound_sq`` is the sum over parties of :func:`schema_norm_bound` (for a partition that
    keeps groups whole, the number of groups): a public number, so no data are pooled.
    """
    t = check_positive("total_bound_sq", total_bound_sq)
    return np.asarray(X_block, dtype=np.float64) / math.sqrt(t)
