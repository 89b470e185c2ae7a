"""Report section for FM-VFL's studies (paper Tables I-IV), from result records alone.

* accuracy (Table III) and MSE (Tables I, II): mean ± std over seeds per dataset, method, ε
  (and encoding / sparsity), with d, the number of features after encoding (+ intercept);
* runtime by K (Table IV): run time, the cross-party phase, and each MPyC party's peak memory;
* vectorised vs naive cross-party phase, side by side;
* budgets: the global ε and each party's ε^(k) (Theorem 2) with the accountant that produced them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.records import fmt_mean_std

FM = ("fm-vfl", "fm-central", "dpsgd-c", "centralized")


def _cfg(r: dict[str, Any], k: str, default: Any = None) -> Any:
    return r["config"].get(k, default)


def _utility(records: list[dict[str, Any]]) -> list[str]:
    rs = [
        r
        for r in records
        if r["method"] in FM
        and _cfg(r, "mpc_impl", "vectorized") == "vectorized"
        and _cfg(r, "offset", "none") == "none"  # the paper's tables: the joint GLM only
    ]
    if not rs:
        return []
    by: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rs:
        eps = _cfg(r, "epsilon")
        by[
            (
                r["dataset"],
                _cfg(r, "encoding", "onehot"),
                _cfg(r, "sparsity"),
                r["method"],
                r["parties"] if r["method"] == "fm-vfl" else 1,
                -1.0 if eps is None or r["method"] == "centralized" else float(eps),
                _cfg(r, "ridge", 1.0) if r["method"].startswith("fm") else "",
            )
        ].append(r)
    md = [
        "### Utility (Tables I-III)",
        "",
        "| dataset | encoding | s | method | K | ε | ridge | d | accuracy | MSE | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (ds, enc, s, m, K, eps, ridge), g in sorted(by.items(), key=lambda kv: str(kv[0])):
        d = g[0]["extra"].get("d", g[0]["n_features"]) if g[0]["extra"] else g[0]["n_features"]
        md.append(
            f"| {ds} | {enc} | {'' if s is None else s} | {m} | {K} | "
            f"{'—' if eps < 0 else f'{eps:g}'} | {ridge} | {d} | "
            f"{fmt_mean_std([x['metrics'].get('accuracy') for x in g])} | "
            f"{fmt_mean_std([x['metrics'].get('mse') for x in g])} | {len(g)} |"
        )
    return md + [""]


def _runtime(records: list[dict[str, Any]]) -> list[str]:
    rs = [r for r in records if r["method"] in ("fm-vfl", "fm-central")]
    if not rs:
        return []
    by: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rs:
        K = r["parties"] if r["method"] == "fm-vfl" else 1
        impl = _cfg(r, "mpc_impl", "vectorized") if r["method"] == "fm-vfl" else ""
        by[
            (
                r["dataset"],
                r["method"],
                impl,
                K,
                r["n_train"],
                (r.get("extra") or {}).get("d", r["n_features"]),
            )
        ].append(r)
    md = [
        "### Runtime by K (Table IV) and the cross-party phase (mean ± std over runs)",
        "",
        "| dataset | method | impl | K | n_train | d | total s | cross-party s (wall, incl. "
        "spawn) | secure s (slowest party) | peak MB per MPyC party (max) | MPC bytes | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, g in sorted(by.items(), key=lambda kv: str(kv[0])):
        ex = [r.get("extra") or {} for r in g]
        sec = [max(e["mpc"]["secure_s"].values()) for e in ex if e.get("mpc")]
        peaks: dict[str, float] = defaultdict(float)
        for e in ex:
            for k, v in ((e.get("mpc") or {}).get("peak_rss_mb") or {}).items():
                peaks[str(k)] = max(peaks[str(k)], v)
        mb = [((r["comm"].get("by_phase") or {}).get("mpc") or {}).get("bytes", 0) for r in g]
        cells = [
            *key,
            fmt_mean_std([r["time"]["total_s"] for r in g]),
            fmt_mean_std([e["mpc_s"] for e in ex if "mpc_s" in e]) if sec else "",
            fmt_mean_std(sec) if sec else "",
            ", ".join(f"{k}: {v:.0f}" for k, v in sorted(peaks.items())),
            int(np.mean(mb)),
            len(g),
        ]
        md.append("| " + " | ".join(str(c) for c in cells) + " |")
    return md + [""]


def _impl_ratio(records: list[dict[str, Any]]) -> list[str]:
    rs = [r for r in records if r["method"] == "fm-vfl" and (r.get("extra") or {}).get("mpc")]
    by: dict[tuple, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rs:
        by[(r["dataset"], r["n_train"], tuple(r["features_per_party"]), r["parties"])][
            _cfg(r, "mpc_impl", "vectorized")
        ] = r
    md = []
    for key, g in sorted(by.items(), key=lambda kv: str(kv[0])):
        if "naive" in g and "vectorized" in g:
            sv = max(g["vectorized"]["extra"]["mpc"]["secure_s"].values())
            sn = max(g["naive"]["extra"]["mpc"]["secure_s"].values())
            wv, wn = g["vectorized"]["extra"]["mpc_s"], g["naive"]["extra"]["mpc_s"]
            md.append(
                f"| {key[0]} | {key[1]} | {'+'.join(map(str, key[2]))} | {key[3]} | "
                f"{sv:.2f} | {sn:.2f} | {sn / sv:.1f}x | {wv:.2f} | {wn:.2f} | "
                f"{wn / wv:.1f}x |"
            )
    if not md:
        return []
    return [
        "### Vectorised vs naive (per-coefficient in_prod) cross-party phase",
        "",
        "| dataset | n_train | d per party | K | vectorised secure s | naive secure s | ratio "
        "| vectorised wall s | naive wall s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *md,
        "",
    ]


def _budgets(records: list[dict[str, Any]]) -> list[str]:
    rs = [r for r in records if r["method"] == "fm-vfl" and r.get("privacy")]
    if not rs:
        return []
    seen, md = (
        set(),
        [
            "### Budgets (Theorems 1, 2; Corollary 1)",
            "",
            "| dataset | K | budget | d | Δ_f | ε | ε^(k) per party | accountant |",
            "|---|---|---|---|---|---|---|---|",
        ],
    )
    for r in rs:
        p = r["privacy"]
        key = (r["dataset"], r["parties"], p.get("budget"), p.get("d"), p["epsilon"])
        if key in seen:
            continue
        seen.add(key)
        per = ", ".join(f"{k}: {v['epsilon']:.4g}" for k, v in sorted(p["per_party"].items()))
        md.append(
            f"| {r['dataset']} | {r['parties']} | {p.get('budget')} | {p.get('d')} | "
            f"{p.get('delta_f', 0):.4g} | {p['epsilon']:.4g} | {per} | {p['accountant']} |"
        )
    return md + [""]


def render(records: list[dict[str, Any]], out: Path) -> str:
    """Markdown for the FM-VFL section of a report."""
    md = ["## FM-VFL: functional mechanism with Shamir cross-party products", ""]
    for part in (_utility, _runtime, _impl_ratio, _budgets):
        md += part(records)
    return "\n".join(md)
