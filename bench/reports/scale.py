"""Report section for the scale suites: how time, bytes and peak memory per party grow with n, K.

Each record of a ``processes = true`` cell carries ``stats.peak_rss_bytes``: the peak resident
memory (VmHWM) of each party's own process, and ``stats.start_rss_bytes`` its size at start.
The section tabulates every (method, K, n), gives the growth ratio of each cost per 10x rows
(K fixed) and per doubling of K (n fixed), and plots each cost against n and against K on
log-log axes.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COSTS = {  # name -> (label, unit scale, unit)
    "time": ("training time", 1.0, "s"),
    "bytes": ("bytes on the wire", 1e6, "MB"),
    "peak": ("peak memory, largest party", 2**20, "MiB"),
    "run": ("peak above start, largest party", 2**20, "MiB"),
}


def costs_of(r: dict[str, Any]) -> dict[str, float | None]:
    """The costs of one record (peak: the largest party process; run: the largest growth of a
    party process from its start, imports excluded; None if not measured)."""
    stats = r.get("stats") or {}
    peaks, starts = stats.get("peak_rss_bytes") or {}, stats.get("start_rss_bytes") or {}
    grown = [peaks[k] - starts[k] for k in peaks if starts.get(k)]
    return {
        "time": r["time"]["train_s"],
        "bytes": float(r["comm"]["bytes_total"]),
        "peak": float(max(peaks.values())) if peaks else None,
        "run": float(max(grown)) if grown else None,
    }


def _grid(records: list[dict[str, Any]]) -> dict[tuple[str, int, int], list[dict[str, Any]]]:
    cells: dict[tuple[str, int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        cells[(r["method"], int(r["parties"]), int(r["n_train"] + r["n_test"]))].append(r)
    return cells


def _mean(rs: list[dict[str, Any]], cost: str) -> float | None:
    vals = [c for c in (costs_of(r)[cost] for r in rs) if c is not None]
    return float(np.mean(vals)) if vals else None


def _fmt(v: float | None, scale: float) -> str:
    return "n/a" if v is None else f"{v / scale:,.3g}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or a <= 0 else f"{b / a:.2f}x"


def table(cells: dict[tuple[str, int, int], list[dict[str, Any]]]) -> list[str]:
    md = [
        "| method | K | n | train s | MB sent | peak MiB per party (min-max) "
        "| above start MiB (largest) | runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (m, k, n), rs in sorted(cells.items()):
        peaks = [
            v for r in rs for v in ((r.get("stats") or {}).get("peak_rss_bytes") or {}).values()
        ]
        span = f"{min(peaks) / 2**20:,.0f}-{max(peaks) / 2**20:,.0f}" if peaks else "n/a"
        md.append(
            f"| {m} | {k} | {n:,} | {_fmt(_mean(rs, 'time'), 1.0)} | "
            f"{_fmt(_mean(rs, 'bytes'), 1e6)} | {span} | {_fmt(_mean(rs, 'run'), 2**20)} "
            f"| {len(rs)} |"
        )
    return md


def growth(cells: dict[tuple[str, int, int], list[dict[str, Any]]]) -> list[str]:
    """Ratio of each cost per 10x rows (same K) and per 2x parties (same n)."""
    md = [
        "| method | step | time | bytes | peak memory | peak above start |",
        "|---|---|---|---|---|---|",
    ]
    keys = sorted(cells)
    for m, k, n in keys:
        for other, step in (
            ((m, k, n * 10), f"K={k}: n {n:,} -> {n * 10:,}"),
            ((m, k * 2, n), f"n={n:,}: K {k} -> {k * 2}"),
        ):
            if other in cells:
                a, b = cells[(m, k, n)], cells[other]
                md.append(
                    f"| {m} | {step} | "
                    + " | ".join(_ratio(_mean(a, c), _mean(b, c)) for c in COSTS)
                    + " |"
                )
    return md if len(md) > 2 else ["No pair of cells 10x apart in n or 2x apart in K yet."]


def _party_growth(r: dict[str, Any]) -> dict[int, float]:
    """Each party process's peak above its start (bytes), by party index."""
    stats = r.get("stats") or {}
    peaks, starts = stats.get("peak_rss_bytes") or {}, stats.get("start_rss_bytes") or {}
    return {int(k): float(peaks[k] - starts[k]) for k in peaks if starts.get(k)}


def shares(
    cells: dict[tuple[str, int, int], list[dict[str, Any]]], min_n: int = 100_000
) -> list[str]:
    """Per (method, K, n >= min_n): the data party whose process grew most, against its own
    columns and against the whole table (float64): a party that holds only its share grows
    with the share, and its growth / table falls as K rises. A pooled method (centralized,
    dpsgd-c, fm-central) holds the whole table at one party by design: its columns are the
    table. At small n the growth is mostly the runtime's own (torch, MPyC), not data."""
    md = [
        "| method | K | n | data party | its growth MiB | its columns MiB | whole table MiB "
        "| growth / its columns | growth / table |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (m, k, n), rs in sorted(cells.items()):
        r = rs[0]
        fpp = r.get("features_per_party") or []
        grown = {p: g for p, g in _party_growth(r).items() if p < len(fpp) and fpp[p]}
        if n < min_n or not grown:
            continue
        p = max(grown, key=grown.get)
        table = 8.0 * n * sum(fpp)
        pooled = (r.get("capabilities") or {}).get("data") == "pooled"
        own = table if pooled else 8.0 * n * fpp[p]  # a pooled method's party holds the table
        md.append(
            f"| {m} | {k} | {n:,} | {p} | {grown[p] / 2**20:,.0f} | {own / 2**20:,.0f} | "
            f"{table / 2**20:,.0f} | {grown[p] / own:.2f} | {grown[p] / table:.2f} |"
        )
    return md if len(md) > 2 else [f"No per-party growth recorded at n >= {min_n:,} yet."]


def plots(cells: dict[tuple[str, int, int], list[dict[str, Any]]], out: Path) -> list[str]:
    files = []
    methods = sorted({m for m, _, _ in cells})
    for axis in ("n", "K"):
        fig, axes = plt.subplots(1, len(COSTS), figsize=(4.2 * len(COSTS), 3.6))
        for ax, (cost, (label, scale, unit)) in zip(axes, COSTS.items()):
            for m in methods:
                fixed = 2 if axis == "n" else min(n for mm, _, n in cells if mm == m)
                pts = sorted(
                    ((n if axis == "n" else k), _mean(rs, cost))
                    for (mm, k, n), rs in cells.items()
                    if mm == m and (k if axis == "n" else n) == fixed
                )
                pts = [(x, y / scale) for x, y in pts if y is not None]
                if len(pts) >= 2:
                    ax.plot(*zip(*pts), marker="o", label=m)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("rows n (K = 2)" if axis == "n" else "data parties K (smallest n)")
            ax.set_ylabel(f"{label} ({unit})")
            ax.grid(alpha=0.3, which="both")
        if axes[0].get_legend_handles_labels()[0]:  # no line where a sweep has one point
            axes[0].legend(fontsize=7)
        fig.tight_layout()
        name = f"scale_by_{axis}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def render(records: list[dict[str, Any]], out: Path) -> str:
    cells = _grid([r for r in records if r.get("runtime") == "processes"])
    if not cells:
        return "## Scale\n\nNo runs with one process per party yet."
    md = ["## Scale: cost growth with rows n and parties K", ""]
    md += [
        "Peak memory is the high-water mark (VmHWM) of each party's own OS process at the end "
        "of the run (its imports included; records before this measure used ru_maxrss, which "
        "Linux carries over from the launcher); 'peak above start' subtracts the process's "
        "resident memory when the run started (records that carry it), so it shows what the "
        "data and the protocol took; time is the training time, bytes every party's sent total.",
        "",
    ]
    md += table(cells) + ["", "### Growth ratios", ""] + growth(cells) + [""]
    md += ["### Peak memory per party against its share of the data", ""] + shares(cells)
    md += [
        "",
        "Growth is the party process's peak above its size at start; columns are float64. At "
        "100k rows most of the growth is the runtime's own (about 100 MiB for torch methods), so "
        "the 1M-row rows are the test: growth / its columns near 1-2 and growth / table below "
        "1 mean the party holds its own columns, not the table (pooled methods hold the table "
        "by design).",
        "",
    ]
    md += [f"![{f}]({f})" for f in plots(cells, out)]
    return "\n".join(md)
