"""SecureBoost's encrypted histogram at a data party: the product of the label holder's
ciphertexts per (node, column, bin), and those products packed several per ciphertext.

Split in pieces (node totals, one column's cells, their join) so that the party's Dask engine
can run the columns as tasks (``secureboost_dask``) with the very functions the in-process path
calls; products modulo n^2 do not depend on their order, so both give the same numbers.

Histogram subtraction (``level_products``): below the root, the children of a split node hold
exactly its rows, so the fullest child's product per (column, bin) is the parent's (kept from
the level before) divided by its siblings': only the smaller children's rows are multiplied
(at most half of each level's rows), as XGBoost and SecureBoost subtract histograms. The
division is exact in the group, so the reply and the trees are unchanged.

Paired columns (``pair_cells``): two columns' cells come from their joint (node, bin, bin)
cells, one product per row for both columns, where a node has many rows for its joint cells.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gmpy2
import numpy as np

from protocols import paillier_pack as pk

MAX_JOINT_CELLS = 1 << 22  # (node, bin, bin) counts a column pair may take (32 MiB of int64)


def products(
    n2: gmpy2.mpz,
    cts: list[gmpy2.mpz],
    bins: np.ndarray,
    node_of_row: np.ndarray,
    n_nodes: int,
    n_bins: int,
) -> list[gmpy2.mpz | None]:
    """The product of the ciphertexts of every (node, column, bin) (None: no row).

    Each node's product over all its rows is taken once; per (node, column) the fullest bin is
    then that product divided by the other bins' (one inversion), so only the rows outside it
    are multiplied in: the same group elements, far fewer products on skewed or one-hot
    columns."""
    live = np.nonzero(node_of_row >= 0)[0]
    nodes = node_of_row[live].astype(np.int64)
    cols, total = block_cells(n2, cts, bins[live], live, nodes, n_nodes, n_bins, totals=True)
    return join_columns(n2, cols, total, n_nodes, n_bins)


def block_cells(
    n2,
    cts,
    block: np.ndarray,
    live: np.ndarray,
    nodes: np.ndarray,
    n_nodes: int,
    n_bins: int,
    totals: bool = False,
) -> tuple[list[tuple[list, np.ndarray]], list | None]:
    """``column_cells`` of each column of ``block`` (the live rows' bins), two columns at a
    time where a pair's joint cells are cheaper (:func:`pair_cells`); with ``totals``, also
    ``node_totals`` (a paired node's from the first pair's joint cells: one product per cell
    instead of per row), else None."""
    F = block.shape[1]
    out: list[tuple[list, np.ndarray]] = []
    total: list | None = [None] * n_nodes if totals else None
    for s in range(0, F - 1, 2):
        into = total if s == 0 else None  # the first pair totals its paired nodes
        out += pair_cells(n2, cts, block[:, s], block[:, s + 1], live, nodes, n_nodes, n_bins, into)
    if F % 2:
        out.append(column_cells(n2, cts, block[:, F - 1], live, nodes, n_nodes, n_bins))
    if total is not None:  # nodes the first pair did not total (per-column nodes; no pair)
        sel = np.asarray([t is None for t in total], dtype=bool)[nodes]
        rest = node_totals(n2, cts, live[sel], nodes[sel], n_nodes)
        total = [t if t is not None else r for t, r in zip(total, rest, strict=True)]
    return out, total


def node_totals(n2, cts, live: np.ndarray, nodes: np.ndarray, n_nodes: int) -> list:
    """The product of each node's ciphertexts (None: an empty node)."""
    total: list[gmpy2.mpz | None] = [None] * n_nodes
    for i, v in zip(live.tolist(), nodes.tolist(), strict=True):
        t = total[v]
        total[v] = cts[i] if t is None else t * cts[i] % n2
    return total


def column_cells(
    n2, cts, col: np.ndarray, live: np.ndarray, nodes: np.ndarray, n_nodes: int, n_bins: int
) -> tuple[list, np.ndarray]:
    """One column (``col``: the live rows' bins): per (node, bin) the product of its rows'
    ciphertexts, except each node's fullest bin (left None; ``join_columns`` divides it out),
    and the fullest bin of each node."""
    cell = nodes * n_bins + col
    counts = np.bincount(cell, minlength=n_nodes * n_bins).reshape(n_nodes, n_bins)
    fullest = counts.argmax(axis=1)  # per node: the bin whose product comes by division
    rest = col != fullest[nodes]
    acc: list[gmpy2.mpz | None] = [None] * (n_nodes * n_bins)
    _multiply_into(n2, acc, cts, live[rest], cell[rest])
    return acc, fullest


def pair_cells(
    n2,
    cts,
    col_a: np.ndarray,
    col_b: np.ndarray,
    live: np.ndarray,
    nodes: np.ndarray,
    n_nodes: int,
    n_bins: int,
    total: list | None = None,
) -> list[tuple[list, np.ndarray]]:
    """``column_cells`` of two columns through their joint (node, bin of a, bin of b) cells.

    Each row's ciphertext is multiplied once into its joint cell, and a column's (node, bin)
    product is the product of the joint cells of that bin: per node about rows + 2 x (joint
    cells) products instead of 2 x rows, so a node takes this path only where that count is
    the smaller (many rows a node; few rows and many joint cells: per column). Rows in both
    columns' fullest bins are left out (``join_columns`` divides those bins out of the node's
    total). The same group elements in another order, so the same products. Where the joint
    cells would be too many to count (``MAX_JOINT_CELLS``), each column on its own.

    ``total`` (a list of ``n_nodes``, else None): each paired node's product of all its rows is
    set there, from its joint cells (those rows then included); the others are left as they
    were."""
    nb2 = n_bins * n_bins
    if n_nodes * nb2 > MAX_JOINT_CELLS:
        return [column_cells(n2, cts, c, live, nodes, n_nodes, n_bins) for c in (col_a, col_b)]
    cell_a, cell_b = nodes * n_bins + col_a, nodes * n_bins + col_b
    full_a = np.bincount(cell_a, minlength=n_nodes * n_bins).reshape(n_nodes, n_bins)
    full_b = np.bincount(cell_b, minlength=n_nodes * n_bins).reshape(n_nodes, n_bins)
    fa, fb = full_a.argmax(axis=1), full_b.argmax(axis=1)
    joint = nodes * nb2 + col_a * n_bins + col_b
    counts = np.bincount(joint, minlength=n_nodes * nb2).reshape(n_nodes, nb2)
    rows = counts.sum(axis=1)
    both = counts[np.arange(n_nodes), fa * n_bins + fb]
    per_column = 2 * rows - full_a.max(axis=1) - full_b.max(axis=1)
    paired = (rows - both + 2 * (counts > 0).sum(axis=1)) < per_column
    acc_a: list[gmpy2.mpz | None] = [None] * (n_nodes * n_bins)
    acc_b: list[gmpy2.mpz | None] = [None] * (n_nodes * n_bins)
    alone = ~paired[nodes]
    for acc, col, fullest in ((acc_a, col_a, fa), (acc_b, col_b, fb)):  # the per-column nodes
        keep = alone & (col != fullest[nodes])
        _multiply_into(n2, acc, cts, live[keep], (nodes * n_bins + col)[keep])
    keep = ~alone & ((col_a != fa[nodes]) | (col_b != fb[nodes]) | (total is not None))
    cells: dict[int, gmpy2.mpz] = {}
    for i, key in zip(live[keep].tolist(), joint[keep].tolist(), strict=True):
        c = cells.get(key)
        cells[key] = cts[i] if c is None else c * cts[i] % n2
    for key, c in cells.items():  # each joint cell into its bin of a and its bin of b
        v, a, b = key // nb2, key // n_bins % n_bins, key % n_bins
        if total is not None:
            t = total[v]
            total[v] = c if t is None else t * c % n2
        for acc, bin_, fullest in ((acc_a, a, fa), (acc_b, b, fb)):
            if bin_ != fullest[v]:
                x = acc[v * n_bins + bin_]
                acc[v * n_bins + bin_] = c if x is None else x * c % n2
    return [(acc_a, fa), (acc_b, fb)]


def _multiply_into(n2, acc: list, cts, rows: np.ndarray, keys: np.ndarray) -> None:
    """``acc[key] *= cts[row]`` for each (row, key) (None: empty so far)."""
    for i, key in zip(rows.tolist(), keys.tolist(), strict=True):
        a = acc[key]
        acc[key] = cts[i] if a is None else a * cts[i] % n2


def join_columns(n2, cols: list, total: list, n_nodes: int, n_bins: int) -> list:
    """The (node, column, bin) cells from each column's ``column_cells`` and the node totals:
    each fullest bin is its node's product divided by the node's other bins'."""
    F = len(cols)
    acc: list[gmpy2.mpz | None] = [None] * (n_nodes * F * n_bins)
    for s, (cells, fullest) in enumerate(cols):
        for v in range(n_nodes):
            part = cells[v * n_bins : (v + 1) * n_bins]
            if total[v] is not None:
                others = gmpy2.mpz(1)
                for a in part:
                    if a is not None:
                        others = others * a % n2
                part[int(fullest[v])] = total[v] * gmpy2.invert(others, n2) % n2
            base = (v * F + s) * n_bins
            acc[base : base + n_bins] = part
    return acc


def pack_cells(n2: gmpy2.mpz, acc: list, cap: int, shift_bits: int) -> list[gmpy2.mpz]:
    """The cells' products ``cap`` per ciphertext, ``shift_bits`` apart (Horner; an empty
    cell is 1, a zero sum)."""
    one = gmpy2.mpz(1)
    return [
        pk.pack_ciphertexts([one if a is None else a for a in acc[i : i + cap]], shift_bits, n2)
        for i in range(0, len(acc), cap)
    ]


@dataclass
class LevelCells:
    """A data party's cells of a tree's level before this one (what subtraction divides):
    each sampled row's node then and the (node, column, bin) products (None: before the root)."""

    node_of_row: np.ndarray | None = None
    cells: list | None = None


def level_products(
    n2: gmpy2.mpz,
    node_of_row: np.ndarray,
    n_nodes: int,
    F: int,
    n_bins: int,
    level: LevelCells | None,
    compute: Callable[[np.ndarray], list],
) -> list:
    """This level's (node, column, bin) products by histogram subtraction: ``compute`` (the
    products of a node vector's rows, :func:`products` or its tasks) runs on the rows of the
    nodes that need products, and each parent's fullest child comes as the parent's cell
    divided by its siblings' (one inversion per cell, instead of a product per row): the same
    group elements, so the same packed sums. ``level`` (the party's, per tree) is updated to
    this level's cells; None: no subtraction."""
    plan = subtraction_plan(node_of_row, n_nodes, F, n_bins, level)
    masked = node_of_row
    if plan:  # the derived nodes' rows are left out of the products
        masked = np.where(np.isin(node_of_row, list(plan)), -1, node_of_row)
    acc = compute(masked)
    for v, (p, siblings) in plan.items():
        for s in range(F * n_bins):
            whole = level.cells[p * F * n_bins + s]
            part = None
            for u in siblings:
                c = acc[u * F * n_bins + s]
                if c is not None:
                    part = c if part is None else part * c % n2
            if whole is not None and part is not None:
                whole = whole * gmpy2.invert(part, n2) % n2
            acc[v * F * n_bins + s] = None if whole == 1 else whole  # 1: no row, as computed
    if level is not None:
        level.node_of_row, level.cells = node_of_row.copy(), acc
    return acc


def subtraction_plan(
    node_of_row: np.ndarray, n_nodes: int, F: int, n_bins: int, level: LevelCells | None
) -> dict[int, tuple[int, list[int]]]:
    """Nodes whose cells come by division: node -> (its parent in the level before, its
    siblings). A node's parent is the node its rows were in; only a parent whose every row
    went to this level's open nodes, all of one parent's rows, has a derived child (its fullest);
    anything else (the level before unknown, a row whose parent differs from its node's) derives
    nothing, and every node is computed."""
    if level is None or level.cells is None or level.node_of_row.shape != node_of_row.shape:
        return {}
    before = level.node_of_row
    live = node_of_row >= 0
    nodes, parents = node_of_row[live], before[live]
    n_before = len(level.cells) // (F * n_bins)
    if nodes.size == 0 or parents.min() < 0 or parents.max() >= n_before:
        return {}
    parent_of = np.full(n_nodes, -1, dtype=np.int64)
    parent_of[nodes] = parents
    if np.any(parent_of[nodes] != parents):  # a node's rows came from two parents
        return {}
    counts = np.bincount(nodes, minlength=n_nodes)
    before_counts = np.bincount(before[before >= 0], minlength=n_before)
    plan = {}
    for p in np.unique(parents).tolist():
        kids = np.nonzero(parent_of == p)[0]
        if counts[kids].sum() != before_counts[p]:  # some of its rows left the open nodes
            continue
        big = int(kids[np.argmax(counts[kids])])
        plan[big] = (p, [int(u) for u in kids if u != big])
    return plan
