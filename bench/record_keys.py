"""How the report reads one record: its main metric, its variant label among its method's runs,
its headline ε, and the grouping of records into table rows. Shared by report.md, the decision
tables (bench.method_choice) and the report sections (bench.reports)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from bench.records import stat

IGNORED_CONFIG = {"seed", "timeout"}


def main_metric(record: dict[str, Any]) -> str:
    return "mse" if "mse" in record["metrics"] else "accuracy"


def metric_value(record: dict[str, Any], metric: str) -> float | None:
    """The record's metric, or None for runs that were timed only (truncated training)."""
    if stat(record, "truncated", "truncated_training"):
        return None
    return record["metrics"].get(metric)


def train_seconds(record: dict[str, Any]) -> tuple[float, bool]:
    """(training seconds, extrapolated?): a run timed on its first minibatches only (HE-VFL's
    ``timed_batches``) counts its extrapolated full epochs, not the seconds it ran."""
    ex = record.get("extra") or {}
    if ex.get("extrapolated") and ex.get("epoch_s_extrapolated") is not None:
        return float(ex["epoch_s_extrapolated"]) * int(record["config"]["epochs"]), True
    return float(record["time"]["train_s"]), False


def varying_keys(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per method, the config keys that take more than one value (they label its variants)."""
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for r in records:
        for k, v in r["config"].items():
            if k not in IGNORED_CONFIG and k != "epsilon":
                seen[r["method"]][k].add(repr(v))
        seen[r["method"]]["runtime"].add(r.get("runtime", "inprocess"))
    return {m: sorted(k for k, vs in d.items() if len(vs) > 1) for m, d in seen.items()}


def variant(record: dict[str, Any], keys: dict[str, list[str]]) -> str:
    parts = []
    for k in keys.get(record["method"], []):
        v = record.get("runtime") if k == "runtime" else record["config"].get(k)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def group_records(records: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    keys = varying_keys(records)
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        eps = r["config"].get("epsilon")
        groups[(r["dataset"], r["method"], variant(r, keys), r["parties"], eps)].append(r)
    return dict(
        sorted(
            groups.items(),
            key=lambda kv: tuple(
                (-1 if x is None else x) if isinstance(x, (int, float)) or x is None else str(x)
                for x in kv[0]
            ),
        )
    )


def epsilon_of(priv: dict[str, Any] | None) -> float | None:
    """The record's headline ε (None: not private, or voided by a release outside it)."""
    if not priv or priv.get("epsilon") is None:
        return None
    return float(priv["epsilon"])


def epsilon_cell(priv: dict[str, Any] | None) -> str:
    """'ε (unit, accountant)' for a table; says 'not private' where a record voids its ε."""
    if not priv:
        return "—"
    if priv.get("epsilon") is None:
        return "none: " + "; ".join(priv.get("outside_guarantee") or ["not private"])
    return f"{priv['epsilon']:.4g} ({priv.get('unit', '?')}; {priv['accountant']})"


def majority_rate(records: list[dict[str, Any]]) -> float | None:
    """The mean test majority-class rate of ``records`` (None: regression or older records)."""
    vals = [r["majority_class_rate"] for r in records if r.get("majority_class_rate") is not None]
    return float(np.mean(vals)) if vals else None
