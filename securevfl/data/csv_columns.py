"""A party's CSV columns as numbers: the stated rules for text, blank cells and ID-like columns.

- **Missing cells** (empty, or ``NA``, ``N/A``, ``NaN``, ``null``, ``?`` in any case) are imputed
  with a constant, never a data mean: the midpoint of the column's range (0 once the column is
  scaled to [-1, 1]); a categorical column's category columns are all 0. Each column with a
  missing cell also gets an indicator column ``<name>_missing`` (1 where the cell was missing), so
  the model can tell an imputed value from a real one. Which columns have one is visible in the
  party's column count; the record says so (``privacy.outside_guarantee``).
- **Text columns** are categorical, one-hot encoded per party with the categories the user gives
  as public metadata (``--categories FILE``, JSON ``{"column": ["a", "b", ...]}``). Without them a
  text column is refused: categories read off the data are data-derived (a rare category names a
  row), and treating them as public would put a disclosure outside every guarantee. A value that
  is not among the given categories is refused too (a metadata/file mismatch).
- **ID-like first columns**: distinct integers that are strictly monotone, or distinct integers
  under an ID-like name, or distinct text values with no categories given, are refused with a
  hint to pass ``--id-column``: trained on as a feature they encode the row order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from securevfl.errors import ConfigError, DataError

MISSING = frozenset({"", "na", "n/a", "nan", "null", "?"})
MAX_CATEGORIES_BYTES = 1 << 20  # a categories file is metadata: 1 MiB is plenty
_INT = re.compile(r"^[+-]?\d+$")
_ID_NAME = re.compile(r"(^|[_\s.-])(id|key|index|idx)$|^id[_\s.-]|[a-z]ID$", re.IGNORECASE)

MAX_CELL = 1e150  # differences and squares of two such cells stay finite in float64


def is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING


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


@dataclass
class Encoded:
    """A party's numeric block and what its encoding disclosed."""

    names: list[str] = field(default_factory=list)
    columns: list[np.ndarray] = field(default_factory=list)
    with_missing: list[str] = field(default_factory=list)  # columns given an indicator

    @property
    def block(self) -> np.ndarray:
        return np.column_stack(self.columns) if self.columns else np.zeros((0, 0))


def check_not_id(
    party: int, where: str, name: str, cells: Sequence[str], categories: dict[str, list[str]]
) -> None:
    """Refuse an ID-like first column (one line with the ``--id-column`` hint)."""
    if len(cells) < 2 or any(is_missing(c) for c in cells) or name in categories:
        return
    if len(set(cells)) != len(cells):
        return
    hint = f"pass --id-column {name} to align the parties' rows by it (PSI)"
    if all(_INT.match(c.strip()) for c in cells):
        v = [int(c) for c in cells]
        monotone = all(a < b for a, b in zip(v, v[1:])) or all(a > b for a, b in zip(v, v[1:]))
        if monotone or _ID_NAME.search(name):
            what = "strictly monotone" if monotone else "under an ID-like name"
            raise ConfigError(
                f"party {party}'s first column {name!r} ({where}) holds distinct integers, "
                f"{what}: an ID, not a feature (it would train on the row order): {hint}"
            )
    elif not all(_number(c) is not None for c in cells):
        raise ConfigError(
            f"party {party}'s first column {name!r} ({where}) holds text, a distinct value "
            f"per row: an ID? {hint}, or give its categories with --categories if it is a "
            "categorical feature"
        )


def encode_columns(
    party: int,
    where: str,
    header: list[str],
    rows: list[list[str]],
    categories: dict[str, list[str]],
) -> Encoded:
    """Party ``party``'s text cells as numbers by the module's rules (DataError/ConfigError)."""
    out = Encoded()
    for j, name in enumerate(header):
        cells = [r[j] for r in rows]
        miss = np.array([is_missing(c) for c in cells])
        if miss.all():
            raise DataError(
                f"party {party}'s column {name!r} ({where}) must hold >= 1 value, got only "
                "missing cells"
            )
        if name in categories:
            cols = _one_hot(party, where, name, cells, miss, categories[name])
            out.names += [f"{name}={c}" for c in categories[name]]
            out.columns += cols
        else:
            out.names.append(name)
            out.columns.append(_numeric(party, where, name, cells, miss))
        if miss.any():
            out.names.append(f"{name}_missing")
            out.columns.append(miss.astype(np.float64))
            out.with_missing.append(name)
    return out


def _numeric(party: int, where: str, name: str, cells: list[str], miss: np.ndarray) -> np.ndarray:
    values = np.zeros(len(cells))
    for i, c in enumerate(cells):
        if miss[i]:
            continue
        v = _number(c)
        if v is None:
            raise ConfigError(
                f"party {party}'s column {name!r} ({where}) holds text ({c.strip()!r} on line "
                f"{i + 2}): a categorical column needs its categories as public metadata, "
                f'--categories FILE (JSON {{"{name}": ["...", ...]}}); categories read off the '
                "data are data-derived, so they are never used"
            )
        if not math.isfinite(v):
            raise DataError(
                f"party {party}'s column {name!r} ({where}) must be finite, got {c.strip()!r} "
                f"on line {i + 2}"
            )
        if abs(v) > MAX_CELL:  # its range or square would overflow float64 in the scaling
            raise DataError(
                f"party {party}'s column {name!r} ({where}) must hold numbers of magnitude at "
                f"most {MAX_CELL:g}, got {c.strip()!r} on line {i + 2}"
            )
        values[i] = v
    seen = values[~miss]
    values[miss] = (seen.min() + seen.max()) / 2  # a constant: 0 once scaled to [-1, 1]
    return values


def _one_hot(
    party: int,
    where: str,
    name: str,
    cells: list[str],
    miss: np.ndarray,
    cats: list[str],
) -> list[np.ndarray]:
    index = {c: k for k, c in enumerate(cats)}
    onehot = np.zeros((len(cells), len(cats)))
    for i, c in enumerate(cells):
        if miss[i]:
            continue
        k = index.get(c.strip())
        if k is None:
            raise ConfigError(
                f"party {party}'s column {name!r} ({where}) must hold one of its categories "
                f"{cats}, got {c.strip()!r} on line {i + 2}"[:300]
            )
        onehot[i, k] = 1.0
    return list(onehot.T)
