"""Report section for VFL-AFE (issue 13): Table 2 ablation, accuracy vs ε, Table 3 overheads.

Computed from the records alone: test accuracy, the accountant's ε (unit party-row) in
``privacy`` (with DP bottom updates, the default, the larger of a training row's ε — its own
embedding, statistics and bottom-update releases, composed — and a test row's one scoring
release; with ``--bottom exact`` every release of a party's rows), and the per-step milliseconds
the hooks measured in ``stats.step_ms`` (one run: the
base step, noise, rescaling R with its KL term, distribution adjusting D with FCM).
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
from bench.records import capabilities, mean_std, stat
from securevfl.errors import UnknownNameError

VARIANTS = ("vanilla", "r", "d", "full")
LABEL = {"vanilla": "vanilla", "r": "vanilla+R", "d": "vanilla+D", "full": "VFL-AFE (R+D)"}
PAPER_T2 = {"adult": (77.16, 79.02, 77.70, 79.31)}  # the paper's UCI column
# the non-private reference: a federated split-NN with no server and no guarantee (vfl --model mlp)
_PLAIN_SPLITNN = {"guarantees": [], "architecture": "split-nn", "federated": True, "server": False}
PAPER_T3 = {"vfl": 349.89, "noise": 60.43, "R": 279.76, "D": 82.04}  # ms, 5000 CIFAR samples


def _setting(r: dict[str, Any]) -> str:
    """The study setting of a record: the paper's (labels at a featureless active party) or an
    active party holding features (party 0) beside K-1 passive parties."""
    active = str(r["config"].get("active_features", False)).lower() in ("true", "1", "yes")
    if active:
        return f"active + {r['parties'] - 1} passive"
    return f"{r['parties']} passive"


def _collect(records: list[dict[str, Any]]):
    afe: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    plain: dict[tuple, list[float]] = defaultdict(list)
    alone: dict[tuple, list[float]] = defaultdict(list)
    extra: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("majority_class_rate") is not None:  # the floor every plot draws
            alone[(r["dataset"], "majority")].append(r["majority_class_rate"])
        if r["method"] == "afe-vfl":
            if (r.get("privacy") or {}).get("release_schedule") == "release-once":
                continue  # the default schedule: the per-row section compares it (per_row.py)
            c = r["config"]
            if int(c.get("kl_every", 4)) != 4:  # schedule study: overheads table only
                extra[(r["dataset"], c["batch_size"], c.get("variant"), c["kl_every"])].append(r)
                continue
            if c.get("bottom", "dp") != "dp":  # the ablation compares DP-bottom runs only
                continue
            afe[(r["dataset"], _setting(r), c.get("epsilon"), c.get("variant", "full"))].append(r)
        elif r["method"] == "local":
            alone[(r["dataset"], r["parties"])].append(r["metrics"]["accuracy"])
        elif capabilities(r).get("data") == "pooled":  # pooled-data references, by privacy:
            eps = (r.get("privacy") or {}).get("epsilon")  # DP and non-DP never mixed, nor ε
            key = (r["dataset"], "pooled, no DP")
            if eps is not None:  # on this party-row axis only a party-row ε may stand
                unit = (r.get("privacy") or {}).get("unit")
                key = (r["dataset"], f"pooled, DP {unit}", r["config"].get("epsilon"), r["method"])
            alone[key].append(r["metrics"]["accuracy"])
        elif _PLAIN_SPLITNN.items() <= capabilities(r).items():
            plain[(r["dataset"], r["parties"])].append(r["metrics"]["accuracy"])
    return afe, plain, alone, extra


def _oracles(afe) -> dict[tuple, dict[float, tuple[float, float]]]:
    """The perfect-bottom oracle (``bench.afe_oracle``) per binary dataset and setting, at the
    ε of the records: {(dataset, setting): {ε: (accuracy %, its reference %)}}, the reference
    being the oracle's own label holder alone (LR on its columns) or the majority class."""
    out: dict[tuple, dict[float, tuple[float, float]]] = {}
    for ds, setting in sorted({k[:2] for k in afe}):
        rs = [r for k, v in afe.items() if k[:2] == (ds, setting) for r in v]
        eps = sorted({float(k[2]) for k in afe if k[:2] == (ds, setting)})
        try:
            got = perfect_bottom_accuracy(
                ds, rs[0]["parties"], active_features=setting.startswith("active"), epsilons=eps
            )
        except (ValueError, UnknownNameError):  # not a binary task, or not a catalogue dataset
            continue
        ref = got["holder_alone"] if setting.startswith("active") else got["majority"]
        out[(ds, setting)] = {e: (m, ref) for e, (m, _) in got["by_epsilon"].items()}
    return out


def _pct(values: list[float]) -> str:
    m, s = mean_std([100 * v for v in values])
    return "—" if math.isnan(m) else f"{m:.2f} ± {s:.2f}"


def _num(x: tuple[float, float] | None) -> str:
    return "—" if x is None else f"{x[0]:.2f} (without passive: {x[1]:.2f})"


def _ablation(afe, plain, alone, oracle) -> list[str]:
    lines = [
        "| dataset | setting | target ε | achieved ε (max) | "
        + " | ".join(LABEL[v] for v in VARIANTS)
        + " | full − vanilla | ceiling | perfect-bottom oracle | active party alone "
        "| non-private split-NN | seeds |",
        "|---|---|---|---|" + "---|" * len(VARIANTS) + "---|---|---|---|---|---|",
    ]
    for ds, setting, eps in sorted({k[:3] for k in afe}):
        cells, accs, achieved, ceil, seeds = [], {}, [], [], 0
        for v in VARIANTS:
            rs = afe.get((ds, setting, eps, v), [])
            accs[v] = mean_std([100 * r["metrics"]["accuracy"] for r in rs])[0]
            achieved += [r["privacy"]["epsilon"] for r in rs if r.get("privacy")]
            ceil += [
                r["extra"]["accuracy_ceiling"] for r in rs if r["extra"].get("accuracy_ceiling")
            ]
            seeds = max(seeds, len(rs))
            cells.append(_pct([r["metrics"]["accuracy"] for r in rs]))
        parties = next(r["parties"] for v in VARIANTS for r in afe.get((ds, setting, eps, v), []))
        active = setting.startswith("active")
        lines.append(
            f"| {ds} | {setting} | {eps:g} | {max(achieved, default=math.nan):.4g} | "
            + " | ".join(cells)
            + f" | {accs['full'] - accs['vanilla']:+.2f} | {_pct(ceil)} | "
            + f"{_num(oracle.get((ds, setting), {}).get(float(eps)))} | "
            + f"{_pct(alone.get((ds, parties), [])) if active else '—'} | "
            + f"{_pct(plain.get((ds, parties), []))} | {seeds} |"
        )
    for ds, row in PAPER_T2.items():
        lines.append(
            f"| paper ({ds}, UCI) | — | — | — | "
            + " | ".join(f"{x:.2f}" for x in row)
            + f" | {row[3] - row[0]:+.2f} | — | — | — | — | — |"
        )
    return lines


def _overheads(afe, extra) -> list[str]:
    lines = [
        "| dataset | batch | variant | step ms | VFL | +noise | +R | +D | R % of step | "
        "D % of step | step − vanilla's step | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows: dict[tuple, list[dict[str, float]]] = defaultdict(list)
    for (ds, _, _, v), rs in afe.items():
        for r in rs:
            if stat(r, "step_ms", "step_ms"):
                rows[(ds, r["config"]["batch_size"], v)].append(stat(r, "step_ms", "step_ms"))
    for (ds, b, v, every), rs in extra.items():
        for r in rs:
            rows[(ds, b, f"{v}|{every}")].append(stat(r, "step_ms", "step_ms"))
    med = {
        key: {k: float(np.median([x[k] for x in ms])) for k in ("total", "vfl", "noise", "R", "D")}
        for key, ms in rows.items()
    }
    order = {v: i for i, v in enumerate(VARIANTS)}

    def rank(kv):
        ds, b, v = kv[0]
        return (ds, b, order.get(v.split("|")[0], 9), v)

    for (ds, b, v), m in sorted(med.items(), key=rank):
        base = med.get((ds, b, "vanilla"), {}).get("total", math.nan)
        name = LABEL[v] if v in LABEL else f"{LABEL[v.split('|')[0]]}, KL every {v.split('|')[1]}"
        lines.append(
            f"| {ds} | {b} | {name} | {m['total']:.2f} | {m['vfl']:.2f} | {m['noise']:.2f} "
            f"| {m['R']:.2f} | {m['D']:.2f} | {100 * m['R'] / m['total']:.1f}% "
            f"| {100 * m['D'] / m['total']:.1f}% | {m['total'] - base:+.2f} | "
            f"{len(rows[(ds, b, v)])} |"
        )
    tot = sum(PAPER_T3.values())
    lines.append(
        f"| paper (CIFAR-10, 5000 samples) | — | full | {tot:.2f} | {PAPER_T3['vfl']:.2f} | "
        f"{PAPER_T3['noise']:.2f} | {PAPER_T3['R']:.2f} | {PAPER_T3['D']:.2f} | "
        f"{100 * PAPER_T3['R'] / tot:.1f}% | {100 * PAPER_T3['D'] / tot:.1f}% | — | — |"
    )
    return lines


def _plot(afe, plain, alone, oracle, out: Path) -> list[str]:
    md = []
    for ds, setting in sorted({k[:2] for k in afe}):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for v in VARIANTS:
            pts = sorted(
                (eps, mean_std([r["metrics"]["accuracy"] for r in rs])[0])
                for (d, st, eps, vv), rs in afe.items()
                if (d, st) == (ds, setting) and vv == v
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=LABEL[v])
        ceil = sorted(
            (eps, float(np.mean([r["extra"]["accuracy_ceiling"] for r in rs])))
            for (d, st, eps, _), rs in afe.items()
            if (d, st) == (ds, setting) and all(r["extra"].get("accuracy_ceiling") for r in rs)
        )
        if ceil:
            ax.plot(*zip(*ceil, strict=True), "k:", label="ceiling (test releases)")
        if oracle.get((ds, setting)):
            pts = sorted(oracle[(ds, setting)].items())
            ax.plot(
                [e for e, _ in pts],
                [m[0] / 100 for _, m in pts],
                "x-.",
                color="grey",
                label="perfect-bottom oracle (LR)",
            )
            ax.axhline(
                pts[0][1][1] / 100, color="grey", ls=":", label="oracle's reference without passive"
            )
        parties = next(
            r["parties"]
            for (d, st, _, _), rs in afe.items()
            if (d, st) == (ds, setting)
            for r in rs
        )
        if plain.get((ds, parties)):
            ax.axhline(np.mean(plain[(ds, parties)]), color="k", ls="--", label="split-NN, no DP")
        if alone.get((ds, "pooled, no DP")):
            ax.axhline(np.mean(alone[(ds, "pooled, no DP")]), color="k", ls="-", lw=0.8,
                       label="pooled data, no DP")  # fmt: skip
        dp_pooled = _pooled_dp(alone, ds)  # at its own ε: a line over ε, not one level
        if dp_pooled:
            ax.plot(*zip(*dp_pooled, strict=True), "k-.", marker="s", ms=3, lw=0.8,
                    label="pooled data, DP party-row (best at each ε)")  # fmt: skip
        if alone.get((ds, "majority")):
            ax.axhline(np.mean(alone[(ds, "majority")]), color="tab:red", ls=":", lw=1.2,
                       label="majority class")  # fmt: skip
        # the label holder alone: local where it holds features; with none (the paper's
        # setting) it can only answer the majority class, the dotted line
        if setting.startswith("active") and alone.get((ds, parties)):
            ax.axhline(
                np.mean(alone[(ds, parties)]),
                color="tab:brown",
                ls="--",
                label="label holder alone",
            )
        ax.set_xscale("log")
        ticks = sorted({float(k[2]) for k in afe if k[:2] == (ds, setting)})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("ε (party-row, accountant)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"VFL-AFE on {ds}, {setting}")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # off the lines
        fig.tight_layout()
        name = f"afe_{name_part(ds)}_{setting.replace(' ', '').replace('+', '_')}.png"
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        md.append(f"![accuracy vs epsilon, {ds}, {setting}]({name})")
    return md


def _pooled_dp(alone, ds: str) -> list[tuple[float, float]]:
    """(ε, accuracy) of the most accurate pooled DP baseline at each asked ε of ``ds``, among
    those whose ε is in AFE's unit (party-row); sample-unit baselines are another guarantee."""
    best: dict[float, float] = {}
    for key, accs in alone.items():
        if len(key) == 4 and key[:2] == (ds, "pooled, DP party-row") and key[2] is not None:
            best[float(key[2])] = max(best.get(float(key[2]), -1.0), float(np.mean(accs)))
    return sorted(best.items())


def render(records: list[dict[str, Any]], out: Path) -> str:
    """The VFL-AFE section of report.md (markdown), with PNG plots saved into ``out``."""
    afe, plain, alone, extra = _collect(records)
    if not afe:
        return "## VFL-AFE\n\nNo afe-vfl records."
    oracle = _oracles(afe)
    return "\n".join(
        [
            "## VFL-AFE (issue 13)",
            "",
            "Test accuracy (%, mean ± std over seeds) per variant; ε is the accountant's "
            "(party-row, δ = 1e-5; DP bottom updates: the larger of a training row's ε — its "
            "embeddings, R's statistics, its bottom updates — and a test row's one scoring "
            "release). Settings: 'K passive' is the paper's (the label holder has no features); "
            "'active + K passive' gives the label holder features of its own (party 0, "
            "`--active-features`), only the passive parties' releases are accounted. The "
            "ceiling (`securevfl/privacy/ceiling.py`) is the accuracy no classifier of the test "
            "rows' releases can exceed at that ε whatever the mechanism before the noise: "
            "exact for two classes (the Bayes accuracy of N(0,1) vs N(μ,1) with the test "
            "priors, μ the passive parties' composed Gaussian-DP μ), π_max + (1 − π_max)·τ with "
            "τ = 2Φ(μ/2) − 1 otherwise. The perfect-bottom oracle (binary tasks, "
            "`bench/afe_oracle.py`, "
            "whole dataset, 80/20 split) gives each passive party, for free, its columns' share "
            "of the pooled logistic-regression score filling the ball — what R and D aim at — "
            "plus the test release's noise, and fits a logistic regression on the label "
            "holder's columns and those rows: where it equals the label holder alone, no "
            "variant can beat another but by noise. The paper's ε is not given in its text; "
            "its vanilla "
            "loses 4-11 points to non-private VFL, which places it at large ε.",
            "",
            "### Ablation (Table 2) and accuracy vs ε",
            "",
            *_ablation(afe, plain, alone, oracle),
            "",
            *_plot(afe, plain, alone, oracle, out),
            "",
            "### Per-step overheads (Table 3), medians over runs",
            "",
            "Milliseconds per training step measured inside each run: +noise, +R (DP distance "
            "statistics, rescaling, KL term every 4th step unless said), +D (FCM on the "
            "returned gradients, contrastive loss), forward passes only; VFL is the rest of "
            "the step (both bottoms, the head, "
            "transport, and the backward passes, R's and D's included). The last column compares "
            "whole steps with the vanilla runs at the same batch (other runs, same machine, whose "
            "load varies: the in-run split is the fairer comparison).",
            "",
            *_overheads(afe, extra),
        ]
    )
