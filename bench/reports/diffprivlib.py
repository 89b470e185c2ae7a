"""Report section: diffprivlib's LogisticRegression (an optional central reference run by
``python -m bench.peers.diffprivlib_lr --out OUT``) beside securevfl's DP methods, by dataset
and ε (mean accuracy over seeds). Empty when the peer has not been run: nothing needs it."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.records import capabilities

PEER_FILE = Path("peers") / "diffprivlib.jsonl"


def read_peer(out: Path) -> list[dict[str, Any]]:
    """The peer's lines (a torn last line skipped); [] when the file is absent."""
    path = out / PEER_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def render(records: list[dict[str, Any]], out: Path) -> str:
    peer = read_peer(out)
    if not peer:
        return ""
    acc: dict[tuple[str, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in peer:
        acc[(r["dataset"], float(r["epsilon"]))]["diffprivlib-lr"].append(float(r["accuracy"]))
    for r in records:
        p = r.get("privacy") or {}
        eps = p.get("target_epsilon")
        if eps is None or "dp" not in capabilities(r).get("guarantees", []):
            continue
        key = (r["dataset"], float(eps))
        if key in acc:
            acc[key][r["method"]].append(float(r["metrics"]["accuracy"]))
    methods = sorted({m for cells in acc.values() for m in cells} - {"diffprivlib-lr"})
    cols = ["diffprivlib-lr", *methods]
    md = [
        "## Central reference: diffprivlib LogisticRegression",
        "",
        f"{peer[0]['accountant']} on securevfl's own splits (pooled rows, same scaling; "
        "`bench/peers/diffprivlib_lr.py`), beside each DP method at the same requested ε "
        "(mean accuracy over seeds; each record's own unit and accountant apply).",
        "",
        "| dataset · ε | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for ds, eps in sorted(acc):
        cells = acc[(ds, eps)]
        vals = [f"{np.mean(cells[m]):.3f}" if cells.get(m) else "" for m in cols]
        md.append(f"| {ds} · {eps:g} | " + " | ".join(vals) + " |")
    return "\n".join(md)
