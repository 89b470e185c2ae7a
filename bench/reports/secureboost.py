"""Report section for SecureBoost (issue 46): secureboost and secureboost-dp beside the boosted
trees references (``centralized``/``local`` records with ``--model gbdt`` where the suite has
them), per dataset: accuracy over seeds, secureboost-dp's ceiling (its twin with the noise removed),
training seconds, megabytes on the channel and the share of splits made on the partners'
columns."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.records import fmt_mean_std

METHODS = ("secureboost", "secureboost-dp")
REFERENCES = {"centralized": "pooled boosted trees", "local": "label holder's boosted trees"}
# what makes a secureboost run secureboost-dp's twin with its noise removed (the record's
# ``extra.ceiling``): the same data, seed and trees' settings; the key size is left out
# (exact integer arithmetic: it changes no figure but the time)
TREE_SETTINGS = ("trees", "depth", "bins", "local_trees", "lr", "lam", "min_child_weight",
                 "subsample", "colsample")  # fmt: skip


def twin_key(r: dict[str, Any]) -> tuple[Any, ...]:
    """The rows and the tree settings of a run: equal for a run and its noise-removed twin."""
    cfg, ex = r.get("config") or {}, r.get("extra") or {}
    rows = (r["dataset"], r.get("parties"), cfg.get("seed"), cfg.get("n"), cfg.get("partition"))
    return rows + tuple(ex.get(k) for k in TREE_SETTINGS)


def noise_removed_ceiling(
    runs: list[dict[str, Any]], records: list[dict[str, Any]]
) -> float | None:
    """secureboost-dp's ceiling over ``runs`` (one setting, its seeds): the mean accuracy of the
    secureboost records with the same data, seed and settings, one per run; None unless every run
    names the ceiling and has its twin."""
    twins = {
        twin_key(r): r["metrics"]["accuracy"]
        for r in records
        if r["method"] == "secureboost" and "accuracy" in r.get("metrics", {})
    }
    found = []
    for r in runs:
        if ((r.get("extra") or {}).get("ceiling") or {}).get("kind") != "noise removed":
            return None
        if twin_key(r) not in twins:
            return None
        found.append(twins[twin_key(r)])
    return float(np.mean(found)) if found else None


def _label(r: dict[str, Any]) -> str | None:
    cfg = r.get("config") or {}
    if r["method"] in REFERENCES and cfg.get("model") == "gbdt":
        return f"{r['method']} (gbdt: {REFERENCES[r['method']]})"
    if r["method"] not in METHODS:
        return None
    ex = r.get("extra") or {}  # the run's settings, defaults included
    shape = f"{ex.get('trees')} trees, depth {ex.get('depth')}, {ex.get('bins')} bins"
    eps = cfg.get("epsilon")
    return f"{r['method']}{'' if eps is None else f', ε = {eps:g}'} ({shape})"


def render(records: list[dict[str, Any]], out: Path) -> str:
    rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        label = _label(r)
        if label is not None and "accuracy" in r.get("metrics", {}):
            rows[(r["dataset"], label)].append(r)
    lines = ["## SecureBoost", ""]
    if not any(k[1].startswith("secureboost") for k in rows):
        return "\n".join(lines + ["No secureboost records.", ""])
    lines += [
        "Accuracy over seeds (mean ± std), training seconds and MB sent per run; the share of "
        "splits on partner columns. The Paillier key size changes no figure but the time "
        "(exact integer arithmetic, tests/test_secureboost.py).",
        "",
        "| dataset | run | seeds | accuracy | ceiling: noise removed | train s | MB "
        "| partner splits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (ds, label), rs in sorted(rows.items()):
        acc = fmt_mean_std([r["metrics"]["accuracy"] for r in rs])
        secs = np.mean([r["time"]["train_s"] for r in rs])
        mb = np.mean([r["comm"]["bytes_total"] for r in rs]) / 1e6
        share = "-"
        splits = [(r.get("extra") or {}).get("splits_by_party") for r in rs]
        if all(splits):
            total = sum(sum(s.values()) for s in splits)
            partner = sum(v for s in splits for k, v in s.items() if k != "0")
            share = f"{partner / max(total, 1):.0%}"
        ceiling = "-"
        if rs[0]["method"] == "secureboost-dp":
            c = noise_removed_ceiling(rs, records)
            ceiling = "not run" if c is None else f"{c:.4f}"
        lines.append(
            f"| {ds} | {label} | {len(rs)} | {acc} | {ceiling} | {secs:.1f} | {mb:.2f} | {share} |"
        )
    lines += [
        "",
        "secureboost-dp's ceiling is the same run with its noise removed: secureboost's "
        "accuracy on the same data and seeds with the same trees, depth, bins, learning rate, "
        "λ and sampling (the suite runs both; 'not run' where a seed's twin is missing), on the "
        "same train/test split (drawn from the seed).",
    ]
    return "\n".join(lines + [""])
