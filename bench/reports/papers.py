"""Report section of suite ``papers``: each seed paper's headline numbers beside ours.

The paper's figures and the records each is read against are in ``paper_figures``; this module
only finds the records and summarises them (mean ± std over seeds, with the seed count). The
detailed per-paper sections (hdp, fm, pbm, afe, czofo, attacks) follow it in the same report,
rendered by the modules their own suites use.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bench.records import mean_std, stat
from bench.reports.paper_figures import TABLES, Row
from bench.reports.pbm import TARGETS

_TOP = ("method", "dataset", "attack")
READS_ATTACK_RECORDS = True  # VFL-AFE Table 1 (membership inference) reads attack cells


def matches(record: dict[str, Any], selector: dict[str, Any]) -> bool:
    """``record`` is one the selector names: top-level fields, then config values."""
    if record.get("attack") != selector.get("attack"):
        return False
    cfg = record.get("config") or {}
    for key, want in selector.items():
        have = record.get(key) if key in _TOP else cfg.get(key)
        if key == "parties":
            have = record.get("parties")
        if isinstance(want, float) and isinstance(have, (int, float)):
            if not math.isclose(float(have), want, rel_tol=1e-9):
                return False
        elif have != want:
            return False
    return True


def _mb(r: dict[str, Any]) -> float:
    return (r.get("comm") or {}).get("bytes_total", 0) / 1e6


def _epochs_to_target(r: dict[str, Any]) -> tuple[float, float]:
    """First epoch whose train accuracy reaches the dataset's target, and the MB spent by then."""
    target = TARGETS.get(r["dataset"], 0.8)
    curve = stat(r, "epoch_accuracy", "epoch_train_accuracy") or []
    hit = next((i + 1 for i, a in enumerate(curve) if a is not None and a >= target), None)
    if hit is None:
        return math.inf, math.inf
    phases = r["comm"]["by_phase"]
    per_epoch = phases.get("train", {}).get("bytes", 0) / max(1, r["config"]["epochs"])
    return float(hit), (hit * per_epoch + phases.get("setup", {}).get("bytes", 0)) / 1e6


def _accuracy(r: dict[str, Any]) -> float | None:
    return r["metrics"].get("accuracy")


def _pct(rs: list[dict[str, Any]]) -> str:
    return _fmt([100 * a for a in map(_accuracy, rs) if a is not None], 2)


def _train_s(r: dict[str, Any]) -> float:
    """Training seconds; a run timed on a few minibatches counts its extrapolated epochs."""
    x = r.get("extra") or {}
    if x.get("extrapolated") and x.get("epoch_s_extrapolated") is not None:
        return float(x["epoch_s_extrapolated"]) * r["config"]["epochs"]
    return r["time"]["train_s"]


def _seconds(rs: list[dict[str, Any]]) -> str:
    extrapolated = any((r.get("extra") or {}).get("extrapolated") for r in rs)
    return _fmt([_train_s(r) for r in rs], 2) + (" s (extrapolated)" if extrapolated else " s")


METRICS = {
    "accuracy": lambda rs: _fmt([_accuracy(r) for r in rs], 3),
    "accuracy_pct": _pct,
    "accuracy_pct_mb": lambda rs: _pct(rs) + f", {np.mean([_mb(r) for r in rs]):.1f} MB",
    "mse": lambda rs: _fmt([r["metrics"].get("mse") for r in rs], 4),
    "train_s": _seconds,
    "epochs_to_target": lambda rs: _targets(rs),
}


def _fmt(values: list[float | None], digits: int) -> str:
    m, s = mean_std(values)
    if math.isnan(m):
        return "n/a"
    if 0 < abs(m) < 10**-digits:  # tiny values keep their significant digits
        return f"{m:.{digits - 1}e} ± {s:.1e}" if len(values) > 1 else f"{m:.{digits - 1}e}"
    return f"{m:.{digits}f} ± {s:.{digits}f}" if len(values) > 1 else f"{m:.{digits}f}"


def _targets(rs: list[dict[str, Any]]) -> str:
    pairs = [_epochs_to_target(r) for r in rs]
    hit = [(e, mb) for e, mb in pairs if math.isfinite(e)]
    never = len(pairs) - len(hit)
    if not hit:
        return f"not reached in {rs[0]['config']['epochs']} epochs"
    text = f"{np.mean([e for e, _ in hit]):.1f} epochs, {np.mean([mb for _, mb in hit]):.1f} MB"
    return text + (f" ({never} seeds never)" if never else "")


def ours(records: list[dict[str, Any]], row: Row) -> str:
    """Our figure for ``row``: its metric over the matching records, with the seed count."""
    if row.ours is None:
        return "see the section below" if "overheads" in row.setting else "not run (no data)"
    rs = [r for r in records if matches(r, row.ours)]
    if not rs:
        return "not in these results"
    return f"{METRICS[row.metric](rs)} (n = {len(rs)})"


def render(records: list[dict[str, Any]], out: Path) -> str:
    """Markdown: one table per seed-paper table, the paper's figure beside ours."""
    lines = [
        "## The seed papers beside ours (suite `papers`)",
        "",
        "Reduced re-runs of each paper's headline tables on data available offline. 'ours' is "
        "mean ± std over seeds (n = records). The paper's figures are as printed "
        "(`bench/reports/paper_figures.py` cites each source).",
    ]
    for t in TABLES:
        lines += [
            "",
            f"### {t.paper} — {t.table}",
            "",
            f"Source: {t.source}. **Where ours differs:** {t.differs}.",
            "",
            "| setting | paper | ours | our data |",
            "|---|---|---|---|",
        ]
        for row in t.rows:
            data = row.note or (row.ours or {}).get("dataset", "—")
            lines.append(f"| {row.setting} | {row.paper} | {ours(records, row)} | {data} |")
    return "\n".join(lines) + "\n"
