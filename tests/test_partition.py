"""Column partitioning among parties and the public row-norm bound."""

from __future__ import annotations

import numpy as np
import pytest

from securevfl.data import (
    load_dataset,
    partition_columns,
    row_norm_bound,
    scale_block_to_unit_rows,
    schema_norm_bound,
)
from securevfl.errors import ConfigError

SINGLETONS = [[j] for j in range(30)]
# numeric, a 3-way one-hot, numeric, a 42-way one-hot, numeric
MIXED = [[0], [1, 2, 3], [4], list(range(5, 47)), [47]]


def assert_valid(parts: list[np.ndarray], groups: list[list[int]], parties: int) -> None:
    assert len(parts) == parties
    flat = np.concatenate(parts)
    assert sorted(flat.tolist()) == list(range(sum(len(g) for g in groups)))
    for p in parts:
        assert p.size > 0 and p.dtype == np.int64
        assert (np.diff(p) > 0).all()  # sorted
    owner = {int(c): k for k, p in enumerate(parts) for c in p}
    for g in groups:
        assert len({owner[c] for c in g}) == 1, f"group {g} split"


@pytest.mark.parametrize("parties", [2, 3, 4, 7, 30])
def test_contiguous_singletons_are_even_and_consecutive(parties):
    parts = partition_columns(SINGLETONS, parties)
    assert_valid(parts, SINGLETONS, parties)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1
    np.testing.assert_array_equal(np.concatenate(parts), np.arange(30))


def test_contiguous_keeps_groups_together():
    for parties in range(2, 6):
        parts = partition_columns(MIXED, parties)
        assert_valid(parts, MIXED, parties)
    parts = partition_columns(MIXED, 2)
    assert [p.size for p in parts] == [5, 43]  # the 42-column group cannot be split


@pytest.mark.parametrize("parties", [2, 3, 5])
def test_random_is_seeded_balanced_and_valid(parties):
    a = partition_columns(SINGLETONS, parties, scheme="random", seed=1)
    b = partition_columns(SINGLETONS, parties, scheme="random", seed=1)
    c = partition_columns(SINGLETONS, parties, scheme="random", seed=2)
    assert_valid(a, SINGLETONS, parties)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    sizes = [p.size for p in a]
    assert max(sizes) - min(sizes) <= 1
    assert_valid(partition_columns(MIXED, parties, scheme="random", seed=3), MIXED, parties)


def test_partition_of_a_real_dataset():
    ds = load_dataset("adult")
    for scheme in ("contiguous", "random"):
        assert_valid(partition_columns(ds.groups, 4, scheme=scheme), ds.groups, 4)


def test_explicit_scheme():
    parts = partition_columns(MIXED, 2, scheme=[[47, 0, 1, 2, 3], list(range(4, 47))])
    assert_valid(parts, MIXED, 2)
    np.testing.assert_array_equal(parts[0], [0, 1, 2, 3, 47])


@pytest.mark.parametrize(
    ("scheme", "pattern"),
    [
        ([[0, 1, 2, 3, 4], list(range(4, 48))], "column 4 is given to parties 0 and 1"),
        ([[0, 1, 2, 3], list(range(5, 48))], "column 4 is given to none"),
        ([[0, 1, 2], list(range(3, 48))], r"group \[1, 2, 3\] is split across parties \[0, 1\]"),
        ([[], list(range(48))], "party 0 holds none"),
        ([list(range(48))], r"one column set per party \(2\), got 1"),
        ([[0, 1, 2, 3, 99], list(range(4, 48))], "got 99"),
    ],
)
def test_explicit_scheme_errors(scheme, pattern):
    with pytest.raises(ConfigError, match=pattern):
        partition_columns(MIXED, 2, scheme=scheme)


def test_party_count_errors():
    with pytest.raises(ConfigError, match="parties must be >= 2, got 1"):
        partition_columns(SINGLETONS, 1)
    with pytest.raises(
        ConfigError, match=r"parties must be <= number of column groups \(30\), got 40"
    ):
        partition_columns(SINGLETONS, 40)
    with pytest.raises(ConfigError, match=r"number of column groups \(5\), got 6"):
        partition_columns(MIXED, 6)
    with pytest.raises(ConfigError, match="scheme must be one of .*'zigzag'"):
        partition_columns(SINGLETONS, 2, scheme="zigzag")
    with pytest.raises(ConfigError, match="exactly once"):
        partition_columns([[0], [0, 1]], 2)


# --------------------------------------------------------------------------- norm bound


def test_schema_norm_bound_counts_groups():
    assert schema_norm_bound(MIXED, range(48)) == 5.0
    assert schema_norm_bound(MIXED, [1, 2, 3, 47]) == 2.0
    assert schema_norm_bound(MIXED, list(range(5, 47))) == 1.0
    assert row_norm_bound(MIXED, range(48)) == pytest.approx(np.sqrt(5.0))


@pytest.mark.parametrize(
    ("name", "parties", "scheme"),
    [("breast", 3, "contiguous"), ("adult", 4, "random"), ("adult", 2, "contiguous")],
)
def test_scaled_blocks_give_unit_rows(name, parties, scheme):
    ds = load_dataset(name)
    parts = partition_columns(ds.groups, parties, scheme=scheme, seed=0)
    bounds = [schema_norm_bound(ds.groups, p) for p in parts]
    total = sum(bounds)  # public: derived from the schema only
    blocks = []
    for p, b in zip(parts, bounds, strict=True):
        block = ds.X[:, p]
        # each party's own block respects its own public bound
        assert (np.sum(block**2, axis=1) <= b + 1e-12).all()
        blocks.append(scale_block_to_unit_rows(block, total_bound_sq=total))
    pooled = np.hstack(blocks)
    assert (np.linalg.norm(pooled, axis=1) <= 1 + 1e-12).all()


def test_scale_block_rejects_bad_bound():
    with pytest.raises(ConfigError, match="total_bound_sq must be > 0.*got 0"):
        scale_block_to_unit_rows(np.ones((2, 2)), total_bound_sq=0)


def test_roles_partition_puts_demographics_at_the_label_holder():
    """``--partition roles`` (adult, K = 2): the declared holders, one-hot groups whole."""
    from securevfl.data.datasets import load_dataset, role_blocks

    ds = load_dataset("adult")
    blocks = role_blocks("adult", None, ds.groups, 2)
    base = [{ds.feature_names[c].split("=")[0] for c in b} for b in blocks]
    assert base[0] == {"age", "fnlwgt", "marital-status", "relationship", "race", "sex",
                       "native-country"}  # fmt: skip
    assert {"occupation", "capital-gain", "education"} <= base[1]
    assert sorted(blocks[0] + blocks[1]) == list(range(ds.X.shape[1]))
    with pytest.raises(ConfigError, match="must be 2"):
        role_blocks("adult", None, ds.groups, 3)
    with pytest.raises(ConfigError, match="declares"):
        role_blocks("breast", None, load_dataset("breast").groups, 2)
