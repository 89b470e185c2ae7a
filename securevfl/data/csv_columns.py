"""A party's CSV columns as numbers: the stated rules for text, blank cells and ID-like columns.

- **Missing cells** (empty, or ``NA``, ``N/A``, ``NaN``, ``null``, ``?`` in any case) are imputed
  with a constant, never a data mean: the midpoint of the column's scaling range (0 once the
  column is scaled to [-1, 1]: the ``--bounds`` domain's midpoint, else that of the column's
  min/max); a categorical column's category columns are all 0. Each column with a
  missing cell also gets an indicator column ``<name>_missing`` (1 where the cell was missing), so
  the model can tell an imputed value from a real one. Which columns have one is visible in the
  party's column count; the record says so (``privacy.outside_guarantee``).
- **Text columns** are categorical, one-hot encoded per party with the categories the user gives
  as public metadata (``--categories FILE``, JSON ``{"column": ["a", "b", ...]}``). Without them a
  text column is refused: categories read off the data are data-derived (a rare category names a
  row), and treating them as public would put a disclosure outside every guarantee. A value that
  is not among the given categories is refused too (a metadata/file mismatch).
- **ID-like first columns**: distinct integers that are strictly monotone, or dense (at least
  :data:`DENSE_ROWS` rows filling at least half of the integers between their min and max: a
  shuffled ID), or under an ID-like name, or distinct text values with no categories given, are
  refused with a hint to pass ``--id-column``: trained on as a feature they encode the row order
  (a shuffled ID still names each row). ``--feature-column NAME`` keeps such a column as a
  feature where the user says it is one.

Each training column's rule (:class:`ColumnRule`: numeric or its categories, with or without a
missing indicator) is saved with the party's part of the model, and ``predict`` encodes new rows
with the same :func:`encode_rows`: columns matched by name (reordered is fine; extra columns are
ignored and named in a warning; a missing one is an error naming it), a blank cell by the rule
above, a category unseen in training as all zeros of its group (counted in a warning: the
categories are the model's, a new level carries no learned weight), a non-number in a numeric
column an error naming the column and line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from securevfl.data.cells import (
    MISSING,
    ArrowColumn,
    Column,
    Columns,
    TextColumn,
    as_columns,
    is_missing,
)
from securevfl.errors import ConfigError, DataError

__all__ = ["MISSING", "ColumnRule", "Encoded", "is_missing"]
MAX_CATEGORIES_BYTES = 1 << 20  # a categories file is metadata: 1 MiB is plenty
_ID_NAME = re.compile(r"(^|[_\s.-])(id|key|index|idx)$|^id[_\s.-]|[a-z]ID$", re.IGNORECASE)

DENSE_ROWS = 10  # fewer distinct integers say nothing about an ID
MAX_CELL = 1e150  # differences and squares of two such cells stay finite in float64


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def read_categories(path: str | None) -> dict[str, list[str]]:
    """The user's categories file (public metadata), checked: {column: [distinct strings]}."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"categories must be a JSON file, got {str(p)!r} (no such file)")
    if p.stat().st_size > MAX_CATEGORIES_BYTES:
        raise ConfigError(
            f"categories file {str(p)!r} must be <= {MAX_CATEGORIES_BYTES} bytes, "
            f"got {p.stat().st_size}"
        )
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"categories file {str(p)!r} must be UTF-8 JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f'categories file {str(p)!r} must hold an object {{"column": ["a", "b"]}}, '
            f"got {type(doc).__name__}"
        )
    for col, cats in doc.items():
        if (
            not isinstance(cats, list)
            or not cats
            or not all(isinstance(c, str) and not is_missing(c) for c in cats)
            or len(set(cats)) != len(cats)
        ):
            raise ConfigError(
                f"categories of column {col!r} in {str(p)!r} must be a non-empty list of "
                f"distinct non-blank strings, got {cats!r}"[:300]
            )
    return doc


@dataclass(frozen=True)
class ColumnRule:
    """How one raw CSV column becomes model inputs; saved with the model, applied by predict.

    ``categories``: the one-hot levels of a categorical column (None: a numeric column);
    ``indicator``: a ``<name>_missing`` column follows (the column had blank cells in training).
    """

    name: str
    categories: tuple[str, ...] | None = None
    indicator: bool = False

    @property
    def outputs(self) -> list[str]:
        """The names of the model inputs this column becomes, in order."""
        if self.categories is None:
            out = [self.name]
        else:
            out = [f"{self.name}={c}" for c in self.categories]
        return out + ([f"{self.name}_missing"] if self.indicator else [])


@dataclass
class Encoded:
    """A party's numeric block, its input names, and what encoding it noticed.

    Numeric blank cells are NaN here: scaling turns them into the midpoint of the column's
    scaling range (:func:`securevfl.data.preprocess.scale_by_ranges`), in training and predict.
    """

    names: list[str] = field(default_factory=list)
    columns: list[np.ndarray] = field(default_factory=list)
    with_missing: list[str] = field(default_factory=list)  # columns given an indicator
    warnings: list[str] = field(default_factory=list)  # predict: rows the stated rules changed

    @property
    def block(self) -> np.ndarray:
        return np.column_stack(self.columns) if self.columns else np.zeros((0, 0))


def check_not_id(
    party: int,
    where: str,
    name: str,
    cells: Sequence[str] | Column,
    categories: dict[str, list[str]],
    keep: str | None = None,
) -> None:
    """Refuse an ID-like first column (one line with the ``--id-column`` hint); ``keep``: the
    column the user says is a feature (``--feature-column``)."""
    col = cells if isinstance(cells, TextColumn | ArrowColumn) else TextColumn(list(cells))
    if len(col) < 2 or col.miss.any() or name in categories or name == keep:
        return
    if not col.distinct():
        return
    hint = f"pass --id-column {name} to align the parties' rows by it (PSI)"
    v = col.integers()
    if v is not None:
        monotone = _monotone(v)
        lo, hi = int(min(v)), int(max(v))
        span = hi - lo + 1
        dense = len(v) >= DENSE_ROWS and 2 * len(v) >= span
        if monotone or dense or _ID_NAME.search(name):
            what = (
                "strictly monotone"
                if monotone
                else f"dense ({len(v)} of the {span} integers from {lo} to {hi})"
                if dense
                else "under an ID-like name"
            )
            raise ConfigError(
                f"party {party}'s first column {name!r} ({where}) holds distinct integers, "
                f"{what}: an ID, not a feature (it would train on the row order): {hint}, or "
                f"--feature-column {name} if it is a feature"
            )
    elif col.numbers() is None and not all(_number(c) is not None for c in col.text()):
        raise ConfigError(
            f"party {party}'s first column {name!r} ({where}) holds text, a distinct value "
            f"per row: an ID? {hint}, or give its categories with --categories if it is a "
            "categorical feature"
        )


def _monotone(v: np.ndarray | list[int]) -> bool:
    if isinstance(v, np.ndarray):
        d = np.diff(v)
        return bool(np.all(d > 0) or np.all(d < 0))
    return all(a < b for a, b in zip(v, v[1:])) or all(a > b for a, b in zip(v, v[1:]))


def fit_rules(
    party: int,
    where: str,
    header: list[str],
    rows: Sequence[Sequence[str]] | Columns,
    categories: dict[str, list[str]],
) -> list[ColumnRule]:
    """The encoding rule of each of party ``party``'s training columns, in header order."""
    cols = as_columns(rows)
    missing = [int(cols.column(j).miss.sum()) for j in range(len(header))]
    return rules_from_missing(party, where, header, missing, len(cols), categories)


def rules_from_missing(
    party: int,
    where: str,
    header: list[str],
    missing: Sequence[int],
    rows: int,
    categories: dict[str, list[str]],
) -> list[ColumnRule]:
    """:func:`fit_rules` from each column's count of missing cells among ``rows`` (counted
    block by block where a party's table stays on its engine)."""
    _check_distinct(party, where, header)
    rules = []
    for name, m in zip(header, missing, strict=True):
        if m >= rows:
            raise DataError(
                f"party {party}'s column {name!r} ({where}) must hold >= 1 value, got only "
                "missing cells"
            )
        cats = categories.get(name)
        rules.append(ColumnRule(name, None if cats is None else tuple(cats), m > 0))
    return rules


def encode_columns(
    party: int,
    where: str,
    header: list[str],
    rows: Sequence[Sequence[str]] | Columns,
    categories: dict[str, list[str]],
) -> Encoded:
    """Party ``party``'s training cells as numbers by the module's rules (DataError/ConfigError)."""
    rules = fit_rules(party, where, header, rows, categories)
    return encode_rows(party, where, rules, header, rows, training=True)


def encode_rows(
    party: int,
    where: str,
    rules: Sequence[ColumnRule],
    header: list[str],
    rows: Sequence[Sequence[str]] | Columns,
    *,
    training: bool = False,
) -> Encoded:
    """Rows as the model's inputs by ``rules``: columns matched by name (any order; others
    ignored, named in ``warnings``); a missing column, a non-number in a numeric column, or (in
    training) a value outside a column's categories is one error line naming it. At predict an
    unseen category encodes as all zeros and a blank in a column without an indicator is
    imputed as in training; both are counted in ``warnings``."""
    _check_distinct(party, where, header)
    cols = as_columns(rows)
    where_col = {h: j for j, h in enumerate(header)}
    absent = [r.name for r in rules if r.name not in where_col]
    if absent:
        raise DataError(
            f"party {party}'s CSV {where!r} must have the model's column {absent[0]!r}, got "
            f"columns {header}"[:300]
        )
    out = Encoded()
    extra = [h for h in header if h not in {r.name for r in rules}]
    if extra:
        out.warnings.append(f"party {party}: columns {extra} are not the model's: ignored"[:300])
    for rule in rules:
        col = cols.column(where_col[rule.name])
        miss = col.miss
        if rule.categories is None:
            out.columns.append(_numeric(party, where, rule.name, col, training))
        else:
            onehot, unseen = _one_hot(party, where, rule, col.text(), miss, training)
            out.columns += list(onehot.T)
            if unseen:
                out.warnings.append(
                    f"party {party}: column {rule.name!r}: {len(unseen)} row(s) hold a category "
                    f"unseen in training (e.g. {unseen[0]!r}): encoded as all zeros"[:300]
                )
        out.names += rule.outputs
        if rule.indicator:
            out.columns.append(miss.astype(np.float64))
            out.with_missing.append(rule.name)
        elif miss.any():
            out.warnings.append(
                f"party {party}: column {rule.name!r}: {int(miss.sum())} blank cells (none in "
                "training, so the model has no indicator for them): imputed as in training"
            )
    return out


def _check_distinct(party: int, where: str, header: list[str]) -> None:
    """Columns are matched by name: two of one name would be ambiguous (one error line)."""
    seen: set[str] = set()
    for h in header:
        if h in seen:
            raise DataError(
                f"party {party}'s CSV {where!r} must name each column once, got {h!r} twice"
            )
        seen.add(h)


def _numeric(party: int, where: str, name: str, col: Column, training: bool) -> np.ndarray:
    """The column's numbers (NaN where blank); a column whose cells a reader could not take
    whole (or holding an out-of-rule number) is read cell by cell, naming the first bad one."""
    fast = col.numbers()
    if fast is not None:
        present = fast[~col.miss]
        if np.all(np.isfinite(present)) and not np.any(np.abs(present) > MAX_CELL):
            return fast
    cells, miss = col.text(), col.miss
    values = np.full(len(cells), np.nan)  # a blank stays NaN until scaled (the range midpoint)
    for i, c in enumerate(cells):
        if miss[i]:
            continue
        v = _number(c)
        if v is None and training:
            raise ConfigError(
                f"party {party}'s column {name!r} ({where}) holds text ({c.strip()!r} on line "
                f"{i + 2}): a categorical column needs its categories as public metadata, "
                f'--categories FILE (JSON {{"{name}": ["...", ...]}}); categories read off the '
                "data are data-derived, so they are never used"
            )
        if v is None or not math.isfinite(v):
            why = "" if training else " (the model reads it as numeric)"
            raise DataError(
                f"party {party}'s column {name!r} ({where}) must hold finite numbers{why}, got "
                f"{c.strip()!r} on line {i + 2}"[:300]
            )
        if abs(v) > MAX_CELL:  # its range or square would overflow float64 in the scaling
            raise DataError(
                f"party {party}'s column {name!r} ({where}) must hold numbers of magnitude at "
                f"most {MAX_CELL:g}, got {c.strip()!r} on line {i + 2}"
            )
        values[i] = v
    return values


def _one_hot(
    party: int, where: str, rule: ColumnRule, cells: list[str], miss: np.ndarray, training: bool
) -> tuple[np.ndarray, list[str]]:
    """The 0/1 block of a categorical column (a blank: all zeros) and the unseen values."""
    cats = rule.categories or ()
    index = {c: k for k, c in enumerate(cats)}
    onehot = np.zeros((len(cells), len(cats)))
    unseen = []
    for i, c in enumerate(cells):
        if miss[i]:
            continue
        k = index.get(c.strip())
        if k is None and training:
            raise ConfigError(
                f"party {party}'s column {rule.name!r} ({where}) must hold one of its "
                f"categories {list(cats)}, got {c.strip()!r} on line {i + 2}"[:300]
            )
        if k is None:
            unseen.append(c.strip())
            continue
        onehot[i, k] = 1.0
    return onehot, unseen
