"""Render report.md and PNG plots from results.jsonl alone (re-renderable without re-running)."""

from __future__ import annotations

import importlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.file_names import plot_file
from bench.floors import floors, verdicts
from bench.html_report import render_html
from bench.method_choice import settings
from bench.record_keys import (  # noqa: F401  (re-exported: the report sections read them here)
    IGNORED_CONFIG,
    epsilon_cell,
    epsilon_of,
    group_records,
    main_metric,
    majority_rate,
    metric_value,
    train_seconds,
    variant,
    varying_keys,
)
from bench.records import fmt, mean_std


def summary_table(records: list[dict[str, Any]]) -> str:
    lines = [
        "| dataset | method | variant | K | ε target | ε reported (accountant) | metric | "
        "mean ± std | train s | MB sent | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fl = floors(settings(records))
    for (ds, method, var, K, eps), rs in group_records(records).items():
        metric = main_metric(rs[0])
        m, s = mean_std([metric_value(r, metric) for r in rs])
        mark = fl[ds].mark_value(m, holder_alone=method == "local") if ds in fl else ""
        b, _ = mean_std([r["comm"]["bytes_total"] for r in rs])
        secs = [train_seconds(r) for r in rs]
        t, _ = mean_std([v for v, _ in secs])
        timed_only = any(e for _, e in secs)
        t_cell = f"{t:.3f}" + (" (extrapolated)" if timed_only else "")
        b_cell = f"{b / 1e6:.3f}" + (" (the timed minibatches)" if timed_only else "")
        rep = epsilon_cell(rs[0].get("privacy"))
        lines.append(
            f"| {ds} | {method} | {var or '—'} | {K} | {'—' if eps is None else eps} | {rep} | "
            f"{metric} | {fmt(m, s)}{' ' + mark if mark else ''} | {t_cell} | {b_cell} | "
            f"{len(rs)} |"
        )
    return "\n".join(lines)


def plot_metric_vs_epsilon(records: list[dict[str, Any]], out: Path) -> list[str]:
    """Main metric against ε per dataset and privacy unit (ε of different units never share an
    axis); non-private methods as horizontal lines; records with a voided ε are left out."""
    files = []
    keys = varying_keys(records)
    for ds in sorted({r["dataset"] for r in records}):
        rs = [r for r in records if r["dataset"] == ds]
        units = sorted({r["privacy"].get("unit", "?") for r in rs if epsilon_of(r.get("privacy"))})
        for unit in units:
            files += _plot_unit(rs, ds, unit, keys, out)
    return files


def _plot_unit(rs: list[dict[str, Any]], ds: str, unit: str, keys, out: Path) -> list[str]:
    metric = main_metric(rs[0])
    fig, ax = plt.subplots(figsize=(10, 5))
    lines: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    flat: dict[str, list[float]] = defaultdict(list)
    for r in rs:
        label = r["method"] + (f" ({variant(r, keys)})" if variant(r, keys) else "")
        val = metric_value(r, metric)
        if val is None:
            continue
        priv = r.get("privacy")
        if priv is None:
            flat[label].append(val)
        elif epsilon_of(priv) is not None and priv.get("unit") == unit:
            # the accountant's ε, so methods with other knobs (PBM's b, β) share the axis
            lines[label][epsilon_of(priv)].append(val)
    for label, pts in sorted(lines.items()):
        xs = sorted(pts)
        ms = [np.nanmean(pts[x]) for x in xs]
        ss = [np.nanstd(pts[x]) for x in xs]
        ax.errorbar(xs, ms, yerr=ss, marker="o", capsize=3, label=label)
    for i, (label, vals) in enumerate(sorted(flat.items())):
        alone = label.split(" ")[0] == "local"  # the label holder alone: a floor, named so
        ax.axhline(
            np.nanmean(vals),
            linestyle="--",
            color="saddlebrown" if alone else f"C{(i + len(lines)) % 10}",
            lw=2.0 if alone else 1.5,
            label=f"label holder alone: {label}" if alone else f"{label} (no ε)",
        )  # HE and MPC runs are private, only not in ε
    majority = majority_rate(rs)
    if metric == "accuracy" and majority is not None:
        ax.axhline(
            majority, color="k", linestyle=":", lw=1.5, label=f"majority class {majority:.3f}"
        )
    ax.set_xscale("log")
    ax.set_xlabel(f"ε reported by the method's accountant, unit '{unit}' (δ as in each record)")
    ax.set_ylabel(f"test {metric}")
    ax.set_title(f"{ds}: {metric} vs privacy budget ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    name = plot_file(ds, f"{metric}_vs_epsilon_{unit}")
    fig.tight_layout()
    fig.savefig(out / name, dpi=110, bbox_inches="tight")  # the legend outside stays in
    plt.close(fig)
    return [name]


def worth_it_section(records: list[dict[str, Any]]) -> list[str]:
    """Report.md's floors per dataset and, per ε, whether collaborating under DP pays."""
    fl = floors(settings(records))
    out = ["## Does collaborating pay?", ""]
    out += [f"- {f.lines(ds)}" for ds, f in fl.items()]
    found = verdicts(records)
    out += [""] + (
        [f"- {v}" for v in found]
        or [
            "- At every stated ε the best DP option beats "
            "the label holder alone (or it was not run)."
        ]
    )
    out += [
        "",
        "Marks: ✗ at or below the majority class (the model learnt nothing usable); ↓ below the "
        "label holder alone (collaborating lost accuracy). Only runs at a stated ε are chosen "
        "from; a DP run that asked for no ε is listed with its costs, never picked.",
        "",
    ]
    return out


def plot_bars(records: list[dict[str, Any]], out: Path, *, what: str) -> list[str]:
    """Bar chart per dataset of mean training time (``what='time'``) or bytes (``'bytes'``)."""
    files = []
    for ds in sorted({r["dataset"] for r in records}):
        by: dict[str, list[float]] = defaultdict(list)
        for r in records:
            if r["dataset"] != ds:
                continue
            label = r["method"] + (
                "/" + r["config"].get("model", "") if r["config"].get("model") else ""
            )
            v = train_seconds(r)[0] if what == "time" else r["comm"]["bytes_total"]
            by[label].append(v)
        labels = sorted(by)
        vals = [float(np.mean(by[k])) for k in labels]
        if what == "bytes" and not any(vals):
            continue
        fig, ax = plt.subplots(figsize=(7, 0.4 * len(labels) + 1.5))
        ax.barh(labels, vals, color="C0" if what == "time" else "C2")
        if what == "bytes":
            ax.set_xscale("symlog")
            ax.set_xlabel("bytes sent per run (all phases, mean over seeds)")
        else:
            if max(vals) > 50 * max(min(vals), 1e-6):
                ax.set_xscale("log")  # HE and MPC runs are orders of magnitude slower
            ax.set_xlabel("training time, s (mean over seeds and settings)")
        ax.set_title(f"{ds}: {'training time' if what == 'time' else 'communication'} per method")
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        name = plot_file(ds, f"{what}_per_method")
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def render_report(
    records: list[dict[str, Any]],
    out: Path,
    *,
    title: str = "securevfl report",
    extras: list[str] | None = None,
    errors: list[str] | None = None,
    failed: list[dict[str, Any]] | None = None,
) -> Path:
    """Write out/report.md, its PNG plots and report.html from ``records``; return report.md."""
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", ""]
    if records or not extras:  # a perf-only suite has no runs of its own: its section says all
        md += [f"{len(records)} runs, rendered from results.jsonl.", ""]
    attacks = [r for r in records if "attack" in r]  # attack records: their own section only
    everything, records = records, [r for r in records if "attack" not in r and "audit" not in r]
    if not records and attacks:
        md.append("Attack cells only: see the attack section.")
    elif not records:
        if not extras:
            md.append("No results yet.")
    else:
        md += worth_it_section(records)
        md += ["## Summary (mean ± std over seeds)", "", summary_table(records), ""]
        md += [
            "ε target is what the run was asked for; ε reported is what the method's accountant "
            "computed for the sampler and every release the code makes, in its privacy unit "
            "(`sample`: one row changes in every party's block and its label; `party-row`: one "
            "row of one party's block). Plots put ε of one unit on one axis. A record whose run "
            "released something outside its guarantee reports no ε and says what "
            "(`privacy.outside_guarantee`).",
            "",
        ]
        plots = (
            plot_metric_vs_epsilon(records, out)
            + plot_bars(records, out, what="time")
            + plot_bars(records, out, what="bytes")
        )
        if plots:
            md += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    for name in extras or []:
        mod = importlib.import_module(f"bench.reports.{name}")
        # attack records have no run config: only the sections that read them get them
        reads_attacks = name == "attacks" or getattr(mod, "READS_ATTACK_RECORDS", False)
        md += [mod.render(everything if reads_attacks else records, out), ""]
    if errors:
        md += ["## Runs that failed", ""] + [f"- {e}" for e in errors] + [""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    # report.html beside it, self-contained; ``failed``: the cells that could not run, by why
    render_html(everything, out, "\n".join(md), title, failed=failed or [])
    return path
