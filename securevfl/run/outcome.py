"""Results that look fine but are not: checks on a finished run, and strict JSON.

A run can finish and still be useless: a diverged model (NaN scores, so a NaN metric), a
constant predictor (every test row gets the same class, e.g. at ε = 1e-6 or with a clip of 0), a
classifier no better than always answering the test split's majority class (the noise at this ε
and n swamps the signal, or the setting does not learn), or a privacy report whose ε is not a
number. The class findings name the setting (method, ε, training rows) and the likely reason.
Each finding is one line, printed by the CLI and kept in the record (``stats.warnings``).
Records are then made strict JSON: a value that is not a finite number is written as ``null``
(JSON has no NaN), its meaning kept by the warning.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

# a classifier whose accuracy is within this of the majority-class rate has learnt (almost)
# nothing: on breast's 114 test rows one row is 0.9 points, so 1 point is "one row or less"
MAJORITY_MARGIN = 0.01


def outcome_warnings(
    task: str,
    scores: np.ndarray | None,
    metrics: dict[str, float],
    privacy: dict[str, Any] | None,
    *,
    y_test: np.ndarray | None = None,
    setting: str = "",
) -> list[str]:
    """One line per reason the result of a finished run should not be taken at face value.

    ``y_test`` (the label holder's test labels) enables the majority-class check; ``setting``
    (e.g. "hdp-vfl at ε = 0.1 on 455 training rows") names the run in the class findings.
    """
    out: list[str] = []
    why = _reason(privacy)
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
                    f"constant predictor: every test row is predicted class {int(pred[0])}"
                    f"{_named(setting)} ({why})"
                )
            else:
                weak = _majority(metrics.get("accuracy"), y_test, setting, why)
                if not weak and _finite(metrics.get("auc")) and metrics["auc"] <= 0.5:
                    weak = [
                        f"auc {metrics['auc']:.3f} is no better than chance (0.5)"
                        f"{_named(setting)}: the model carries no signal ({why})"
                    ]
                out += weak
    if privacy is not None:
        for key in ("epsilon", "target_epsilon"):
            if key in privacy and privacy[key] is not None and not _finite(privacy[key]):
                out.append(
                    f"privacy {key} is {privacy[key]!r}: the accountant cannot bound this "
                    "setting, so the run has no meaningful privacy guarantee"
                )
    return out


def _reason(privacy: dict[str, Any] | None) -> str:
    """The likely cause of a model that learnt nothing: DP noise where there is a budget."""
    eps = (privacy or {}).get("target_epsilon", (privacy or {}).get("epsilon"))
    if isinstance(eps, (int, float)) and math.isfinite(eps):
        return (
            "the noise calibrated to this ε swamps the signal at this number of rows: a larger "
            "ε or more rows would help; see the method's help for its defaults"
        )
    return "too little signal for this setting: check the learning rate, epochs and clipping"


def _named(setting: str) -> str:
    return f": {setting}" if setting else ""


def _majority(accuracy: Any, y_test: np.ndarray | None, setting: str, why: str) -> list[str]:
    """A varying classifier no better than always answering the test majority class."""
    if y_test is None or not _finite(accuracy) or len(y_test) == 0:
        return []
    classes, counts = np.unique(np.asarray(y_test), return_counts=True)
    share = float(counts.max()) / len(y_test)
    if accuracy > share + MAJORITY_MARGIN:
        return []
    return [
        f"no better than the majority class{_named(setting)}: accuracy {accuracy:.3f} against "
        f"{share:.3f} for always predicting class {int(classes[np.argmax(counts)])} ({why})"
    ]


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
