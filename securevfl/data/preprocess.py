"""Column encoding shared by every dataset loader.

Every loader describes its table as a list of column specs and calls :func:`encode_columns`, so
all datasets come out in the same form: numeric columns scaled to [-1, 1] from their PUBLIC
domain (the catalogue's declared bounds, values outside clipped in; never the data's own min/max,
which is one person's value), categoricals
one-hot (0/1), and a ``groups`` list recording which columns belong to one original attribute.
The groups matter downstream: a one-hot group must never be split across parties, and each group
contributes at most 1 to a row's squared L2 norm (see :mod:`securevfl.data.partition`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from securevfl.errors import DataError


@dataclass(frozen=True)
class NumericColumn:
    """A numeric attribute; scaled to [-1, 1] by ``domain`` (public bounds) or, where none is
    known, by its min/max (then :func:`fitted_ranges` names it: it is data-derived).

    ``clip``: values outside ``domain`` are clipped into it (a documented public bound that
    a rare row may exceed); without it they raise DataError.
    """

    name: str
    values: np.ndarray
    domain: tuple[float, float] | None = None
    clip: bool = False


@dataclass(frozen=True)
class CategoricalColumn:
    """A categorical attribute, one-hot encoded over ``categories`` (in that column order).

    ``categories=None`` uses the sorted distinct values. A value outside ``categories`` raises
    DataError rather than silently becoming an all-zero row.
    """

    name: str
    values: np.ndarray
    categories: Sequence[str] | None = None


@dataclass(frozen=True)
class BinaryColumn:
    """A yes/no attribute kept as ONE 0/1 column (a compact alternative to a 2-column one-hot)."""

    name: str
    values: np.ndarray  # bool or 0/1


ColumnSpec = NumericColumn | CategoricalColumn | BinaryColumn


@dataclass
class Table:
    """An encoded table as a loader returns it (before it becomes a ``Dataset``)."""

    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    groups: list[list[int]]
    n_classes: int | None = None
    y_range: tuple[float, float] | None = None
    # global indices of the columns X holds, when a loader kept only some (None: all of them)
    columns: np.ndarray | None = None
    # values computed from the rows (e.g. a column's min/max where no public domain is known):
    # one line each; a run lists them outside its guarantee
    fitted: tuple[str, ...] = ()
    # the parties whose scaling ranges were released under the budget (privacy/dp_bounds.py)
    dp_bounds: tuple[int, ...] = ()


# Picks the columns a process holds from a table's column groups (indices into the whole table).
ColumnPicker = Callable[[list[list[int]]], np.ndarray]


def scale_to_unit_interval(
    values: np.ndarray, *, domain: tuple[float, float] | None = None, clip: bool = False
) -> np.ndarray:
    """Min-max scale to [-1, 1]; a constant column maps to 0.

    Parameters
    ----------
    values : array of numbers.
    domain : known (lo, hi) of the attribute; defaults to the observed min and max. Values outside
        a given domain raise DataError (they would leave [-1, 1]), or are clipped with ``clip``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return v.copy()
    lo, hi = (float(np.min(v)), float(np.max(v))) if domain is None else map(float, domain)
    if domain is not None and not lo <= hi:
        raise DataError(f"a domain must have lo <= hi, got [{lo}, {hi}]")
    if domain is not None and clip:
        v = np.clip(v, lo, hi)  # row-wise: one row's value never moves another's
    if domain is not None and (v.min() < lo or v.max() > hi):
        raise DataError(
            f"values must lie in the domain [{lo}, {hi}], got range [{v.min()}, {v.max()}]"
        )
    if hi == lo:
        return np.zeros_like(v)
    out = 2.0 * (v - lo) / (hi - lo) - 1.0
    # floating error can overshoot by an ulp; the [-1, 1] contract is exact
    return np.clip(out, -1.0, 1.0)


def scale_by_ranges(X: np.ndarray, ranges: Sequence[Sequence[float]]) -> np.ndarray:
    """Each column of ``X`` min-max scaled to [-1, 1] by its (lo, hi) in ``ranges``, values
    outside clipped in, NaN (a blank CSV cell) set to 0, the range's midpoint; the one rule a
    ``csv:`` dataset's columns follow in training and in ``predict``."""
    X = np.array(X, dtype=np.float64, ndmin=2)
    if X.shape[1] != len(ranges):
        raise DataError(
            f"a block must have one column per scaling range ({len(ranges)}), got {X.shape[1]}"
        )
    for j, (lo, hi) in enumerate(ranges):
        X[:, j] = scale_to_unit_interval(X[:, j], domain=(lo, hi), clip=True)
    return np.nan_to_num(X, nan=0.0, posinf=np.inf, neginf=-np.inf)


def one_hot(values: np.ndarray, categories: Sequence[str]) -> np.ndarray:
    """0/1 matrix with one column per category; unknown values raise DataError."""
    vals = np.asarray(values).astype(str)
    cats = np.asarray([str(c) for c in categories])
    if len(set(cats.tolist())) != len(cats):
        raise DataError(f"categories must be distinct, got {list(cats)}")
    order = np.argsort(cats)
    pos = np.searchsorted(cats[order], vals)
    pos = np.clip(pos, 0, len(cats) - 1)
    found = cats[order][pos] == vals
    if not np.all(found):
        bad = sorted(set(vals[~found].tolist()))[:5]
        raise DataError(f"values must be one of {list(cats)}, got {bad}")
    out = np.zeros((vals.size, len(cats)), dtype=np.float64)
    out[np.arange(vals.size), order[pos]] = 1.0
    return out


def encode_columns(
    columns: Sequence[ColumnSpec],
) -> tuple[np.ndarray, list[str], list[list[int]]]:
    """Encode column specs into ``(X, feature_names, groups)``.

    One-hot columns are named ``attr=category``; groups list column indices in column order and
    cover every column exactly once.
    """
    blocks: list[np.ndarray] = []
    names: list[str] = []
    groups: list[list[int]] = []
    col = 0
    for spec in columns:
        if isinstance(spec, NumericColumn):
            block = scale_to_unit_interval(spec.values, domain=spec.domain, clip=spec.clip)
            block = block[:, None]
            new_names = [spec.name]
        elif isinstance(spec, BinaryColumn):
            block = np.asarray(spec.values, dtype=np.float64)[:, None]
            if not np.isin(block, (0.0, 1.0)).all():
                raise DataError(f"binary column {spec.name!r} must hold only 0/1 values")
            new_names = [spec.name]
        elif isinstance(spec, CategoricalColumn):
            cats = (
                sorted(set(np.asarray(spec.values).astype(str).tolist()))
                if spec.categories is None
                else [str(c) for c in spec.categories]
            )
            try:
                block = one_hot(spec.values, cats)
            except DataError as exc:
                raise DataError(f"column {spec.name!r}: {exc}") from None
            new_names = [f"{spec.name}={c}" for c in cats]
        else:  # pragma: no cover - a programming error, not a data error
            raise TypeError(f"unknown column spec {type(spec).__name__}")
        blocks.append(block)
        names.extend(new_names)
        groups.append(list(range(col, col + block.shape[1])))
        col += block.shape[1]
    if not blocks:
        raise DataError("a dataset must have at least one column, got none")
    return np.hstack(blocks), names, groups


def scale_target(
    y: np.ndarray, *, domain: tuple[float, float] | None = None
) -> tuple[np.ndarray, tuple[float, float]]:
    """Scale a regression target to [-1, 1] by its public ``domain`` (values clipped in), or by
    its own (min, max) where none is known (data-derived: the caller lists it as fitted);
    return it with the (lo, hi) used."""
    y = np.asarray(y, dtype=np.float64)
    if domain is not None:
        lo, hi = float(domain[0]), float(domain[1])
        return scale_to_unit_interval(y, domain=(lo, hi), clip=True), (lo, hi)
    return scale_to_unit_interval(y), (float(np.min(y)), float(np.max(y)))


def fitted_values(columns: Sequence[ColumnSpec]) -> tuple[str, ...]:
    """The data-derived values of an encoding, one line each: a numeric column scaled by its own
    min/max (no public domain), a categorical one whose vocabulary is its distinct values."""
    out = []
    for c in columns:
        if isinstance(c, NumericColumn) and c.domain is None:
            out.append(f"scaling range (min/max) of column {c.name!r}")
        elif isinstance(c, CategoricalColumn) and c.categories is None:
            out.append(f"vocabulary (distinct values) of column {c.name!r}")
    return tuple(out)


def check_finite(X: np.ndarray, y: np.ndarray, *, dataset: str, feature_names: list[str]) -> None:
    """Raise DataError naming the dataset and the first column holding NaN or inf."""
    bad = ~np.isfinite(X)
    if bad.any():
        j = int(np.flatnonzero(bad.any(axis=0))[0])
        raise DataError(
            f"dataset {dataset!r} must be finite after loading, column {feature_names[j]!r} "
            f"holds {int(bad[:, j].sum())} NaN/inf values"
        )
    if not np.all(np.isfinite(np.asarray(y, dtype=np.float64))):
        raise DataError(f"dataset {dataset!r} must be finite after loading, the target has NaN/inf")
