"""Report section for the privacy audit (issue 27): per method and claimed ε, the empirical ε
lower bound beside the claim, the under-noised variants' bounds, and the audit's power.

Computed from audit records alone (``securevfl audit ... --json`` or audit cells of a suite).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

READS_ATTACK_RECORDS = True  # audit records have no run config: the report hands over all records
DIVISORS = (2.0, 4.0, 10.0)


def _fmt(x: Any) -> str:
    return "–" if x is None else f"{float(x):.2f}"


def _variant(rec: dict[str, Any], divisor: float) -> str:
    for v in rec.get("variants", []):
        if float(v["noise_divisor"]) == divisor:
            mark = " **caught**" if v["violation"] else ""
            return f"{v['epsilon_lower_bound']:.2f}{mark}"
    return "–"


def rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The audit records, newest per (dataset, method, ε, view), in a stable order."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        if "audit" in r and r.get("status") != "failed":
            latest[(r["dataset"], r["method"], r["epsilon"], r["audit"])] = r
    return [latest[k] for k in sorted(latest, key=lambda k: tuple(map(str, k)))]


def render(records: list[dict[str, Any]], out: Path) -> str:
    """The markdown section (``out`` unused: no plots)."""
    del out
    audits = rows(records)
    md = ["## Privacy audit: empirical ε lower bounds (issue 27)", ""]
    if not audits:
        return "\n".join(md + ["No audit records (suite `audit`, or `securevfl audit --json`)."])
    md += [
        "Each row: the method run as `securevfl run` runs it, then a distinguishing test "
        "between two neighbouring datasets on what the auditor sees; the bound holds at "
        "95% confidence (Clopper-Pearson on held-out trials; docs/audit.md). A bound at "
        "or below the claim is consistent with it; the noise/2, /4, /10 columns are the same "
        "audit of deliberately under-noised variants (audit only), **caught** where their "
        "bound exceeds the claim. Power: the largest bound the trial count can show (a "
        "larger violation reads as this).",
        "",
        "| dataset | method | view | claimed ε | lower bound | noise/2 | noise/4 | noise/10 "
        "| power | trials |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    views: dict[str, str] = {}
    for r in audits:
        md.append(
            f"| {r['dataset']} | {r['method']} | {r['audit']} | {_fmt(r['claimed_epsilon'])} "
            f"| {_fmt(r['epsilon_lower_bound'])} | "
            + " | ".join(_variant(r, d) for d in DIVISORS)
            + f" | {_fmt(r['largest_detectable_epsilon'])} | {r['result']['trials']} |"
        )
        views[f"{r['method']} ({r['audit']})"] = r["view"]["describe"]
    md += ["", "The auditor's view per method:", ""]
    md += [f"- **{m}**: {d}" for m, d in sorted(views.items())]
    return "\n".join(md)
