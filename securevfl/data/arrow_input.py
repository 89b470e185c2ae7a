"""A party's own file through Apache Arrow: a CSV or a Parquet source, read by pyarrow.

Both formats end as one Arrow table per party, asked column by column by the one set of CSV
rules (:mod:`securevfl.data.cells`, :mod:`securevfl.data.csv_columns`): the format changes how
cells are read, never what the rules decide.

- **CSV**: parsed by Arrow's multithreaded reader with every column as text (so the missing-cell
  rule, the ID text and the number reading stay the rules'); a file Arrow cannot parse (a row of
  the wrong width, bytes that are not UTF-8, a newline inside quotes) is read by Python's csv
  module instead, which accepts what it accepts and names the line it refuses.
- **Parquet**: a file, a folder of shards (``*.parquet`` inside it, sorted by name) or a glob;
  one dataset whose row groups Arrow reads in parallel. Columns keep their types.

On the command line ``parquet:A,B`` names one Parquet source per party, as ``csv:A.csv,B.csv``
names one CSV per party; ``--data PATH`` (one party's own source) is Parquet where ``PATH`` is a
folder, a glob or ends in ``.parquet``/``.pq`` (a name ending in ``.csv`` is a CSV).
"""

from __future__ import annotations

import csv
import glob
from pathlib import Path
from typing import Any

from securevfl.data.cells import ArrowColumns, Columns, TextColumns
from securevfl.errors import ConfigError, DataError

PARQUET_PREFIX = "parquet:"
PARQUET_SUFFIXES = (".parquet", ".pq")


def is_parquet_source(path: str | Path) -> bool:
    """A folder, a glob or a ``.parquet``/``.pq`` file: a Parquet source; anything else, and
    any name ending in ``.csv`` (a folder so named is refused as a CSV), a CSV."""
    text = str(path)
    if text.lower().endswith(".csv"):
        return False
    return (
        Path(text).is_dir()
        or any(c in text for c in "*?[")
        or text.lower().endswith(PARQUET_SUFFIXES)
    )


def parquet_files(path: str | Path, party: int) -> list[str]:
    """The Parquet files of a source: the file, a folder's ``*.parquet`` files, a glob's."""
    text = str(path)
    if Path(text).is_dir():
        files = sorted(
            str(p) for p in Path(text).rglob("*") if p.suffix.lower() in PARQUET_SUFFIXES
        )
    elif any(c in text for c in "*?["):
        files = sorted(glob.glob(text, recursive=True))
    else:
        files = [text] if Path(text).is_file() else []
    if not files:
        raise DataError(
            f"party {party}'s Parquet source must name a file, a folder of .parquet files or a "
            f"glob matching some, got {text!r} (no such files)"
        )
    return files


def read_parquet(path: str | Path, party: int) -> Any:
    """Party ``party``'s Parquet source as one Arrow table (one DataError line if not)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    files = parquet_files(path, party)
    try:
        table = ds.dataset(files, format="parquet").to_table(use_threads=True)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"party {party}'s Parquet source {str(path)!r} must hold Parquet files of one "
            f"schema: {str(exc).splitlines()[0]}"[:300]
        ) from None
    check_schema(table.schema, party)
    names = [n.strip() for n in table.column_names]
    if table.num_rows == 0:
        raise DataError(f"party {party}'s Parquet {str(path)!r} must hold >= 1 row, got none")
    return table.rename_columns(names)


def check_schema(schema: Any, party: int) -> None:
    """Every column of a Parquet schema holds numbers or text (one DataError line if not)."""
    import pyarrow as pa

    for field in schema:
        if pa.types.is_nested(field.type) or pa.types.is_binary(field.type):
            raise DataError(
                f"party {party}'s Parquet column {field.name!r} must hold numbers or text, "
                f"got {field.type}"
            )


def read_csv_arrow(p: Path, party: int) -> Any | None:
    """Party ``party``'s CSV as an Arrow table of text columns; None where Arrow cannot parse
    it (then the csv module reads it and names the offending line)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with p.open(newline="", encoding="utf-8") as f:
            header = [h.strip() for h in next(csv.reader(f), [])]
    except (UnicodeDecodeError, csv.Error):
        return None
    if not header:
        return None
    generated = [f"c{j}" for j in range(len(header))]
    try:
        table = pacsv.read_csv(
            p,
            read_options=pacsv.ReadOptions(column_names=generated, skip_rows=1),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in generated},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            ),
        )
    except (pa.ArrowException, OSError):
        return None
    return table.rename_columns(header)


def read_own_table(path: str | Path, party: int, *, parquet: bool | None = None) -> tuple:
    """Header and columns of party ``party``'s own source (one DataError line if unreadable).

    ``parquet``: the format (None: by the path, :func:`is_parquet_source`)."""
    if parquet is None:
        parquet = is_parquet_source(path)
    if parquet:
        table = read_parquet(path, party)
        return list(table.column_names), ArrowColumns(table)
    p = Path(path)
    if p.is_file() and b"\x00" not in p.open("rb").read(65536):
        table = read_csv_arrow(p, party)
        if table is not None and table.num_rows > 0:
            return list(table.column_names), ArrowColumns(table)
    header, rows = read_text_csv(p, party)  # refuses with the rule's line, or reads it
    return header, TextColumns(rows)


def read_text_csv(p: Path, k: int) -> tuple[list[str], list[list[str]]]:
    """Header and text rows of party ``k``'s CSV, or one DataError line naming the file."""
    if not p.is_file():
        what = "a directory" if p.is_dir() else "no such file"
        raise DataError(f"party {k}'s CSV must be a file, got {str(p)!r} ({what})")
    if b"\x00" in p.read_bytes()[:65536]:
        raise DataError(f"party {k}'s CSV {str(p)!r} must be UTF-8 text, got binary data")
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            rows = [r for r in reader if r]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"party {k}'s CSV {str(p)!r} must be UTF-8 CSV text: {exc}") from None
    if not rows:
        raise DataError(f"party {k}'s CSV {str(p)!r} must hold >= 1 data row, got none")
    for i, r in enumerate(rows):
        if len(r) != len(header):
            raise DataError(
                f"party {k}'s CSV {p.name!r} must have {len(header)} fields per row, "
                f"got {len(r)} on line {i + 2}"
            )
    return header, rows


def id_table(p: Path, arrow: Any, id_column: str, party: int) -> tuple[int, list[str], Any]:
    """The ID column's index, its cells as trimmed text (an integer column's digits; a float
    column is refused: a float-converted ID would silently never match) and the table with the
    column so."""
    import pyarrow as pa
    import pyarrow.compute as pc

    j = arrow.column_names.index(id_column)
    col = arrow.column(j)
    if pa.types.is_floating(col.type) or pa.types.is_decimal(col.type):
        raise ConfigError(
            f"party {party}'s ID column {id_column!r} ({p.name}) must hold integers or text, "
            f"got a {col.type} column"
        )
    ids = pc.fill_null(pc.utf8_trim_whitespace(pc.cast(col, pa.string())), "")
    return j, ids.to_pylist(), arrow.set_column(j, id_column, ids)


def output_name(source: Path) -> str:
    """The file name a party's aligned rows get: its CSV's name; a Parquet source's name
    with ``.parquet`` (one file, whatever the number of shards read)."""
    name = source.name
    if is_parquet_source(source) and not name.lower().endswith(PARQUET_SUFFIXES):
        return name.replace("*", "all").replace("?", "_") + ".parquet"
    return name


def without(header: list[str], cols: Columns, j: int) -> tuple[list[str], Columns]:
    """The header and columns without column ``j`` (an ID or the label)."""
    return header[:j] + header[j + 1 :], cols.drop(j)
