"""Report section for predict cells (``predict_rows``): scoring throughput and bytes per row.

Each record is a training run saved with ``--save`` and reloaded; ``predict`` holds the scoring
of ``rows`` rows in one process (preparation included): rows per second, the bytes each party
sends per scored row (metered, framing included) and, for a noisy scoring path, the ε of the
one release each scored row gets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _name(r: dict[str, Any]) -> str:
    cfg = r.get("config") or {}
    model = cfg.get("model")
    eps = cfg.get("epsilon")
    out = r["method"] + (f" ({model})" if model and model != "glm" else "")
    return out + (f", ε = {eps:g}" if eps is not None else "")


def table(records: list[dict[str, Any]]) -> list[str]:
    """One markdown row per predict record."""
    lines = [
        "| method | rows scored | rows/s | CPU s | bytes sent per scored row, by party | "
        "ε per scored row | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        p = r["predict"]
        sent = ", ".join(f"{k}: {v:.1f}" for k, v in p["sent_per_row"].items() if v) or "0"
        eps = p.get("scored_rows_epsilon")
        lines.append(
            f"| {_name(r)} | {p['rows']:,} | {p['rows_per_s']:,.0f} | {p['cpu_s']:.3f} | {sent} "
            f"| {'none (plain messages)' if eps is None else f'{eps:.4g}'} "
            f"| {p['load_avg']:.1f} |"
        )
    return lines


def render(records: list[dict[str, Any]], out: Path) -> str:
    rows = [r for r in records if isinstance(r.get("predict"), dict)]
    md = ["## Scoring with saved models (predict)", ""]
    if not rows:
        return "\n".join(md + ["No predict records (cells with `predict_rows`).", ""])
    md += [
        "Each method trained, saved with `--save`, reloaded with `securevfl.load_model` and "
        "used to score the rows in one process (each party prepares its block and sends its "
        "message to the label holder, metered). A noisy scoring path (ldp-vfl, afe-vfl, "
        "vafl-dp) releases each "
        "scored row once more: its ε per scored row is the accountant's for that one release.",
        "",
    ]
    return "\n".join(md + table(rows) + [""])
