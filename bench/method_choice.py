"""Which method should I use: per dataset and ε (per privacy unit), the most accurate method and
the cheapest ones (training time, bytes sent) whose accuracy is within one point of it.

Records are grouped into *settings* (dataset, method, variant, privacy kind and, for DP records,
the ε asked for and the unit the accountant reports it in). A DP record's ε belongs to its unit
only: two units never meet in one comparison. Records whose guarantee is of another kind (HE,
MPC only, CZOFO's heuristic figure, none) are compared among themselves per dataset, with their
kind named, never on an ε row. Only runs at a stated ε (the one the suite asked for) get a
decision row: a DP run that asked for none reports whatever its defaults cost (ε in the 10^5) and
is listed with its costs, never picked.

Two floors sit beside every choice: the majority class (always answering the test split's most
common class, ``majority_class_rate`` in each record) and the label holder alone (``local``: no
collaboration, nothing shared; ``local --model best`` where it ran: its best model chosen on its
training rows). A setting at or below either is marked, and every DP row says in one sentence
whether collaborating pays there (``floors.verdicts``). A constant predictor (a warned run, or an
AUC within noise of 0.5) is never the most accurate option.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.record_keys import main_metric, metric_value, train_seconds, variant, varying_keys
from bench.records import capabilities, stat

ACCURACY_SLACK = 0.01  # "within 1 point" of the best accuracy
MSE_SLACK = 0.01  # regression: within 1 % (relative) of the best mean squared error
IGNORED_VARIANT_KEYS = ("n", "delta", "timed_batches")  # sizes, not what a user chooses
# the run warnings (``run.outcome.outcome_warnings``, the release-once head's fallback) that say
# a model answers one class or carries no signal; other warnings (an audit variant, a resumed
# checkpoint, an unbounded ε) say nothing about the predictions
CONSTANT_WARNINGS = (
    "constant predictor",
    "no better than the majority class",
    "auc ",
    "the head did not beat the class shares",
    "metric ",
)


def kind_of(record: dict[str, Any]) -> str:
    """The kind of guarantee a record carries, as a reader would name it."""
    priv = record.get("privacy") or {}
    guarantees = capabilities(record).get("guarantees") or []
    if priv.get("epsilon") is not None:
        return "DP+MPC" if "mpc" in guarantees else "DP"
    if priv.get("intrinsic_heuristic") is not None:
        return "heuristic (no DP ε)"
    if "dp" in guarantees:
        return "DP, ε void"  # a DP method that released something outside its guarantee
    if "he" in guarantees and (record.get("extra") or {}).get("scheme") != "plain":
        return "HE"  # he-vfl's scheme=plain is its unencrypted twin: kind none
    if "mpc" in guarantees:
        return "MPC"
    if capabilities(record).get("data") == "label-party":
        return "nothing shared"  # the label holder alone: private by not collaborating
    return "none"


def unit_of(record: dict[str, Any]) -> str | None:
    """The privacy unit of the record's headline ε (None for records with no ε)."""
    priv = record.get("privacy") or {}
    return priv.get("unit", "?") if priv.get("epsilon") is not None else None


@dataclass
class Setting:
    """One (dataset, method variant, kind, ε, unit) and its records over seeds."""

    dataset: str
    label: str
    kind: str
    unit: str | None
    epsilon: float | None  # the target ε (config), the grid value; None for other kinds
    records: list[dict[str, Any]]

    def _mean(self, values: list[float | None]) -> float:
        vals = [v for v in values if v is not None and math.isfinite(v)]
        return float(np.mean(vals)) if vals else math.nan

    @property
    def pooled(self) -> bool:
        """A pooled-data baseline (all columns at one place): a reference, not a VFL option."""
        return capabilities(self.records[0]).get("data") == "pooled"

    @property
    def tag(self) -> str:
        """The label with its kind, e.g. 'centralized (model=glm) [none, pooled data]'."""
        return f"{self.label} [{self.kind}{', pooled data' if self.pooled else ''}]"

    @property
    def metric(self) -> str:
        return main_metric(self.records[0])

    @property
    def score(self) -> float:
        return self._mean([metric_value(r, self.metric) for r in self.records])

    @property
    def score_std(self) -> float:
        vals = [metric_value(r, self.metric) for r in self.records]
        vals = [v for v in vals if v is not None]
        return float(np.std(vals)) if vals else math.nan

    @property
    def constant(self) -> bool:
        """A constant predictor: a run warned that it answers one class or carries no signal
        (``CONSTANT_WARNINGS``, e.g. a head that answers the class shares), or
        the mean AUC is within two null standard errors of 0.5 (Hanley & McNeil's
        √((n₁+n₀+1)/(12·n₁·n₀)) for a test split of n₁ and n₀ rows per class): never the
        most accurate option, whatever its accuracy (the majority class is not a model)."""
        if any(w.startswith(CONSTANT_WARNINGS) for r in self.records for w in warned(r)):
            return True
        aucs = [(r.get("metrics") or {}).get("auc") for r in self.records]
        aucs = [a for a in aucs if a is not None and math.isfinite(a)]
        if not aucs:
            return False
        r0 = self.records[0]
        n, p = int(r0.get("n_test") or 0), self.majority
        if n < 2 or math.isnan(p):
            return False
        n1, n0 = max(1.0, n * (1 - p)), max(1.0, n * p)
        se = math.sqrt((n1 + n0 + 1) / (12 * n1 * n0) / len(aucs))
        return abs(float(np.mean(aucs)) - 0.5) <= 2 * se

    @property
    def majority(self) -> float:
        """The test majority-class rate of its runs (NaN: regression, or older records)."""
        return self._mean([r.get("majority_class_rate") for r in self.records])

    @property
    def holder_alone(self) -> bool:
        """The label holder alone (``local``): private by not collaborating."""
        return self.kind == "nothing shared"

    @property
    def reported_epsilon(self) -> float:
        return self._mean([(r.get("privacy") or {}).get("epsilon") for r in self.records])

    @property
    def train_s(self) -> float:
        return self._mean([train_seconds(r)[0] for r in self.records])

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the whole run, every party (records older than ``time.cpu_s``: the
        training epochs' where the method measured them)."""
        return self._mean(
            [
                r["time"].get("cpu_s") or sum(stat(r, "epoch_cpu_s") or []) or None
                for r in self.records
            ]
        )

    @property
    def bytes_total(self) -> float:
        return self._mean([float(r["comm"]["bytes_total"]) for r in self.records])

    @property
    def peak_bytes(self) -> float:
        """Largest party's peak memory; only one-process-per-party runs measure a party's own."""
        peaks = [
            float(max(p.values()))
            for r in self.records
            if r.get("runtime") == "processes" and (p := stat(r, "peak_rss_bytes"))
        ]
        return float(np.mean(peaks)) if peaks else math.nan


def settings(records: list[dict[str, Any]]) -> list[Setting]:
    """Group the plain run records (no attacks, a metric) into settings, sorted."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for ds in sorted({r["dataset"] for r in records}):
        rs = [r for r in records if r["dataset"] == ds and "attack" not in r]
        keys = {
            m: [k for k in ks if k not in IGNORED_VARIANT_KEYS]
            for m, ks in varying_keys(rs).items()
        }
        for r in rs:
            var = variant(r, keys)
            label = r["method"] + (f" ({var})" if var else "")
            eps = r["config"].get("epsilon") if unit_of(r) else None
            groups[(ds, label, kind_of(r), unit_of(r), eps)].append(r)
    out = [Setting(*key, rs) for key, rs in groups.items()]
    out = [s for s in out if not math.isnan(s.score)]  # timed-only runs have no metric
    return sorted(out, key=lambda s: (s.dataset, s.unit or "", s.epsilon or 0.0, s.label))


def _better(metric: str) -> tuple[Any, Any]:
    """(best-of function, is-close test) for the metric's direction."""
    if metric == "mse":
        return min, lambda v, best: v <= best * (1 + MSE_SLACK)
    return max, lambda v, best: v >= best - ACCURACY_SLACK


def warned(record: dict[str, Any]) -> list[str]:
    """The run's warning lines."""
    return [str(w) for w in stat(record, "warnings") or []]


@dataclass
class Choice:
    """One summary row: the best setting and the cheapest close ones."""

    dataset: str
    row: str  # "ε = 1 (party-row)" or "no ε: HE" ...
    best: Setting | None  # None where only pooled-data baselines ran at this row
    fastest: Setting | None
    fewest_bytes: Setting | None
    reference: Setting | None  # the most accurate pooled-data baseline of the row
    candidates: int
    options: tuple[Setting, ...] = ()  # the row's VFL options (constant predictors included)


def choose(group: list[Setting]) -> tuple[Setting | None, Setting | None, Setting | None]:
    """(most accurate, fastest within the slack, fewest bytes within the slack), among the
    settings that are not constant predictors (``Setting.constant``); Nones where all are."""
    metric = group[0].metric
    pick, close = _better(metric)
    group = [s for s in group if not s.constant]
    if not group:
        return None, None, None
    best = pick(group, key=lambda s: s.score)
    near = [s for s in group if close(s.score, best.score)]
    fastest = min(near, key=lambda s: (s.train_s, s.bytes_total))
    fewest = min(near, key=lambda s: (s.bytes_total, s.train_s))
    return best, fastest, fewest


def choices(records: list[dict[str, Any]]) -> list[Choice]:
    """The summary rows: per dataset, one per (unit, target ε) and one per non-DP kind."""
    rows: dict[tuple, list[Setting]] = defaultdict(list)
    for s in settings(records):
        if s.unit is not None and s.epsilon is None:
            continue  # ε not asked: its defaults' ε is no budget anyone chose (cost table only)
        if s.unit is not None:
            key = (s.dataset, 0, s.unit, s.epsilon or 0.0, f"{eps_label(s)} ({s.unit})")
        else:
            key = (s.dataset, 1, s.kind, 0.0, f"no ε: {s.kind}")
        rows[key].append(s)
    out = []
    for key in sorted(rows):
        options = [s for s in rows[key] if not s.pooled]
        pooled = [s for s in rows[key] if s.pooled]
        best, fastest, fewest = choose(options) if options else (None, None, None)
        ref = choose(pooled)[0] if pooled else None
        out.append(Choice(key[0], key[4], best, fastest, fewest, ref, len(options), tuple(options)))
    return out


def eps_label(s: Setting) -> str:
    """'ε = 1' for a target ε; a run that asked for none shows what its accountant reported."""
    if s.epsilon is None:
        return f"ε not asked (reported {s.reported_epsilon:.3g})"
    return f"ε = {s.epsilon:g}"


def score_cell(s: Setting) -> str:
    digits = 3 if s.metric != "mse" else 4
    return f"{s.score:.{digits}f} ± {s.score_std:.{digits}f}"


def fmt_bytes(b: float) -> str:
    """Bytes in B / kB / MB / GB with 3 significant digits."""
    if math.isnan(b):
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table from a header and rows of cell strings."""
    esc = [[c.replace("|", "\\|") for c in row] for row in [header, *rows]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in esc[1:]])
