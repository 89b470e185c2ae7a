"""``--bounds FILE``: the public domain of each column of a ``csv:`` dataset.

A CSV's columns have no catalogue entry. A bounds file declares them: a CSV with the header
``column,lo,hi`` and one line per column name of the parties' files (``label`` bounds a
regression target). Values outside a bound are clipped into it, row by row. It spends no
budget, so it is the better way. Without one, a run with an ε releases each party's ranges
under a share of the budget (:func:`released_domains`, ``--bounds-share``), and a run without
an ε scales each column by its own exact min/max (one person's value: such a run claims no
privacy).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from securevfl.errors import ConfigError
from securevfl.privacy.dp_bounds import BoundsPlan, released_ranges

MAX_BYTES = 1 << 20  # a bounds file is a schema: a megabyte is thousands of columns


def read_bounds(path: str | Path) -> dict[str, tuple[float, float]]:
    """``{column: (lo, hi)}`` from a bounds file (ConfigError naming the line and the rule)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"bounds must be a file, got {str(p)!r}")
    raw = p.read_bytes()[: MAX_BYTES + 1]
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"bounds file must be at most {MAX_BYTES} bytes, got more: {str(p)!r}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"bounds file must be UTF-8 text, got binary data: {str(p)!r}") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows or [c.strip() for c in rows[0]] != ["column", "lo", "hi"]:
        raise ConfigError(f"bounds file must start with the header column,lo,hi: {str(p)!r}")
    out: dict[str, tuple[float, float]] = {}
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != 3:
            raise ConfigError(f"bounds line {i} must have 3 fields (column,lo,hi), got {row}")
        name = row[0].strip()
        try:
            lo, hi = float(row[1]), float(row[2])
        except ValueError:
            raise ConfigError(f"bounds line {i} must give numbers lo, hi, got {row[1:]}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ConfigError(f"bounds line {i} must have finite lo <= hi, got [{lo}, {hi}]")
        if name in out:
            raise ConfigError(f"bounds line {i}: column {name!r} must appear once, got twice")
        out[name] = (lo, hi)
    return out


def check_covered(bounds: dict[str, tuple[float, float]], names: list[str]) -> None:
    """Every column in ``names`` must have a bound (ConfigError naming the missing ones)."""
    missing = [n for n in names if n not in bounds]
    if missing:
        raise ConfigError(f"bounds file must declare every column, missing {missing[:10]}")


@dataclass
class DpRanges:
    """How a party without --bounds releases its ranges in a run with an ε: the run's public
    plan and the party's own noise generator."""

    plan: BoundsPlan
    rng: np.random.Generator


def is_indicator(name: str) -> bool:
    """A one-hot ('col=cat') or missing-indicator ('col_missing') column: public [0, 1]."""
    return "=" in name or name.endswith("_missing")


def released_domains(
    names: list[str],
    raw: np.ndarray,
    plan: BoundsPlan,
    rng: np.random.Generator,
    target: np.ndarray | None = None,
) -> tuple[list[tuple[float, float]], tuple[float, float] | None]:
    """A party's scaling ranges without --bounds in a run with an ε: its numeric columns (and
    a regression ``target``, the label holder's) released together as one noisy histogram
    (:mod:`securevfl.privacy.dp_bounds`); indicator columns keep the public [0, 1]. Returns
    each column's (lo, hi) and the target's (None without one)."""
    numeric = [j for j, n in enumerate(names) if not is_indicator(n)]
    cols = [raw[:, numeric]] + ([] if target is None else [np.asarray(target, float)[:, None]])
    released = released_ranges(np.hstack(cols), plan, rng)
    return domains_of(names, released, target is not None)


def domains_of(
    names: list[str], released: list[tuple[float, float]], target: bool
) -> tuple[list[tuple[float, float]], tuple[float, float] | None]:
    """Each column's (lo, hi): the released range of a numeric column (``released`` in order,
    the target's last when ``target``), the public [0, 1] of an indicator column."""
    numeric = [j for j, n in enumerate(names) if not is_indicator(n)]
    out = [(0.0, 1.0)] * len(names)
    for j, r in zip(numeric, released, strict=False):
        out[j] = r
    return out, (None if target is None else released[-1])
