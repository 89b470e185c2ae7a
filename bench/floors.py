"""A dataset's two floors, and whether collaborating pays (issue 32).

The majority class (always answering the test split's most common class, ``majority_class_rate``
in each record) and the label holder alone (``local``: no collaboration, nothing shared). A
setting at or below either is marked in the report's tables; a decision row whose best DP option
loses to the label holder alone gets one sentence saying that collaborating does not pay there.
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
    alone: Setting | None  # the most accurate label-holder-alone setting

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
        return (
            f"{dataset}: majority class {maj} ({self.metric} of always answering the test "
            f"split's most common class); label holder alone {alone} (no collaboration)."
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
        out[ds] = Floors(
            metric,
            float(np.mean(maj)) if maj and metric == "accuracy" else math.nan,
            _better(metric)[0](alone, key=lambda s: s.score) if alone else None,
        )
    return out


def verdicts(records: list[dict[str, Any]]) -> list[str]:
    """One sentence per DP row whose most accurate option loses to the label holder alone."""
    fl = floors(settings(records))
    out = []
    for c in choices(records):
        alone = fl[c.dataset].alone
        if c.best is None or c.best.unit is None or alone is None:
            continue
        if _worse(c.best, alone.score):
            out.append(
                f"{c.dataset}, {c.row}: collaborating does not pay: the most accurate DP option, "
                f"{c.best.label} ({c.best.score:.3f}), loses to the label holder alone, "
                f"{alone.label} ({alone.score:.3f}); at this ε train on the label holder's "
                "columns alone."
            )
    return out
