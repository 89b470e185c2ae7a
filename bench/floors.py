"""A dataset's two floors, and whether collaborating pays (issues 32, 43).

The majority class (always answering the test split's most common class, ``majority_class_rate``
in each record) and the label holder alone (no collaboration, nothing shared). The label holder's
floor is its best model alone: ``local --model best`` (GLM, MLP or boosted trees, chosen on a
validation fifth of its training rows, never on the test rows) where the records hold it;
otherwise the most accurate ``local`` setting on the test rows, which the floor's sentence then
says. A setting at or below either is marked in the report's tables; every decision row at a
stated ε gets one sentence, either way: "collaborating pays: M at ε gives +x points over the
label holder alone" or "does not pay".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.method_choice import Setting, _better, choices, settings


@dataclass(frozen=True)
class Floors:
    """A dataset's two floors: the majority class and the label holder alone."""

    metric: str
    majority: float  # NaN: regression, or records without ``majority_class_rate``
    alone: Setting | None  # the label holder's best model alone (module docstring)
    validated: bool = False  # ``alone`` chosen on training rows (``local --model best``)

    def marks(self, s: Setting) -> str:
        """'' or a mark for a setting at/below the majority class or below the holder alone."""
        return self.mark_value(s.score, holder_alone=s.holder_alone)

    def mark_value(self, score: float, *, holder_alone: bool = False) -> str:
        """The mark of a mean ``score`` ('' when above both floors, or not a number)."""
        if math.isnan(score):
            return ""
        if self.metric == "accuracy" and not math.isnan(self.majority):
            if score <= self.majority + 1e-9:
                return f"✗ at or below the majority class ({self.majority:.3f})"
        a = self.alone
        if a is None or holder_alone:
            return ""
        if (score > a.score) if self.metric == "mse" else (score < a.score):
            return f"↓ below the label holder alone ({a.score:.3f})"
        return ""

    def lines(self, dataset: str) -> str:
        """One sentence naming both floors of ``dataset``."""
        maj = "n/a" if math.isnan(self.majority) else f"{self.majority:.3f}"
        alone = "not run" if self.alone is None else f"{self.alone.label} {self.alone.score:.3f}"
        how = (
            "its best of GLM, MLP and boosted trees, chosen on its training rows"
            if self.validated
            else "the best of its runs on the test rows; local --model best chooses on training "
            "rows"
        )
        if self.alone is None:
            how = "no collaboration"
        return (
            f"{dataset}: majority class {maj} ({self.metric} of always answering the test "
            f"split's most common class); label holder alone {alone} ({how})."
        )


def _worse(s: Setting, score: float) -> bool:
    return s.score > score if s.metric == "mse" else s.score < score


def floors(ss: list[Setting]) -> dict[str, Floors]:
    """Per dataset, its floors (from the settings of every kind)."""
    out = {}
    for ds in sorted({s.dataset for s in ss}):
        group = [s for s in ss if s.dataset == ds]
        metric = group[0].metric
        maj = [s.majority for s in group if not math.isnan(s.majority)]
        alone = [s for s in group if s.holder_alone]
        chosen = [s for s in alone if s.records[0]["config"].get("model") == "best"]
        out[ds] = Floors(
            metric,
            float(np.mean(maj)) if maj and metric == "accuracy" else math.nan,
            chosen[0]
            if chosen
            else _better(metric)[0](alone, key=lambda s: s.score)
            if alone
            else None,
            validated=bool(chosen),
        )
    return out


def gain_text(s: Setting, alone: Setting) -> str:
    """'+2.1 points' (accuracy) or '-3 % of the error' (MSE) of ``s`` over the floor."""
    if s.metric == "mse":
        return f"{100 * (alone.score - s.score) / alone.score:+.1f} % less error"
    return f"{100 * (s.score - alone.score):+.1f} points"


def _named_options(c: Any) -> str:
    """'M (accuracy a, AUC u), ...' of a row's options: which ran, and whether they rank."""

    def auc(s: Setting) -> str:
        vals = [(r.get("metrics") or {}).get("auc") for r in s.records]
        vals = [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
        return f", AUC {np.mean(vals):.2f}" if vals else ""

    return "; ".join(f"{s.label}: accuracy {s.score:.3f}{auc(s)}" for s in c.options)


def verdicts(records: list[dict[str, Any]]) -> list[str]:
    """One sentence per DP row (dataset, ε, unit), either way: its most accurate option (never
    a constant predictor) against the label holder alone."""
    fl = floors(settings(records))
    out = []
    for c in choices(records):
        alone = fl[c.dataset].alone
        if c.row.startswith("no ε") or alone is None:
            continue
        head = f"{c.dataset}, {c.row}: "
        if c.best is None:
            out.append(
                head + "collaborating does not pay as run: every DP option run at this ε "
                f"answers one class or carries no signal ({_named_options(c)}); the label "
                f"holder alone, {alone.label}, reaches {alone.score:.3f}."
            )
        elif _worse(c.best, alone.score):
            out.append(
                head + f"collaborating does not pay: the most accurate DP option, "
                f"{c.best.label} ({c.best.score:.3f}), loses to the label holder alone, "
                f"{alone.label} ({alone.score:.3f}); at this ε train on the label holder's "
                "columns alone."
            )
        else:
            out.append(
                head + f"collaborating pays: {c.best.label} at {c.row.split(' (')[0]} gives "
                f"{gain_text(c.best, alone)} over the label holder alone "
                f"({c.best.score:.3f} against {alone.label} {alone.score:.3f})."
            )
    return out
