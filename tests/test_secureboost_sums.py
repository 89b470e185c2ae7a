"""secureboost's histogram subtraction at a data party (issue 46): each parent's fullest child
comes as the parent's cells divided by its sibling's, and those are the very products the
direct path multiplies, so the replies decrypt to the same sums and the trees are the same.
A 256-bit key and a few hundred rows: milliseconds."""

from __future__ import annotations

import gmpy2
import numpy as np
import pytest

import securevfl
from protocols import paillier_he as ph
from securevfl.methods import secureboost_sums as hs
from securevfl.run_options import build_spec

ROWS, F, NB = 300, 3, 4


@pytest.fixture(scope="module")
def cts():
    pub, _ = ph.generate_keypair(256)
    enc = ph.FixedBaseEncryptor(pub, ph.djn_base(pub))
    return gmpy2.mpz(pub.nsquare), [enc.encrypt(i % 97) for i in range(ROWS)]


def _levels(rng: np.random.Generator) -> list[tuple[np.ndarray, int]]:
    """A depth-3 tree's node vectors: the root; its two children (one of 10 rows); at the
    last level node 0 split in two, node 1 a leaf (its rows -1)."""
    root = np.zeros(ROWS, dtype=np.int64)
    one = np.where(np.arange(ROWS) < 10, 1, 0)[rng.permutation(ROWS)]
    two = np.where(one == 1, -1, rng.integers(0, 2, ROWS))
    return [(root, 1), (one, 2), (two, 2)]


def test_subtraction_gives_the_direct_products_and_computes_fewer_rows(cts):
    n2, c = cts
    rng = np.random.default_rng(0)
    bins = rng.integers(0, NB, size=(ROWS, F))
    bins[:, 2] = 1  # a column whose rows all share one bin
    level, live_rows = hs.LevelCells(), []
    levels = _levels(rng)
    for node_of, n_nodes in levels:

        def run(m, k=n_nodes):
            live_rows.append(int((m >= 0).sum()))
            return hs.products(n2, c, bins, m, k, NB)

        want = hs.products(n2, c, bins, node_of, n_nodes, NB)
        assert hs.level_products(n2, node_of, n_nodes, F, NB, level, run) == want
    # the root's rows; then only the 10-row child; then the smaller of node 0's two children
    last = levels[2][0]
    assert live_rows == [ROWS, 10, min((last == 0).sum(), (last == 1).sum())]


def test_a_node_vector_that_does_not_nest_derives_nothing(cts):
    n2, c = cts
    rng = np.random.default_rng(1)
    bins = rng.integers(0, NB, size=(ROWS, F))
    root = np.zeros(ROWS, dtype=np.int64)
    level = hs.LevelCells()
    hs.level_products(n2, root, 1, F, NB, level, lambda m: hs.products(n2, c, bins, m, 1, NB))
    before = level.cells
    # two children whose rows do not cover the parent's (some rows dropped to -1): no division
    part = np.where(np.arange(ROWS) < 250, np.arange(ROWS) % 2, -1)
    assert hs.subtraction_plan(part, 2, F, NB, level) == {}
    got = hs.level_products(n2, part, 2, F, NB, level, lambda m: hs.products(n2, c, bins, m, 2, NB))
    assert got == hs.products(n2, c, bins, part, 2, NB)
    # a node holding rows of two parents: no division either
    level.node_of_row, level.cells = np.arange(ROWS) % 2, before + before
    assert hs.subtraction_plan(np.arange(ROWS) // 150, 2, F, NB, level) == {}


def test_trees_with_subtraction_equal_the_trees_without(monkeypatch):
    given = {"method": "secureboost", "dataset": "breast", "seed": 3, "trees": 2, "depth": 3}
    spec = build_spec({**given, "paillier_bits": 256})
    a = securevfl.run_experiment(spec)
    monkeypatch.setattr(hs, "subtraction_plan", lambda *a, **k: {})
    b = securevfl.run_experiment(spec)
    assert a["model_fingerprint"] == b["model_fingerprint"]
    assert a["extra"]["splits_by_party"]["1"] > 0  # the partner's sums chose splits


def test_paired_columns_give_each_columns_cells(cts, monkeypatch):
    """``block_cells`` (two columns through their joint cells where that is cheaper: the
    290-row node; per column for the 10-row one) gives ``column_cells`` of each column, an
    odd last column included, and ``node_totals`` (the paired node's from the joint cells); so
    ``products`` is unchanged."""
    n2, c = cts
    rng = np.random.default_rng(2)
    bins = rng.integers(0, NB, size=(ROWS, 5))
    bins[:, 3] = np.where(rng.random(ROWS) < 0.8, 2, bins[:, 3])  # a skewed column
    node_of = np.where(np.arange(ROWS) < 10, 1, 0)[rng.permutation(ROWS)]
    node_of[:7] = -1  # rows in no open node
    live = np.nonzero(node_of >= 0)[0]
    nodes = node_of[live]
    want = [hs.column_cells(n2, c, bins[live, j], live, nodes, 3, NB) for j in range(5)]
    want_total = hs.node_totals(n2, c, live, nodes, 3)  # node 2: no rows
    for F in (5, 4, 1):  # an odd last column; pairs only; no pair
        got, total = hs.block_cells(n2, c, bins[live, :F], live, nodes, 3, NB, totals=True)
        assert total == want_total and want_total[2] is None
        assert len(got) == F
        for (acc, fullest), (acc_w, fullest_w) in zip(got, want, strict=False):
            assert acc == acc_w and np.array_equal(fullest, fullest_w)
    assert hs.block_cells(n2, c, bins[live], live, nodes, 3, NB)[1] is None
    direct, totals = [], hs.node_totals  # the rows multiplied row by row into node totals
    monkeypatch.setattr(hs, "node_totals", lambda *a: direct.append(len(a[2])) or totals(*a))
    hs.block_cells(n2, c, bins[live], live, nodes, 3, NB, totals=True)
    assert direct == [10]  # the 10-row node's; the paired 283-row node's from its joint cells
    monkeypatch.setattr(hs, "node_totals", totals)
    monkeypatch.setattr(hs, "MAX_JOINT_CELLS", 1)  # too many joint cells: per column, the same
    alone, total = hs.block_cells(n2, c, bins[live], live, nodes, 3, NB, totals=True)
    assert [acc for acc, _ in alone] == [acc for acc, _ in want] and total == want_total
