"""Report section ``perf``: first the perf jobs' ratios against peers (bench.reports.perf_peers,
from OUT/perf.jsonl), then where each second and byte of a job goes, for ANY record that carries
``extra["phases_s"] = {phase: seconds}`` and ``extra["phases_bytes"] = {phase: bytes}``.

Records are grouped by method, dataset, training rows, parties and the config keys that vary
within a method (e.g. ``mpc_impl``); per group and phase the table shows seconds (mean ± std
over seeds) and payload bytes, and a stacked bar plot shows the seconds by phase per group.
What a phase is belongs to the job: the secure products report the slowest party's seconds of
``input sharing``, ``local product`` and ``opening``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.record_keys import variant, varying_keys  # noqa: E402
from bench.records import fmt, mean_std  # noqa: E402
from bench.reports import perf_peers  # noqa: E402

PLOT = "perf_phases.png"


def phase_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records that carry a phase breakdown (both keys, as dicts)."""
    return [
        r
        for r in records
        if isinstance((r.get("extra") or {}).get("phases_s"), dict)
        and isinstance((r.get("extra") or {}).get("phases_bytes"), dict)
    ]


def group_label(r: dict[str, Any], keys: dict[str, list[str]]) -> str:
    var = variant(r, keys)
    base = f"{r['method']} {r['dataset']} n={r.get('n_train', '?')} K={r['parties']}"
    return f"{base} ({var})" if var else base


def phase_groups(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records with phases grouped by label, in the order of first appearance."""
    rs = phase_records(records)
    keys = varying_keys(rs)
    keys = {m: [k for k in ks if k not in ("n", "seed")] for m, ks in keys.items()}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rs, key=lambda r: (r["method"], r["dataset"], r.get("n_train", 0))):
        groups[group_label(r, keys)].append(r)
    return dict(groups)


def phase_table(groups: dict[str, list[dict[str, Any]]]) -> list[str]:
    md = [
        "| job | phase | seconds | bytes | share of time |",
        "|---|---|---|---|---|",
    ]
    for label, g in groups.items():
        phases = list(dict.fromkeys(p for r in g for p in r["extra"]["phases_s"]))
        total = sum(mean_std([r["extra"]["phases_s"].get(p) for r in g])[0] for p in phases)
        for p in phases:
            m, s = mean_std([r["extra"]["phases_s"].get(p) for r in g])
            b, _ = mean_std([r["extra"]["phases_bytes"].get(p, 0) for r in g])
            share = f"{100 * m / total:.0f}%" if total > 0 else "n/a"
            md.append(f"| {label} | {p} | {fmt(m, s, 3)} | {b:,.0f} | {share} |")
        tb = sum(mean_std([r["extra"]["phases_bytes"].get(p, 0) for r in g])[0] for p in phases)
        md.append(f"| {label} | **total** | {total:.3f} | {tb:,.0f} | 100% |")
    return md


def plot_phases(groups: dict[str, list[dict[str, Any]]], out: Path) -> str | None:
    """Stacked horizontal bars: seconds per phase (mean over seeds) per job."""
    if not groups:
        return None
    labels = list(groups)
    phases = list(
        dict.fromkeys(p for g in groups.values() for r in g for p in r["extra"]["phases_s"])
    )
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(labels) + 1.5))
    left = np.zeros(len(labels))
    for p in phases:
        vals = np.array(
            [
                np.nan_to_num(mean_std([r["extra"]["phases_s"].get(p) for r in groups[lab]])[0])
                for lab in labels
            ]
        )
        ax.barh(labels, vals, left=left, label=p)
        left += vals
    ax.set_xlabel("seconds (slowest party per phase, mean over seeds)")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / PLOT, dpi=110)
    plt.close(fig)
    return PLOT


def render(records: list[dict[str, Any]], out: Path) -> str:
    peers = perf_peers.render(records, out) + "\n\n" if perf_peers.read_perf(out) else ""
    groups = phase_groups(records)
    md = [peers + "## Performance: phase breakdown", ""]
    if not groups:
        if peers:  # only perf jobs ran here
            return peers
        return "\n".join(md + ["No record carries extra.phases_s and extra.phases_bytes."])
    md += [
        "Seconds per phase (mean ± std over seeds) and payload bytes as metered on the channel, "
        "from each record's `extra.phases_s` / `extra.phases_bytes`.",
        "",
        *phase_table(groups),
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_phases(groups, out)
    if plot:
        md += [f"![{plot}]({plot})", ""]
    return "\n".join(md)
