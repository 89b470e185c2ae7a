"""Private entity alignment: each party's table keyed by an ID column, aligned by PSI.

Each party reads its own CSV, checks its ID column (present, no empty or duplicate values, one
type), and the parties run ECDH-PSI over X25519 (:mod:`protocols.psi`) on the runtime, so every
payload is metered. Every party ends with the indices of its rows in the intersection, sorted by
ID: every party knows the IDs of the intersection, so this order reveals nothing more, and it
makes the result independent of the runtime and of the rows' order in the files.

What PSI reveals: the intersection (which of its rows each party keeps) and its size; the active
party also learns each party's row count and which of its rows each other party holds.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.data.cells import ArrowColumns, Columns
from securevfl.errors import ConfigError, DataError, ProtocolError
from securevfl.runtime.base import Runtime
from securevfl.runtime.expect import Expect

_INT_ITEM = r"[+-]?\d+"
_DECIMAL_ITEM = r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?"
_INT = re.compile(f"^{_INT_ITEM}$")
_DECIMAL = re.compile(f"^{_DECIMAL_ITEM}$")
# whole columns at once (one regex call on the newline-joined IDs: 1M rows in ~0.1 s, not ~1 s)
_INTS = re.compile(f"{_INT_ITEM}(?:\n{_INT_ITEM})*")
_DECIMALS = re.compile(f"{_DECIMAL_ITEM}(?:\n{_DECIMAL_ITEM})*")


def _all_match(joined: re.Pattern[str], one: re.Pattern[str], ids: Sequence[str]) -> bool:
    """Every ID matches ``one``; by ``joined`` on the newline-joined IDs when no ID holds a
    newline (then ``$`` can only match at an ID's end, as in ``one``)."""
    text = "\n".join(ids)
    if ids and text.count("\n") == len(ids) - 1:
        return joined.fullmatch(text) is not None
    return all(one.match(v) for v in ids)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (restored after; also a function decorator).

    A table is a million row lists, each a tracked container: their allocation triggers
    collections that walk every live row (reading a 1M-row CSV took 1.9-2.6 CPU s with the
    collector, 0.8 s without). Reading, aligning and writing tables create no reference cycles.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class PartyTable:
    """One party's CSV: header, ID column, and its rows.

    A file without quotes keeps each row as its line of text (``lines``), split into fields only
    if someone asks for :attr:`rows` (the PSI benchmark's two 1M-row files: read and checked in
    1.3 s instead of 2.2 s, kept rows written in 0.1 s instead of 1.0 s). A file with quoted
    fields is parsed by the csv module (``parsed``). Exactly one of the two is set.
    """

    path: Path
    header: list[str]
    id_index: int
    ids: list[str]
    lines: list[str] | None = None
    parsed: list[list[str]] | None = None
    arrow: Any = None  # a table read through Arrow (CSV or Parquet; its ID column trimmed)

    @property
    def rows(self) -> list[list[str]]:
        """The rows as lists of fields (split from ``lines`` on first use: no quotes there)."""
        if self.parsed is None and self.arrow is not None:
            cols = ArrowColumns(self.arrow)
            texts = [cols.column(j).text() for j in range(len(self.header))]
            self.parsed = [list(r) for r in zip(*texts, strict=True)]
        if self.parsed is None:
            self.parsed = [ln.split(",") for ln in self.lines or []]
        return self.parsed

    def features(self) -> tuple[list[str], Columns]:
        """The header and columns without the ID column (what the CSV rules encode)."""
        j = self.id_index
        header = self.header[:j] + self.header[j + 1 :]
        if self.arrow is not None:
            return header, ArrowColumns(self.arrow).drop(j)
        return header, ArrowColumns(self._as_arrow()).drop(j)

    def _as_arrow(self) -> Any:
        """The text rows as an Arrow table of text columns: the kept lines split at commas
        (what :attr:`rows` would split) or the csv module's fields, column-wise."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = [f"c{j}" for j in range(len(self.header))]
        if self.parsed is None and self.lines is not None:
            split = pc.split_pattern(pa.array(self.lines, pa.string()), ",")
            cols = [pc.list_element(split, j) for j in range(len(names))]
        else:
            cols = [pa.array([r[j] for r in self.rows], pa.string()) for j in range(len(names))]
        return pa.table(cols, names=names).rename_columns(self.header)

    def take(self, index: Sequence[int]) -> PartyTable:
        """The table of the rows at ``index``, in that order."""
        ids = [self.ids[i] for i in index]
        if self.arrow is not None:
            taken = self.arrow.take(np.asarray(index, dtype=np.int64))
            return PartyTable(self.path, self.header, self.id_index, ids, arrow=taken)
        if self.lines is not None:
            return PartyTable(
                self.path, self.header, self.id_index, ids, [self.lines[i] for i in index]
            )
        rows = self.rows
        return PartyTable(
            self.path, self.header, self.id_index, ids, parsed=[rows[i] for i in index]
        )


def _too_short(party: int, p: Path, header: list[str], rows: Iterable[Sequence[str]]) -> DataError:
    i, r = next((i, r) for i, r in enumerate(rows) if len(r) != len(header))
    return DataError(
        f"party {party}'s CSV {p.name!r} must have {len(header)} fields per row, "
        f"got {len(r)} on line {i + 2}"
    )


def _missing_id(party: int, p: Path, id_column: str, header: list[str]) -> ConfigError:
    return ConfigError(
        f"party {party}'s CSV {p.name!r} must have the ID column {id_column!r}, "
        f"got columns {header}"
    )


def _plain_lines(text: str) -> list[str] | None:
    """The non-blank lines of a CSV text that needs no CSV parsing: no quote, NUL or lone CR
    (then a field is exactly the text between commas); None where the csv module must parse."""
    if '"' in text or "\0" in text or text.startswith(("\n", "\r")):
        return None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            return None
    return list(filter(None, text.split("\n")))  # blank lines dropped, as the csv path does


@paused_gc()
def read_party_csv(
    path: str | os.PathLike, id_column: str, party: int, *, parquet: bool | None = None
) -> PartyTable:
    """Read party ``party``'s CSV or Parquet source (:mod:`securevfl.data.arrow_input`;
    ``parquet`` None: by the path) and check its ID column (ConfigError naming value and
    rule)."""
    from securevfl.data.arrow_input import id_table, is_parquet_source, read_parquet

    if parquet if parquet is not None else is_parquet_source(path):
        p = Path(path)
        arrow = read_parquet(p, party)
        if id_column not in arrow.column_names:
            raise _missing_id(party, p, id_column, list(arrow.column_names))
        j, ids, arrow = id_table(p, arrow, id_column, party)
        table = PartyTable(p, list(arrow.column_names), j, ids, arrow=arrow)
        check_ids(table.ids, party, p.name, id_column)
        return table
    p = Path(path)
    if not p.is_file():
        raise DataError(f"party {party}'s CSV must exist, got {str(p)!r}")
    try:
        lines = _plain_lines(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:  # binary: one line, no traceback
        raise DataError(f"party {party}'s CSV {p.name!r} must be UTF-8 CSV text: {exc}") from None
    table = _from_lines(p, lines, id_column, party) if lines is not None else None
    if table is None:  # quotes, or IDs to strip: the csv module's path
        table = _parse_csv(p, id_column, party)
    check_ids(table.ids, party, p.name, id_column)
    return table


def _from_lines(p: Path, lines: list[str], id_column: str, party: int) -> PartyTable | None:
    """The fast path: rows kept as their lines; None if an ID needs stripping (csv path)."""
    header = [h.strip() for h in lines[0].split(",")] if lines else []
    if id_column not in header:
        raise _missing_id(party, p, id_column, header)
    j, body = header.index(id_column), lines[1:]
    if any(c != len(header) - 1 for c in set(map(str.count, body, repeat(",")))):
        raise _too_short(party, p, header, (ln.split(",") for ln in body))
    if len(header) == 1:
        ids = list(body)
    elif j == 0:
        ids = list(map(itemgetter(0), map(str.partition, body, repeat(","))))
    else:
        ids = [ln.split(",", j + 1)[j] for ln in body]
    if list(map(str.strip, ids)) != ids:
        return None
    return PartyTable(p, header, j, ids, lines=body)


def _parse_csv(p: Path, id_column: str, party: int) -> PartyTable:
    """The csv module's path (quoted fields): rows as field lists, IDs stripped."""
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            rows = list(filter(None, reader))  # blank lines dropped
    except (UnicodeDecodeError, csv.Error) as exc:  # binary or broken: one line, no traceback
        raise DataError(f"party {party}'s CSV {p.name!r} must be UTF-8 CSV text: {exc}") from None
    if id_column not in header:
        raise _missing_id(party, p, id_column, header)
    j = header.index(id_column)
    # map/filter run these per-row checks at C speed; Python loops only where a row needs it
    if any(n != len(header) for n in set(map(len, rows))):
        raise _too_short(party, p, header, rows)
    col = list(map(itemgetter(j), rows))
    stripped = list(map(str.strip, col))
    if stripped != col:
        for r, v in zip(rows, stripped, strict=True):
            r[j] = v
    return PartyTable(p, header, j, stripped, parsed=rows)


def id_kind(ids: Sequence[str]) -> str:
    """``integer`` if every ID is an integer literal, else ``text``."""
    return "integer" if _all_match(_INTS, _INT, ids) else "text"


def check_ids(ids: Sequence[str], party: int, where: str, column: str) -> None:
    """No empty, decimal or duplicate IDs (PSI could not tell duplicates apart)."""
    if len(ids) != len(set(ids)) or "" in ids:  # rare: find the first offending line
        seen: dict[str, int] = {}
        for i, v in enumerate(ids):
            if not v:
                raise ConfigError(
                    f"party {party}'s ID column {column!r} ({where}) must not be empty, "
                    f"got an empty value on line {i + 2}"
                )
            if v in seen:
                raise ConfigError(
                    f"party {party}'s ID column {column!r} ({where}) must hold distinct IDs, "
                    f"got {v!r} on lines {seen[v] + 2} and {i + 2}"
                )
            seen[v] = i
    # all numbers, not all integers: "17.0" next to "17", a float-converted ID column would
    # silently never match
    if id_kind(ids) == "text" and _all_match(_DECIMALS, _DECIMAL, ids):
        first = next(v for v in ids if not _INT.match(v))
        raise ConfigError(
            f"party {party}'s ID column {column!r} ({where}) must hold integers or text, "
            f"got the decimal number {first!r}"
        )


def _id_order(ids: list[str], rows: np.ndarray, kind: str) -> np.ndarray:
    """Positions that sort ``rows`` (in PSI's agreed order) by ID: every party holds the same
    IDs in that order, so every party's own sort gives the same order (checked afterwards by
    a hash of each aligned list). Stable: integer IDs of equal value ("7", "007") keep the
    agreed order."""
    vals: list[Any] = [ids[i] for i in rows.tolist()]
    if kind == "integer":
        vals = list(map(int, vals))
        try:  # 500k IDs: ~0.05 s in numpy, ~0.3 s for sorted()
            return np.argsort(np.array(vals, dtype=np.int64), kind="stable")
        except OverflowError:  # beyond 64 bits: Python's integers
            pass
    return np.array(sorted(range(len(vals)), key=vals.__getitem__), dtype=np.int64)


def align_ids(
    rt: Runtime,
    ids: dict[int, list[str]],
    *,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    parties: int | None = None,
) -> dict[int, np.ndarray]:
    """SPMD: every local party's row indices of the intersection, sorted by ID (all parties).

    ``ids[k]`` is given where party k lives. ``parties``: the first that many runtime parties
    hold IDs (default all; a run's server holds none and takes no part). Traffic is metered in
    phase ``psi``. Raises ConfigError at every party if the ID types differ or the intersection
    is empty.
    """
    from protocols.psi import Crypto, PSIError, psi_star

    K = rt.n_parties if parties is None else parties
    with rt.meter.in_phase("psi"):
        # the ID type is schema, not data: party 0 checks that everyone's matches; the row
        # counts (which PSI reveals to party 0 anyway, and |X| to every party) size the frames
        got = rt.gather(
            {k: (id_kind(ids[k]), len(ids[k])) if k in ids else None for k in range(K)}, dst=0
        )
        verdict, counts = None, None
        if got is not None:
            kinds = {k: v[0] for k, v in got.items()}
            counts = {k: int(v[1]) for k, v in got.items()}
            diff = [k for k in range(1, K) if kinds[k] != kinds[0]]
            if diff:
                verdict = (
                    f"the ID column must have one type at every party: party 0's is "
                    f"{kinds[0]}, party {diff[0]}'s is {kinds[diff[0]]}"
                )
        said = rt.broadcast(
            (verdict, None if counts is None else counts[0]), src=0, dsts=range(1, K)
        )
        holds = any(k in ids for k in rt.local_parties)  # not a run's server, which has no IDs
        if holds:
            verdict, n_x = said
            if verdict:
                raise ConfigError(verdict)
            _limit_frames(rt, int(n_x), counts)
        encoded = {k: [v.encode() for v in ids[k]] for k in rt.local_parties if k in ids}
        try:  # a process without IDs steps through the protocol's rounds, sending nothing
            with Crypto(workers=workers, progress=progress) as crypto:
                rows = psi_star(rt, encoded, crypto=crypto, parties=list(range(K)))
        except PSIError as exc:
            raise ProtocolError(str(exc)) from None
    # each party sorts its own rows by its own IDs (as each process of a networked run does):
    # equal lists give equal orders, and unequal ones are caught just below
    out = {
        k: rows[k][_id_order(ids[k], rows[k], id_kind(ids[k]))]
        for k in rt.local_parties
        if k in ids
    }
    _same_rows_everywhere(rt, ids, out, parties=list(range(K)))
    if not holds:  # a run's server stepped through every round above with no IDs
        return {}
    if len(next(iter(out.values()))) == 0:
        raise ConfigError("the parties' IDs must intersect, got an empty intersection")
    return out


def aligned_digest(ids: list[str], rows: np.ndarray) -> bytes:
    """sha256 of the IDs of ``rows``, in that order (length-prefixed: no two lists collide)."""
    h = hashlib.sha256(b"securevfl-aligned-ids|%d|" % len(rows))
    for i in rows.tolist():
        v = ids[i].encode("utf-8", "surrogatepass")
        h.update(len(v).to_bytes(4, "little") + v)
    return h.digest()


def _same_rows_everywhere(
    rt: Runtime, ids: dict[int, list[str]], rows: dict, *, parties: list[int]
) -> None:
    """PSI's result proven before training: every party holds the same IDs in the same order.

    Each party sends party 0 a hash of its aligned ID list (every party knows the intersection,
    so the hash tells no one anything new); a reordered or short reply from a peer (rows that
    differ in one position, 10 rows at one party and 5 at another) stops every party, naming
    the parties whose lists differ from party 0's."""
    with rt.meter.in_phase("psi"):
        mine = {k: aligned_digest(ids[k], rows[k]) if k in rows else None for k in parties}
        check = Expect("aligned IDs check", kind="bytes", max_len=32)
        got = rt.gather(mine, dst=0, expect=check)
        odd = None
        if got is not None:
            odd = np.array([k for k in sorted(got) if got[k] != got[0]], dtype=np.int64)
        verdict = Expect("aligned IDs verdict", dtype="iu", shape=(None,), lo=1, hi=len(parties))
        odd = rt.broadcast(odd, src=0, dsts=parties[1:], expect=verdict)
        odd = [] if odd is None else odd.tolist()  # None: a process without IDs (a server)
    if odd:
        raise ProtocolError(
            f"PSI left {'party' if len(odd) == 1 else 'parties'} {', '.join(map(str, odd))} "
            "with other rows or another order than party 0 (hashes of the aligned ID lists "
            "differ): not training on misaligned rows"
        )


def _limit_frames(rt: Runtime, n_x: int, counts: dict[int, int] | None) -> None:
    """Networked runtime: accept PSI's largest frames. Party k receives party 0's n_x points
    (and at most n_x positions); party 0 receives n_x re-blinded points with party k's n_k."""
    if not hasattr(rt, "limit_frames"):
        return
    from protocols.psi import POINT_BYTES
    from securevfl.runtime.frame_limits import MAX_FRAME, SLACK_BYTES, SLACK_FACTOR

    n_k = max((v for k, v in counts.items() if k != 0), default=0) if counts else 0
    largest = POINT_BYTES * (n_x + n_k)
    rt.limit_frames(max(rt.frame_limit, min(SLACK_FACTOR * largest + SLACK_BYTES, MAX_FRAME)))


def default_workers() -> int:
    """Worker processes per party for the group operations: every core.

    Even with one process per party the protocol's phases mostly run one party at a time
    (party k re-blinds while party 0 waits), so each party may use the whole machine.
    """
    return os.cpu_count() or 1


@paused_gc()
def align_tables(
    rt: Runtime,
    tables: dict[int, PartyTable],
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    parties: int | None = None,
) -> tuple[dict[int, PartyTable], dict[str, Any] | None]:
    """Align the local parties' tables; return them (rows kept, agreed order) and, at party 0,
    the alignment record ``{rows: [...], kept, comm}``. ``parties``: as in :func:`align_ids`
    (a process without a table passes ``tables={}`` and still takes part in the collections).

    Local parties work one after another in-process, so each may use every core.
    """
    if workers is None:
        workers = default_workers()
    K = rt.n_parties if parties is None else parties
    rows = align_ids(
        rt, {k: t.ids for k, t in tables.items()}, workers=workers, progress=progress, parties=K
    )

    kept = {k: t.take(rows[k].tolist()) for k, t in tables.items()}
    counts = rt.collect({k: len(t.ids) for k, t in tables.items()}, dst=0)
    meters = rt.collect(rt.meter.export(), dst=0)
    if counts is None:
        return kept, None
    n_rows: dict[int, int] = {}
    for d in counts.values():
        n_rows.update(d)
    from securevfl.runtime.channel import merge_reports

    merged = rt.meter
    if len(rt.local_parties) < rt.n_parties:  # a peer's report is checked first
        merged = merge_reports(rt, meters, frame_limit=rt.frame_limit)
    record = {
        "id_column": tables[0].header[tables[0].id_index],
        "rows": [n_rows[k] for k in range(K)],
        "kept": len(rows[0]),
        "revealed": "the intersection size and which of its own rows each party keeps; "
        "party 0 also learns every party's row count and which of its rows each party holds",
        "comm": merged.summary(rt.n_parties),
    }
    return kept, record


@paused_gc()
def write_table(table: PartyTable, path: Path) -> None:
    """Write a party's (aligned) rows with its header (a Parquet file where the name ends in
    ``.parquet``/``.pq``, else CSV)."""
    from securevfl.data.arrow_input import PARQUET_SUFFIXES

    if table.arrow is not None and path.name.lower().endswith(PARQUET_SUFFIXES):
        import pyarrow.parquet as pq

        pq.write_table(table.arrow, path)
        return
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(table.header)
        if table.lines is None:
            w.writerows(table.rows)
        elif table.lines:  # the rows' own text: what the csv module would write for them
            f.write("\n".join(table.lines) + "\n")
