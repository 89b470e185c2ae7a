"""A party's raw columns, whatever the file format: what the CSV rules ask of a column.

The rules of :mod:`securevfl.data.csv_columns` (missing cells, numbers, categories, ID-like
columns, labels) are stated on cells of text. A table read through Apache Arrow (a CSV parsed
by ``pyarrow.csv``, a Parquet file's typed columns) answers the same questions column-wise:
which cells are missing, the column as float64 when every present cell is a number, the cells as
text where a rule needs them (an error line, a category, an ID). :class:`TextColumns` answers
them for rows given as lists of strings. The rules decide; a column only converts.

- An Arrow **text** column: a cell is missing by :data:`MISSING` (trimmed, any case), as in a
  CSV; its numbers are Arrow's cast to float64 (correctly rounded, as Python's ``float``); where
  Arrow refuses a cell the rules fall back to Python's reading of that column's text.
- An Arrow **numeric** column (int, float, decimal, bool as 0/1): a cell is missing where it is
  null or NaN; its text (for error lines) is Arrow's cast to string.
- Any other Arrow type (dates, timestamps, ...) is read as its text (a categorical column).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

MISSING = frozenset({"", "na", "n/a", "nan", "null", "?"})
INT_LITERAL = re.compile(r"^[+-]?\d+$")


def is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING


class TextColumn:
    """One column of rows given as lists of strings."""

    def __init__(self, cells: list[str]) -> None:
        self._cells = cells
        self.miss = np.array([is_missing(c) for c in cells], dtype=bool)

    def __len__(self) -> int:
        return len(self._cells)

    def text(self) -> list[str]:
        return self._cells

    def numbers(self) -> np.ndarray | None:
        """None: the rules read the text cell by cell."""
        return None

    def integers(self) -> list[int] | None:
        """The cells as integers where every one is an integer literal."""
        if not all(INT_LITERAL.match(c.strip()) for c in self._cells):
            return None
        return [int(c) for c in self._cells]

    def distinct(self) -> bool:
        return len(set(self._cells)) == len(self._cells)


class TextColumns:
    """Rows given as lists of strings, asked column by column."""

    def __init__(self, rows: Sequence[Sequence[str]]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def column(self, j: int) -> TextColumn:
        return TextColumn([r[j] for r in self._rows])

    def drop(self, j: int) -> TextColumns:
        return TextColumns([list(r[:j]) + list(r[j + 1 :]) for r in self._rows])

    def take(self, index: Sequence[int]) -> TextColumns:
        return TextColumns([self._rows[i] for i in index])


class ArrowColumn:
    """One column of an Arrow table (a ChunkedArray), asked by the rules."""

    def __init__(self, array: Any) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self._pa, self._pc = pa, pc
        t = array.type
        self._numeric = self.numeric_type(t)
        if self._numeric:
            self._array = array
            miss = pc.is_null(array, nan_is_null=True)
        else:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                array = pc.cast(array, pa.string())
            self._array = array
            self._trimmed = pc.utf8_trim_whitespace(array)
            miss = pc.or_(
                pc.is_null(array), pc.is_in(pc.utf8_lower(self._trimmed), pa.array(MISSING))
            )
        self.miss = np.asarray(miss.to_numpy(zero_copy_only=False), dtype=bool)

    @staticmethod
    def numeric_type(t: Any) -> bool:
        """Whether the rules read an Arrow type's cells as numbers (not as text)."""
        import pyarrow as pa

        types = pa.types
        return (
            types.is_integer(t)
            or types.is_floating(t)
            or types.is_decimal(t)
            or types.is_boolean(t)
        )

    def __len__(self) -> int:
        return len(self._array)

    def text(self) -> list[str]:
        """The cells as text (a null as the empty cell)."""
        pa, pc = self._pa, self._pc
        out = self._array if not self._numeric else pc.cast(self._array, pa.string())
        return pc.fill_null(out, "").to_pylist()

    def numbers(self) -> np.ndarray | None:
        """float64 with NaN where missing; None where Arrow cannot read a present cell."""
        pa, pc = self._pa, self._pc
        if self._numeric:
            v = pc.cast(self._array, pa.float64())
        else:
            present = pc.if_else(pa.array(self.miss), pa.scalar(None, pa.string()), self._trimmed)
            try:
                v = pc.cast(present, pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        out = np.array(v.to_numpy(zero_copy_only=False), dtype=np.float64)  # writable
        out[self.miss] = np.nan
        return out

    def integers(self) -> np.ndarray | list[int] | None:
        """The cells as integers where every one is an integer literal (or the column is of
        an integer type); int64, or Python's integers beyond 64 bits."""
        pa, pc = self._pa, self._pc
        if pa.types.is_integer(self._array.type):
            return np.asarray(self._array.to_numpy(zero_copy_only=False), dtype=np.int64)
        if self._numeric:
            return None
        regex = INT_LITERAL.pattern
        if not pc.all(pc.match_substring_regex(self._trimmed, regex)).as_py():
            return None
        try:
            return np.asarray(pc.cast(self._trimmed, pa.int64()).to_numpy(), dtype=np.int64)
        except pa.ArrowInvalid:  # beyond 64 bits
            return [int(c) for c in self._trimmed.to_pylist()]

    def distinct(self) -> bool:
        """No two cells alike (as text; as values in a typed column)."""
        return self._pc.count_distinct(self._array).as_py() == len(self._array)


class ArrowColumns:
    """A party's table read through Arrow (its ID column, if any, still in it)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    def column(self, j: int) -> ArrowColumn:
        return ArrowColumn(self.table.column(j))

    def drop(self, j: int) -> ArrowColumns:
        return ArrowColumns(self.table.remove_column(j))

    def take(self, index: Sequence[int]) -> ArrowColumns:
        return ArrowColumns(self.table.take(np.asarray(index, dtype=np.int64)))


Columns = TextColumns | ArrowColumns
Column = TextColumn | ArrowColumn


def as_columns(rows: Sequence[Sequence[str]] | Columns) -> Columns:
    """Rows as lists of strings, or a table already read: asked column by column."""
    if isinstance(rows, TextColumns | ArrowColumns):
        return rows
    return TextColumns(rows)
