"""The report's two method tables, read from the settings and their floors: the decision table
(per dataset and ε, the most accurate option and the cheapest within one point) and the cost table
(time, CPU, bytes, peak memory per setting). One model for report.md and report.html."""

from __future__ import annotations

import math
from typing import Any

from bench.floors import floors
from bench.method_choice import (
    Setting,
    choices,
    eps_label,
    fmt_bytes,
    metric_cell,
    pick_cell,
    score_cell,
    settings,
)


def summary_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the summary table (one model for markdown and HTML)."""
    header = [
        "dataset",
        "privacy (ε asked, unit / kind)",
        "most accurate VFL option",
        "metric",
        "fastest within 1 point",
        "fewest bytes within 1 point",
        "pooled-data reference (not VFL), its privacy",
        "options",
    ]
    rows = []
    fl = floors(settings(records))
    for c in choices(records):
        best, f = c.best, fl[c.dataset]
        rows.append(
            [
                c.dataset,
                c.row,
                "— (pooled-data baselines only)" if best is None else best.tag,
                "—" if best is None else metric_cell(best, f),
                pick_cell(c.fastest, best, f),
                pick_cell(c.fewest_bytes, best, f),
                "—" if c.reference is None else reference_cell(c.reference),
                str(c.candidates),
            ]
        )
    return header, rows


def reference_cell(s: Setting) -> str:
    """A pooled-data reference named with its privacy: DP (its ε) or none, never mixed."""
    privacy = f"DP, {eps_label(s)} {s.unit}" if s.unit is not None else s.kind
    return f"{s.label} [{privacy}] ({score_cell(s)})"


def cost_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-setting cost table: time, CPU, bytes, peak memory."""
    header = [
        "dataset",
        "method",
        "kind",
        "ε asked (unit)",
        "ε reported",
        "metric",
        "train s",
        "CPU s",
        "sent",
        "peak memory, largest party",
        "seeds",
    ]
    rows = []
    ss = settings(records)
    fl = floors(ss)
    for s in ss:
        peak = s.peak_bytes
        rows.append(
            [
                s.dataset,
                s.label,
                s.kind + (", pooled data" if s.pooled else ""),
                "—" if s.unit is None else f"{eps_label(s)} ({s.unit})",
                "—" if s.unit is None else f"{s.reported_epsilon:.4g}",
                metric_cell(s, fl[s.dataset]),
                f"{s.train_s:.3g}",
                "n/a" if math.isnan(s.cpu_s) else f"{s.cpu_s:.3g}",
                fmt_bytes(s.bytes_total),
                "in-process" if math.isnan(peak) else f"{peak / 2**20:,.0f} MiB",
                str(len(s.records)),
            ]
        )
    return header, rows
