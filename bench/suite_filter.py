"""Shrink a suite to the cells a user asks for: ``securevfl bench --methods/--datasets/
--epsilons/--seeds`` and ``--quick``.

A filter keeps the cells whose value is in its list; ``--epsilons`` keeps the cells with no ε too
(the plain, HE and heuristic reference points a DP choice is judged against). Filtered cells keep
their ids, so a filtered run reuses (and adds to) the full suite's results.jsonl. A value that
matches no cell of the suite is refused (a typo must not silently run nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from bench.suites import Cell, Suite
from securevfl.errors import ConfigError

QUICK_EPSILONS = (1.0, 8.0)  # the two budgets a quick look compares (both in compare's grid)


@dataclass(frozen=True)
class Filters:
    """What to keep (None: everything)."""

    methods: tuple[str, ...] | None = None
    datasets: tuple[str, ...] | None = None
    epsilons: tuple[float, ...] | None = None
    seeds: tuple[int, ...] | None = None


def _items(option: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{option} must be a comma-separated list, got {text!r}")
    return items


def _number(option: str, text: str, kind: type) -> Any:
    try:
        value = kind(text)
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise ConfigError(f"--{option} must list {what}, got {text!r}") from None
    if kind is float and not (math.isfinite(value) and value > 0):
        raise ConfigError(f"--{option} must list numbers > 0, got {text!r}")
    if kind is int and value < 0:
        raise ConfigError(f"--{option} must list integers >= 0, got {text!r}")
    return value


def parse_filters(
    methods: str | None, datasets: str | None, epsilons: str | None, seeds: str | None
) -> Filters:
    """The filters of the command line's comma-separated lists (ConfigError on a bad value)."""
    eps = _items("epsilons", epsilons)
    sds = _items("seeds", seeds)
    return Filters(
        methods=tuple(m) if (m := _items("methods", methods)) else None,
        datasets=tuple(d) if (d := _items("datasets", datasets)) else None,
        epsilons=None if eps is None else tuple(_number("epsilons", e, float) for e in eps),
        seeds=None if sds is None else tuple(_number("seeds", s, int) for s in sds),
    )


def quick(suite: Suite, given: Filters) -> Filters:
    """``--quick``: what is not given explicitly shrinks to the suite's first dataset, first
    seed and ε 1 and 8 (those of its grid; else its smallest and largest ε)."""
    cells = suite.cells
    grid = sorted({c.spec.epsilon for c in cells if c.spec.epsilon is not None})
    eps = tuple(e for e in QUICK_EPSILONS if e in grid) or tuple(
        dict.fromkeys(grid[:1] + grid[-1:])
    )
    return replace(
        given,
        datasets=given.datasets or (cells[0].spec.dataset,),
        seeds=given.seeds if given.seeds is not None else (min(c.spec.seed or 0 for c in cells),),
        epsilons=given.epsilons if given.epsilons is not None else (eps or None),
    )


def _check(option: str, wanted: tuple | None, present: set, fmt=str) -> None:
    """Every asked value is in the suite (named with the values it has)."""
    missing = [w for w in wanted or () if w not in present]
    if missing:
        have = ", ".join(fmt(v) for v in sorted(present, key=str)) or "none"
        raise ConfigError(
            f"--{option} must name values of the suite ({have}), got {fmt(missing[0])!r}"
        )


def _keep(cell: Cell, f: Filters) -> bool:
    s = cell.spec
    return (
        (f.methods is None or s.method in f.methods)
        and (f.datasets is None or s.dataset in f.datasets)
        and (f.seeds is None or s.seed in f.seeds)
        and (f.epsilons is None or s.epsilon is None or s.epsilon in f.epsilons)
    )


def _joined(items: tuple[str, ...] | None, present: set) -> tuple[str, ...] | None:
    """The list's items with a ``csv:a.csv,b.csv`` dataset (split at its commas) put back
    together where the suite holds it: the longest run of items that names one of its values."""
    if items is None:
        return None
    out, i = [], 0
    while i < len(items):
        j = next((j for j in range(len(items), i, -1) if ",".join(items[i:j]) in present), i + 1)
        out.append(",".join(items[i:j]))
        i = j
    return tuple(out)


def filter_suite(suite: Suite, f: Filters) -> Suite:
    """The suite with only the cells ``f`` keeps (ConfigError if a value matches none)."""
    cells = suite.cells
    _check("methods", f.methods, {c.spec.method for c in cells})
    present = {c.spec.dataset for c in cells}
    f = replace(f, datasets=_joined(f.datasets, present))
    _check("datasets", f.datasets, present)
    _check("seeds", f.seeds, {c.spec.seed for c in cells})
    eps = {c.spec.epsilon for c in cells if c.spec.epsilon is not None}
    _check("epsilons", f.epsilons, eps, fmt=lambda v: f"{v:g}")
    kept = [c for c in cells if _keep(c, f)]
    if not kept:
        raise ConfigError(f"the filters must keep >= 1 cell of suite {suite.name}, got none")
    return replace(suite, cells=kept)
