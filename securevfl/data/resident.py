"""A party's table that stays on its Dask engine: Parquet read block by block on the cluster.

With ``--engine dask`` and a ``parquet:`` source, a data party never reads its table into its
own process. It reads the Parquet footers (row counts, row groups, the schema) and plans
blocks of whole row groups (:data:`securevfl.engine.BLOCK_ROWS` rows at most, one row group at
least); every pass over the rows is a Dask reduction whose tasks each read one block on a
worker and apply the CSV rules to it (:func:`~securevfl.data.csv_columns.encode_rows`, the
rules every source follows), then the scaling, centring and unit-row steps as pure functions of
the block. Nothing of size n x d is persisted: at 30M rows and d = 40 a party's float64 block
is 9.6 GB, so each pass re-reads its blocks (one block per worker thread in memory).

What the party process holds: the footers, the labels (the label holder only: the labels
are its; read a batch at a time into int8 class indices, :func:`read_labels`), the split's
positions (int32) and the n-vectors of the protocol (X w, the derivatives: float64, as sent),
never a row of its features. Column statistics the rules need are reductions
over the blocks: each column's missing cells (the rules' indicators), its exact min/max (a run
without an ε or --bounds) or its histogram (the DP ranges' release: the same noise on the same
counts as the in-memory path), the training rows' means for centring. Sums associate
differently over blocks, so the model agrees with the in-memory path to float rounding.

Limits (each refused in one line naming it): no ``--id-column`` (PSI needs the whole ID
column: align first, ``securevfl align``), a binary or multiclass label (a regression target's
scaling is not blockwise here), and the ID-like-first-column rule looks at the first block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from securevfl.data.arrow_input import check_schema, parquet_files
from securevfl.data.bounds import domains_of, is_indicator
from securevfl.data.cells import ArrowColumn, ArrowColumns
from securevfl.data.csv_columns import ColumnRule, check_not_id, encode_rows, rules_from_missing
from securevfl.data.preprocess import scale_by_ranges
from securevfl.errors import ConfigError, DataError
from securevfl.privacy.dp_bounds import histograms, ranges_from_counts


@dataclasses.dataclass(frozen=True)
class Block:
    """Consecutive row groups of one Parquet file: the unit a worker reads."""

    file: str
    groups: tuple[int, ...]
    rows: int


def plan_blocks(files: Sequence[str], block_rows: int) -> list[Block]:
    """The files' row groups gathered into blocks of at most ``block_rows`` rows (a larger
    row group is a block of its own), in file order: the table's row order."""
    import pyarrow.parquet as pq

    out: list[Block] = []
    for f in files:
        meta = pq.ParquetFile(f).metadata
        groups: list[int] = []
        rows = 0
        for g in range(meta.num_row_groups):
            r = meta.row_group(g).num_rows
            if groups and rows + r > block_rows:
                out.append(Block(f, tuple(groups), rows))
                groups, rows = [], 0
            groups.append(g)
            rows += r
        if groups:
            out.append(Block(f, tuple(groups), rows))
    return [b for b in out if b.rows > 0]


def read_block(block: Block, columns: Sequence[str]) -> Any:
    """One block's ``columns`` as an Arrow table (on a worker)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(block.file).read_row_groups(
        list(block.groups), columns=list(columns), use_threads=False
    )


@dataclasses.dataclass(frozen=True)
class Reader:
    """What a worker needs to read and encode a block: the schema and the fitted rules."""

    party: int
    where: str
    raw: tuple[str, ...]  # the Parquet column names of the features, file order
    header: tuple[str, ...]  # the same, trimmed (what the rules name)
    rules: tuple[ColumnRule, ...] = ()

    def columns(self, block: Block, rows: np.ndarray | None = None) -> ArrowColumns:
        """The block's columns (``rows``: only those rows of it, in that order)."""
        table = read_block(block, self.raw)
        table = table if rows is None else table.take(rows)
        return ArrowColumns(table.rename_columns(list(self.header)))

    def encode(self, block: Block, rows: np.ndarray | None = None) -> np.ndarray:
        """The block's cells (``rows``: of those rows) as numbers by the CSV rules (NaN where
        blank, indicators)."""
        rules, header = list(self.rules), list(self.header)
        cols = self.columns(block, rows)
        return encode_rows(self.party, self.where, rules, header, cols, training=True).block


def _apply(
    reader: Reader, block: Block, step: Callable | None, fn: Callable | None, rows: Any = None
) -> Any:
    X = reader.encode(block, rows)
    X = X if step is None else step(X)
    return X if fn is None else fn(X)


@dataclasses.dataclass
class ResidentTable:
    """What a party process knows of its own table: its schema, rules and block plan, the
    encoded columns' names and scaling ranges; the rows stay on ``engine``."""

    reader: Reader
    blocks: list[Block]
    engine: Any
    names: list[str] = dataclasses.field(default_factory=list)  # encoded columns
    ranges: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    @property
    def n(self) -> int:
        return sum(b.rows for b in self.blocks)

    def array(self, step: Callable[[np.ndarray], np.ndarray] | None = None) -> Any:
        """The table as a lazy Dask array, one chunk per block: each block read, encoded and
        ``step`` applied on a worker whenever a computation needs it."""
        import dask.array as da
        from dask import delayed

        d = len(self.names)
        parts = [
            da.from_delayed(
                delayed(_apply, pure=True)(self.reader, b, step, None),
                shape=(b.rows, d),
                dtype=np.float64,
            )
            for b in self.blocks
        ]
        return da.concatenate(parts, axis=0)

    def taker(self, step: Callable[[np.ndarray], np.ndarray] | None = None) -> Callable:
        """(block index, positions in it) -> a task giving only those rows of :meth:`array`
        (``step``): taken from the block's Arrow table before the rules and ``step`` run."""
        from dask import delayed

        return lambda i, rows: delayed(_apply, pure=True)(
            self.reader, self.blocks[i], step, None, rows
        )

    def per_block(self, fn: Callable[[np.ndarray], Any], step: Callable | None = None) -> list:
        """``fn(encoded block)`` of every block, computed on the engine (small results)."""
        from dask import delayed

        tasks = [delayed(_apply, pure=True)(self.reader, b, step, fn) for b in self.blocks]
        return self.engine.gather(tasks, f"party {self.reader.party}'s blocks")


def open_resident(
    party: int,
    source: str,
    engine: Any,
    *,
    label: str | None,
    categories: dict[str, list[str]],
    feature_column: str | None = None,
) -> tuple[ResidentTable, tuple[np.ndarray, np.ndarray] | None]:
    """Party ``party``'s Parquet source as a :class:`ResidentTable` (rules fitted over its
    blocks on ``engine``) and, where ``label`` names its label column, its labels as
    :func:`read_labels` gives them."""
    import pyarrow.parquet as pq
    from dask import delayed

    files = parquet_files(source, party)
    schema = pq.read_schema(files[0])
    check_schema(schema, party)
    raw = list(schema.names)
    header = [n.strip() for n in raw]
    where = source
    y = None
    if label is not None:
        if label not in header:
            raise DataError(f"party 0's Parquet must have a {label!r} column, got {header}"[:300])
        j = header.index(label)
        y = read_labels(files, raw[j], label, where)
        del raw[j], header[j]
    if not header:
        raise DataError(f"party {party}'s Parquet must hold >= 1 feature column, got none")
    blocks = plan_blocks(files, engine.block_rows)
    if not blocks:
        raise DataError(f"party {party}'s Parquet {source!r} must hold >= 1 row, got none")
    reader = Reader(party, where, tuple(raw), tuple(header))
    check_not_id(
        party, where, header[0], reader.columns(blocks[0]).column(0), categories, feature_column
    )
    tasks = [delayed(_missing_counts, pure=True)(reader, b) for b in blocks]
    missing = np.sum(engine.gather(tasks, f"party {party}'s missing-cell counts"), axis=0)
    n = sum(b.rows for b in blocks)
    rules = rules_from_missing(party, where, header, missing, n, categories)
    table = ResidentTable(dataclasses.replace(reader, rules=tuple(rules)), blocks, engine)
    table.names = [o for r in rules for o in r.outputs]
    return table, y


LABEL_BATCH = 1 << 20  # label rows read at once


def read_labels(
    files: Sequence[str], raw: str, label: str, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """The label column ``raw`` of ``files`` as (its distinct values, sorted; each row's index
    into them, :func:`class_indices`'s types): the labels of ``_labels`` (the CSV rules), read
    :data:`LABEL_BATCH` rows at a time where the column is numeric, so the process never holds
    the column as Arrow integers and floats at once (866 MiB at 30M rows, of which Arrow's pool
    kept 645 after). Text labels are read whole (their class indices need every value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from securevfl.data.custom import _labels

    if not ArrowColumn.numeric_type(pq.read_schema(files[0]).field(raw).type):
        col = pq.ParquetDataset(files).read(columns=[raw], use_threads=True).column(0)
        return class_indices(_labels(label, where, ArrowColumn(col)))
    parts = []  # per batch: its distinct values and each row's index into them
    for f in files:
        for i, batch in enumerate(pq.ParquetFile(f).iter_batches(LABEL_BATCH, columns=[raw])):
            at = f"{f}, rows from {i * LABEL_BATCH}"
            parts.append(class_indices(_labels(label, at, ArrowColumn(batch.column(0)))))
    pa.default_memory_pool().release_unused()  # what Arrow's pool kept of the batches
    classes = np.unique(np.concatenate([c for c, _ in parts])) if parts else np.zeros(0)
    out = np.empty(sum(len(i) for _, i in parts), dtype=np.min_scalar_type(-max(1, len(classes))))
    start = 0
    for c, i in parts:
        out[start : start + len(i)] = np.searchsorted(classes, c)[i]
        start += len(i)
    return classes, out


def class_indices(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted classes, each row's class index) as ``np.unique(labels, return_inverse=True)``,
    the indices in the smallest signed type that holds them (int8 up to 128 classes: signed,
    so arithmetic such as 2 y - 1 stays what int64 gives) and found a chunk of rows at a time:
    no n-long sort or int64 copies of the column."""
    step = LABEL_BATCH
    parts = [np.unique(labels[s : s + step]) for s in range(0, len(labels), step)]
    classes = np.unique(np.concatenate(parts)) if parts else np.zeros(0)
    out = np.empty(len(labels), dtype=np.min_scalar_type(-max(1, len(classes))))
    for s in range(0, len(labels), step):
        out[s : s + step] = np.searchsorted(classes, labels[s : s + step])
    return classes, out


def _missing_counts(reader: Reader, block: Block) -> np.ndarray:
    cols = reader.columns(block)
    return np.array([int(cols.column(j).miss.sum()) for j in range(len(reader.header))])


def fit_ranges(table: ResidentTable, declared: dict | None, dp: Any = None) -> bool:
    """Set ``table.ranges`` as the in-memory path does (``register_party_arrays``):
    ``declared`` (--bounds), else the DP release of ``dp`` (a DpRanges) from the blocks'
    summed histograms (the same counts, so the same noise gives the same ranges), else each
    column's exact min/max. True where the ranges were fitted to the rows (exact min/max)."""
    names = table.names
    if declared is not None:
        absent = [n for n in names if n not in declared and not is_indicator(n)]
        if absent:
            raise ConfigError(f"bounds file must declare every column, missing {absent[:10]}")
        table.ranges = [tuple(declared.get(n, (0.0, 1.0))) for n in names]
        return False
    if dp is not None:
        numeric = [j for j, n in enumerate(names) if not is_indicator(n)]
        counts = np.sum(table.per_block(lambda X: histograms(X[:, numeric])), axis=0)
        released = ranges_from_counts(counts, table.n, dp.plan, dp.rng)
        table.ranges = domains_of(names, released, False)[0]
        return False
    got = table.per_block(lambda X: (np.fmin.reduce(X, axis=0), np.fmax.reduce(X, axis=0)))
    lo = np.fmin.reduce([g[0] for g in got])  # fmin: a block with only blanks in a column
    hi = np.fmax.reduce([g[1] for g in got])
    table.ranges = [(float(a), float(b)) for a, b in zip(lo, hi, strict=True)]
    return True


def scaled(table: ResidentTable) -> Callable[[np.ndarray], np.ndarray]:
    """The scaling step of every block: each column into [-1, 1] by its range, blanks 0."""
    ranges = list(table.ranges)
    return lambda X: scale_by_ranges(X, ranges)
