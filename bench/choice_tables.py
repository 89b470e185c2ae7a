"""The report's two method tables, read from the settings and their floors: the decision table
(per dataset and ε, the most accurate option and the cheapest within one point) and the cost table
(time, CPU, bytes, peak memory per setting). One model for report.md and report.html."""

from __future__ import annotations

import math
from typing import Any

from bench.floors import Floors, floors
from bench.method_choice import Setting, choices, eps_label, fmt_bytes, score_cell, settings
from bench.records import stat


def metric_cell(s: Setting, fl: Floors | None = None) -> str:
    """'accuracy 0.63 ± 0.00', marked below a floor (``fl``) and flagged when runs warned
    (e.g. a constant predictor)."""
    warned = [w for r in s.records for w in (stat(r, "warnings") or [])[:1]]
    mark = fl.marks(s) if fl is not None else ""
    cell = f"{s.metric} {score_cell(s)}" + (f" {mark}" if mark else "")
    if not warned:
        return cell
    return f"{cell} ⚠ {len(warned)}/{len(s.records)} runs: {warned[0].split('(')[0].strip()}"


def cost_cell(s: Setting) -> str:
    return f"{s.train_s:.3g} s, {fmt_bytes(s.bytes_total)}"


def pick_cell(s: Setting | None, best: Setting | None, fl: Floors | None = None) -> str:
    """A chosen setting with its score and costs ('same' when it is the most accurate one)."""
    if s is None:
        return "—"
    name = "the same" if s is best else s.label
    mark = fl.marks(s) if fl is not None and s is not best else ""
    return f"{name} ({score_cell(s)}; {cost_cell(s)})" + (f" {mark}" if mark else "")


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
