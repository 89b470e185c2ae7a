"""Report section for the per-row-release DP methods (issue 25): each beside its proven ceiling,
the perfect-bottom oracle and the floors it must beat.

afe-vfl, ldp-vfl, pbm-vfl and vafl-dp release something about every row. Three references
tell the price of privacy from a weak build:

* the **ceiling** (``privacy.ceiling``, in each record's ``extra.accuracy_ceiling``): no
  classifier of a test row's releases can be more accurate, whatever the bottoms — a proof, for
  a label holder without columns of its own;
* the **perfect-bottom oracle** (``bench.afe_oracle``): perfect bottoms handed out for free,
  under the test release's noise — what a better-trained bottom could still buy (an empirical
  reference on its own 80/20 split, not a proof);
* the **floors**: the majority class, and the label holder alone (``local`` with the same
  number of parties) where it holds columns (``--active-features``).

Computed from the records alone, plus the oracle's logistic-regression fits (seconds).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.afe_oracle import perfect_bottom_accuracy
from bench.file_names import name_part
from bench.records import mean_std
from securevfl.errors import UnknownNameError

METHODS = ("afe-vfl", "ldp-vfl", "pbm-vfl", "vafl-dp")


def setting_of(r: dict[str, Any]) -> str:
    """'K passive' (the seeds' setting: a label holder without columns) or 'active + K-1
    passive' (``--active-features``: the label holder is data party 0)."""
    active = str(r["config"].get("active_features", False)).lower() in ("true", "1", "yes")
    return f"active + {r['parties'] - 1} passive" if active else f"{r['parties']} passive"


def _collect(records: list[dict[str, Any]]):
    runs: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    alone: dict[tuple, list[float]] = defaultdict(list)
    majority: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.get("majority_class_rate") is not None:
            majority[r["dataset"]].append(r["majority_class_rate"])
        eps = (r.get("privacy") or {}).get("epsilon")
        if r["method"] in METHODS and eps is not None and "accuracy" in r["metrics"]:
            setting = setting_of(r)
            if (r.get("privacy") or {}).get("release_schedule") != "release-once":
                setting += ", split schedule"  # the seed's schedule: never pooled with the default
            runs[(r["dataset"], setting, r["method"], r["config"].get("epsilon"))].append(r)
        elif r["method"] == "local" and "accuracy" in r["metrics"]:
            alone[(r["dataset"], r["parties"])].append(r["metrics"]["accuracy"])
    return runs, alone, majority


def _oracles(runs) -> dict[tuple, dict[float, float]]:
    """{(dataset, setting): {ε: oracle accuracy}} at the records' ε and row count."""
    out: dict[tuple, dict[float, float]] = {}
    for ds, setting in sorted({k[:2] for k in runs}):
        rs = [r for k, v in runs.items() if k[:2] == (ds, setting) for r in v]
        eps = sorted({float(k[3]) for k in runs if k[:2] == (ds, setting) and k[3] is not None})
        try:
            got = perfect_bottom_accuracy(
                ds,
                rs[0]["parties"],
                active_features=setting.startswith("active"),
                epsilons=eps,
                draws=3,
                n=rs[0]["n_train"] + rs[0]["n_test"],
            )
        except (ValueError, UnknownNameError):  # not a binary task, or not a catalogue dataset
            continue
        out[(ds, setting)] = {e: m / 100 for e, (m, _) in got["by_epsilon"].items()}
    return out


def _fmt(values: list[float]) -> str:
    m, s = mean_std(values)
    return "—" if math.isnan(m) else f"{m:.3f} ± {s:.3f}"


def _floor(ds: str, setting: str, parties: int, alone, majority) -> tuple[str, float]:
    """The floor a setting must beat: the label holder alone where it holds columns."""
    if setting.startswith("active") and alone.get((ds, parties)):
        return "label holder alone", float(np.mean(alone[(ds, parties)]))
    return "majority class", float(np.mean(majority[ds])) if majority.get(ds) else math.nan


def _table(runs, alone, majority, oracle) -> list[str]:
    lines = [
        "| dataset | setting | method | target ε | accuracy | AUC | ceiling | "
        "perfect-bottom oracle | floor | vs floor | seeds | s per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (ds, setting, method, eps), rs in sorted(runs.items(), key=lambda kv: str(kv[0])):
        acc = [r["metrics"]["accuracy"] for r in rs]
        auc = [r["metrics"]["auc"] for r in rs if r["metrics"].get("auc") is not None]
        ceil = [r["extra"]["accuracy_ceiling"] for r in rs if r["extra"].get("accuracy_ceiling")]
        orc = oracle.get((ds, setting), {}).get(float(eps)) if eps is not None else None
        name, floor = _floor(ds, setting, rs[0]["parties"], alone, majority)
        gap = float(np.mean(acc)) - floor
        mark = "" if math.isnan(gap) else (f"{gap:+.3f}" + (" ✗" if gap < -0.01 else ""))
        secs = float(np.mean([r["time"]["train_s"] for r in rs]))
        lines.append(
            f"| {ds} | {setting} | {method} | {eps:g} | {_fmt(acc)} | {_fmt(auc)} | "
            f"{_fmt(ceil)} | {'—' if orc is None else f'{orc:.3f}'} | {name} {floor:.3f} | "
            f"{mark} | {len(rs)} | {secs:.1f} |"
        )
    return lines


def _plot(runs, alone, majority, oracle, out: Path) -> list[str]:
    files = []
    for ds, setting in sorted({k[:2] for k in runs}):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ceil: dict[float, list[float]] = defaultdict(list)
        parties = 2
        for i, method in enumerate(METHODS):
            pts = {
                float(k[3]): v
                for k, v in runs.items()
                if k[:3] == (ds, setting, method) and k[3] is not None
            }
            if not pts:
                continue
            xs = sorted(pts)
            for x in xs:
                parties = pts[x][0]["parties"]
                ceil[x] += [
                    r["extra"]["accuracy_ceiling"]
                    for r in pts[x]
                    if r["extra"].get("accuracy_ceiling")
                ]
            ms = [np.mean([r["metrics"]["accuracy"] for r in pts[x]]) for x in xs]
            ss = [np.std([r["metrics"]["accuracy"] for r in pts[x]]) for x in xs]
            ax.errorbar(xs, ms, yerr=ss, marker="o", capsize=3, color=f"C{i}", label=method)
        cx = sorted(x for x in ceil if ceil[x])
        if cx:
            ax.plot(cx, [np.mean(ceil[x]) for x in cx], "k--", lw=1.5, label="ceiling (proof)")
        ox = sorted(oracle.get((ds, setting), {}))
        if ox:
            ax.plot(
                ox,
                [oracle[(ds, setting)][x] for x in ox],
                color="grey",
                ls="-.",
                lw=1.5,
                label="perfect-bottom oracle",
            )
        name, floor = _floor(ds, setting, parties, alone, majority)
        if not math.isnan(floor):
            ax.axhline(floor, color="saddlebrown", ls=":", lw=2, label=f"{name} {floor:.3f}")
        ax.set_xscale("log")
        ax.set_xlabel("target ε (δ = 1e-5), unit party-row")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{ds}, {setting}: per-row-release methods")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        shown = setting.replace(",", "").replace(" ", "_").replace("+", "p")
        fname = f"per_row_{name_part(ds)}_{shown}.png"
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110, bbox_inches="tight")
        plt.close(fig)
        files.append(fname)
    return files


def render(records: list[dict[str, Any]], out: Path) -> str:
    runs, alone, majority = _collect(records)
    if not runs:
        return ""
    oracle = _oracles(runs)
    md = [
        "## Per-row-release methods beside their ceiling, the oracle and the floor",
        "",
        "Accuracy (mean ± std over seeds) of afe-vfl, ldp-vfl, pbm-vfl and vafl-dp at each "
        "target ε. **Ceiling**: no classifier of a test row's releases can do better, however "
        "good the bottoms (`privacy/ceiling.py`, a proof for a label holder without columns). "
        "**Perfect-bottom oracle**: perfect bottoms given away under the test release's noise, "
        "fitted by logistic regression (`bench/afe_oracle.py`, an empirical reference on its "
        "own split). **Floor**: the majority class, or the label holder alone (`local`, same "
        "K) when it holds columns; ✗ marks a mean more than 1 point below it.",
        "",
        *_table(runs, alone, majority, oracle),
        "",
    ]
    md += [f"![{p}]({p})" for p in _plot(runs, alone, majority, oracle, out)]
    return "\n".join(md)
