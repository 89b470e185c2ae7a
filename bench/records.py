"""Reading result records: typed statistics, capabilities, and mean ± std over seeds.

Reports read these names instead of a method's ``extra`` keys and select records by what a
method is (its capabilities), so a new method appears in them without a report edit. Records
written before ``stats``/``capabilities`` existed are read through the fallbacks here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def mean_std(values: list[float | None]) -> tuple[float, float]:
    """Mean and standard deviation over the values that are there (NaN, NaN when none)."""
    arr = np.array([v for v in values if v is not None], dtype=float)
    if arr.size == 0:  # a NaN value stays visible: the mean is NaN, the cell says n/a
        return math.nan, math.nan
    return float(np.mean(arr)), float(np.std(arr))


def fmt(m: float, s: float, digits: int = 4) -> str:
    """'m ± s' to ``digits`` places; 'n/a' where there was nothing to average."""
    if math.isnan(m):
        return "n/a"
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def fmt_mean_std(values: list[float | None], digits: int = 4) -> str:
    """``fmt(*mean_std(values))``: the table cell of a metric over seeds."""
    return fmt(*mean_std(values), digits=digits)


def stat(record: dict[str, Any], name: str, *legacy: str) -> Any:
    """The run statistic ``name`` (``record['stats']``), else the first legacy ``extra`` key."""
    stats = record.get("stats") or {}
    if name in stats:
        return stats[name]
    extra = record.get("extra") or {}
    return next((extra[k] for k in legacy if k in extra), None)


def per_epoch_mean(record: dict[str, Any], name: str, *legacy: str) -> float | None:
    """Mean over epochs of a per-epoch statistic (legacy keys may hold the mean already)."""
    value = stat(record, name, *legacy)
    if value is None:
        return None
    if isinstance(value, list):
        return float(np.mean(value)) if value else None
    return float(value)


def capabilities(record: dict[str, Any]) -> dict[str, Any]:
    """What the record's method is: the record's own ``capabilities``, else the registry's."""
    if record.get("capabilities"):
        return record["capabilities"]
    from bench.plugins import load_plugins
    from securevfl.registry import lookup

    load_plugins()
    try:
        method = lookup("method", record["method"])
    except KeyError:  # a method no longer registered: nothing is known about it
        return {}
    return method.capabilities(record.get("config", {}).get("model"))


def select(records: list[dict[str, Any]], **want: Any) -> list[dict[str, Any]]:
    """Records whose capabilities match every ``key=value`` (e.g. ``architecture="split-nn"``)."""
    out = []
    for r in records:
        caps = capabilities(r)
        if all(caps.get(k) == v for k, v in want.items()):
            out.append(r)
    return out
