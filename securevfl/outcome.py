"""Results that look fine but are not: checks on a finished run, and strict JSON.

A run can finish and still be useless: a diverged model (NaN scores, so a NaN metric), a
constant predictor (every test row gets the same class, e.g. at ε = 1e-6 or with a clip of 0),
or a privacy report whose ε is not a number. Each such finding is one line, printed by the CLI
and kept in the record (``stats.warnings``). Records are then made strict JSON: a value that is
not a finite number is written as ``null`` (JSON has no NaN), its meaning kept by the warning.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def outcome_warnings(
    task: str,
    scores: np.ndarray | None,
    metrics: dict[str, float],
    privacy: dict[str, Any] | None,
) -> list[str]:
    """One line per reason the result of a finished run should not be taken at face value."""
    out: list[str] = []
    bad = [k for k, v in metrics.items() if not _finite(v)]
    if bad:
        out.append(
            f"metric {', '.join(bad)} is not a finite number: the model diverged "
            "(non-finite test scores); check the learning rate, clipping and noise"
        )
    elif scores is not None and len(scores) > 1:
        s = np.asarray(scores, dtype=float)
        if task == "regression":
            if np.ptp(s) == 0.0:
                out.append(f"constant predictor: every test row is predicted {float(s[0]):.4g}")
        else:
            pred = (s >= 0.5).astype(int) if s.ndim == 1 else np.argmax(s, axis=1)
            if np.all(pred == pred[0]):
                out.append(
                    f"constant predictor: every test row is predicted class {int(pred[0])} "
                    "(too much noise or too little signal for this setting)"
                )
            elif _finite(metrics.get("auc")) and metrics["auc"] <= 0.5:
                out.append(
                    f"auc {metrics['auc']:.3f} is no better than chance (0.5): the model "
                    "carries no signal at this setting (too much noise or too little data)"
                )
    if privacy is not None:
        for key in ("epsilon", "target_epsilon"):
            if key in privacy and privacy[key] is not None and not _finite(privacy[key]):
                out.append(
                    f"privacy {key} is {privacy[key]!r}: the accountant cannot bound this "
                    "setting, so the run has no meaningful privacy guarantee"
                )
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def finite_values(obj: Any) -> Any:
    """``obj`` with every float that is not finite (NaN, ±inf) replaced by ``None``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_values(v) for v in obj]
    if isinstance(obj, np.floating):
        return finite_values(float(obj))
    return obj


def strict_json(obj: Any) -> str:
    """JSON text that any strict parser accepts (no NaN / Infinity tokens)."""
    return json.dumps(finite_values(obj), allow_nan=False, default=_plain)


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"record values must be JSON data, got {type(o).__name__}")
