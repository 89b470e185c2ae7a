"""Report section "Performance against peers": the ratio table of the perf jobs (bench.perf) read
from OUT/perf.jsonl, both sides' commands and versions, the machine, and a bar plot of each
ratio against its goal. The ``perf`` extra shows it first; as an extra of its own it needs no
run records (the jobs are not runs of a method)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from bench.perf import read_perf  # noqa: E402

PLOT = "perf_ratios.png"
TICKS = [m * 10**e for e in range(-3, 5) for m in (1, 2, 5)] + [3]
HEADER = (
    "| job | goal | ours median s | peer median s | ratio (peer / ours) | met | "
    "peak MB ours / peer | bytes ours / peer | runs ok ours / peer |"
)


def _num(v: Any, spec: str = ".3f") -> str:
    return "—" if v is None else format(v, spec)


def _int(v: Any) -> str:
    return "—" if v is None else f"{v:,}"


def _met(rec: dict[str, Any]) -> str:
    if rec.get("goal") is None:
        return "informational"
    if rec.get("met") is None and rec["ours"].get("exact") is False:
        return "not judged (our output was not exact)"
    if rec.get("met") is None:
        return "not judged (a run failed)"
    return "yes" if rec["met"] else "**no**"


def ratio_table(recs: list[dict[str, Any]]) -> list[str]:
    md = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for r in recs:
        o, t = r["ours"], r["theirs"]
        goal = "—" if r.get("goal") is None else f"≥ {r['goal']:g}×"
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.2f}×"
        md.append(
            f"| {r['job']} | {goal} | {_num(o['median_s'])} | {_num(t['median_s'])} | {ratio} | "
            f"{_met(r)} | {_num(o['peak_mb'], '.0f')} / {_num(t['peak_mb'], '.0f')} | "
            f"{_int(o['bytes'])} / {_int(t['bytes'])} | {o['ok']} of {o['runs']} / "
            f"{t['ok']} of {t['runs']} |"
        )
    return md


def _run(run: dict[str, Any]) -> str:
    load = f"load {run['load_before'][0]:.2f}→{run['load_after'][0]:.2f}"
    what = f"failed: {run['failed']}" if "failed" in run else f"{run['seconds']:.3f} s"
    return f"{what} ({load})"


def _rounds(r: dict[str, Any]) -> list[str]:
    """One line per round, in the order run (ours first in each round)."""
    pairs = zip(r["ours"]["per_run"], r["theirs"]["per_run"], strict=False)
    return [
        f"- round {i}: ours {_run(o)}, then peer {_run(t)}" for i, (o, t) in enumerate(pairs, 1)
    ]


def job_details(r: dict[str, Any]) -> list[str]:
    """Per job: what it measures, both commands as run, versions, each round with its load
    average (1 minute) before and after each run."""
    o, t = r["ours"], r["theirs"]
    md = [
        f"**{r['job']}**: {r['title']} (declared in `{Path(r['source']).name}`, run from "
        f"{r['started']})",
        "",
        f"- ours: `{r['commands']['ours']}`; {o.get('version') or 'no version reported'}; "
        f"output exact: {o.get('exact')}",
        f"- peer `{r['peer']}`: `{r['commands']['theirs']}`; {t.get('version') or 'no version'}"
        f" ({r['peer_env']['version']}, {r['peer_env']['how']}); output exact: {t.get('exact')}",
        *_rounds(r),
    ]
    for name, side in (("ours", o), ("peer", t)):
        for run in side["per_run"]:
            tail = (run.get("stderr_tail") or "").strip().splitlines()
            if "failed" in run and tail:
                md.append(f"- a failed {name} run's last stderr line: `{tail[-1][:300]}`")
    return md + [""]


def plot_ratios(recs: list[dict[str, Any]], out: Path) -> str | None:
    """Bars: each job's ratio (log scale), its goal as a black tick, parity as a dotted line."""
    shown = [r for r in recs if r.get("ratio")]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(shown) + 1.6))
    labels = [r["job"] for r in shown]
    colours = ["grey" if r.get("met") is None else ("C2" if r["met"] else "C3") for r in shown]
    ratios = [r["ratio"] for r in shown]
    # bars start at parity (1): right of it ours is faster, left of it the peer is
    ax.barh(labels, [x - 1 for x in ratios], left=1, color=colours)
    for i, r in enumerate(shown):
        if r.get("goal") is not None:
            ax.plot([r["goal"]] * 2, [i - 0.4, i + 0.4], color="k", lw=2.5)
    ax.axvline(1.0, color="k", ls=":", lw=1)
    ax.set_xscale("log")
    ends = ratios + [r["goal"] for r in shown if r.get("goal") is not None] + [1.0]
    low, high = min(ends) / 1.5, max(ends) * 1.5
    ax.set_xlim(low, high)
    ax.set_xticks([t for t in TICKS if low <= t <= high])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
    ax.set_xlabel("peer median s / our median s (> 1: ours faster); black tick: the goal")
    ax.set_title("Performance against peers (green: goal met, red: not met, grey: not judged)")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / PLOT, dpi=110)
    plt.close(fig)
    return PLOT


def render(records: list[dict[str, Any]], out: Path) -> str:
    recs = read_perf(out)
    md = ["## Performance against peers", ""]
    if not recs:
        return "\n".join(md + ["No perf job has run here (OUT/perf.jsonl is absent or empty)."])
    md += [
        "Each job ran our command and the peer's alternately (ours, peer, ours, peer, …), each in "
        "a fresh process; seconds are what each command reports for the same timed quantity, "
        "median over its successful runs. Ratio = peer median / our median; a goal is judged "
        "only when every run of both sides succeeded.",
        "",
        *ratio_table(recs),
        "",
    ]
    plot = plot_ratios(recs, out)
    if plot:
        md += [f"![{plot}]({plot})", ""]
    machines = {
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, Python {m['python']}, "
        f"{m['platform']}": r["job"]
        for r in recs
        for m in [r["machine"]]
    }
    md += [f"Machine: {'; '.join(machines)}.", ""]
    for r in recs:
        md += job_details(r)
    return "\n".join(md)
