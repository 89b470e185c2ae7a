"""Two (or K) parties' Parquet sources for the scale runs: seeded, written row group by row group.

``python -m bench.scale_parquet OUT --rows 30000000`` writes ``OUT/p0`` (party 0: its columns
and the label) and ``OUT/p1`` ... as shards of ``--shard-rows`` rows in row groups of
``--group-rows``; never more than one row group in memory. Each party's columns are uniform on
[-1, 1]; the label is a logistic draw from a fixed weight vector over all parties' columns (so
each party's block carries signal). Row group g draws from ``default_rng([seed, g])``: the same
rows whatever the shard size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def write_parties(
    out: str | Path,
    rows: int,
    *,
    parties: int = 2,
    columns: int = 20,
    group_rows: int = 65_536,
    shard_rows: int = 1_048_576,
    seed: int = 0,
) -> list[Path]:
    """Write the parties' sources under ``out``; return their folders (party order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if rows < 1 or parties < 2 or columns < 1 or group_rows < 1 or shard_rows % group_rows:
        raise ValueError(
            "rows, columns and group_rows must be >= 1, parties >= 2 and shard_rows a "
            f"multiple of group_rows, got {rows}, {columns}, {group_rows}, {parties}, {shard_rows}"
        )
    dirs = [Path(out) / f"p{k}" for k in range(parties)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    weights = np.random.default_rng([seed, 1 << 40]).normal(0.0, 1.0, parties * columns)
    writers: list = []
    for g, start in enumerate(range(0, rows, group_rows)):
        if start % shard_rows == 0:
            for w in writers:
                w.close()
            writers = []
        r = min(group_rows, rows - start)
        rng = np.random.default_rng([seed, g])
        X = rng.uniform(-1.0, 1.0, (r, parties * columns))
        p = 1.0 / (1.0 + np.exp(-(X @ weights) / np.sqrt(columns)))
        y = (rng.random(r) < p).astype(np.int64)
        for k, d in enumerate(dirs):
            cols = {f"p{k}_x{j}": X[:, k * columns + j] for j in range(columns)}
            if k == 0:
                cols["label"] = y
            table = pa.table(cols)
            if not writers or len(writers) <= k:
                path = d / f"part-{start // shard_rows:05d}.parquet"
                writers.append(pq.ParquetWriter(path, table.schema))
            writers[k].write_table(table, row_group_size=group_rows)
    for w in writers:
        w.close()
    return dirs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_parquet", description=__doc__)
    ap.add_argument("out", help="folder to write p0, p1, ... into")
    ap.add_argument("--rows", type=int, required=True, help="rows per party")
    ap.add_argument("--parties", type=int, default=2, help="data parties K (default 2)")
    ap.add_argument("--columns", type=int, default=20, help="columns per party (default 20)")
    ap.add_argument("--group-rows", type=int, default=65_536, help="rows per row group")
    ap.add_argument("--shard-rows", type=int, default=1_048_576, help="rows per file")
    ap.add_argument("--seed", type=int, default=0, help="seed of the rows (default 0)")
    a = ap.parse_args(argv)
    try:
        dirs = write_parties(
            a.out,
            a.rows,
            parties=a.parties,
            columns=a.columns,
            group_rows=a.group_rows,
            shard_rows=a.shard_rows,
            seed=a.seed,
        )
    except ValueError as exc:
        print(f"scale_parquet: {exc}", file=sys.stderr)
        return 2
    print(",".join(str(d) for d in dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
