"""The report's decision: only at a stated ε, every method judged against the majority class and
the label holder alone, both drawn in every accuracy plot (issue 32).

Rendered from a small synthetic results.jsonl shaped like the default suite's (the report reads
records only), so the floors and the marks are known exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.axes
import pytest

from bench.choice_tables import cost_rows, summary_rows
from bench.floors import floors, verdicts
from bench.method_choice import settings
from bench.pareto_plots import accuracy_vs_cost, accuracy_vs_epsilon
from bench.report import plot_metric_vs_epsilon, render_report
from bench.results_file import read_results

MAJORITY = 0.628
CAPS = {
    "vfl": {"guarantees": [], "data": "vertical"},
    "local": {"guarantees": [], "data": "label-party"},
    "centralized": {"guarantees": [], "data": "pooled"},
    "hdp-vfl": {"guarantees": ["dp"], "data": "vertical"},
    "dpsgd-c": {"guarantees": ["dp"], "data": "pooled"},
    "ldp-vfl": {"guarantees": ["dp"], "data": "vertical"},
}


def _record(method: str, acc: float, seed: int, eps: float | None = None, **privacy) -> dict:
    dp = "dp" in CAPS[method]["guarantees"]
    priv = None
    if dp:
        priv = {"epsilon": eps, "unit": "sample", "accountant": "rdp", "delta": 1e-5, **privacy}
    return {
        "method": method,
        "capabilities": CAPS[method],
        "dataset": "breast",
        "parties": 2,
        "metrics": {"accuracy": acc},
        "majority_class_rate": MAJORITY,
        "time": {"train_s": 0.1, "total_s": 0.2, "cpu_s": 0.2},
        "comm": {"bytes_total": 0 if CAPS[method]["data"] != "vertical" else 1000},
        "privacy": priv,
        "config": {"seed": seed, "epsilon": eps if "reported" not in privacy else None},
        "runtime": "inprocess",
        "stats": {},
        "extra": {},
    }


def _records() -> list[dict]:
    out = []
    for seed in (0, 1):
        out += [
            _record("vfl", 0.96, seed),
            _record("local", 0.92, seed),
            _record("centralized", 0.97, seed),
            _record("hdp-vfl", 0.88, seed, 1.0),  # best DP at ε = 1, still below local
            _record("dpsgd-c", 0.48, seed, 1.0),  # pooled DP reference, below the majority
            _record("hdp-vfl", 0.95, seed, 8.0),  # at ε = 8 collaborating pays
            _record("dpsgd-c", 0.60, seed, 8.0),
            # a DP run that asked for no ε: its defaults' ε is huge; never a decision row
            _record("ldp-vfl", 0.99, seed, 2.2e5, reported=True),
        ]
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("floors")
    with (out / "results.jsonl").open("w") as f:
        for r in _records():
            f.write(json.dumps(r) + "\n")
    records = read_results(out / "results.jsonl")
    render_report(records, out, title="floors")
    return out, records


def test_no_decision_row_at_an_unstated_epsilon(rendered):
    _, records = rendered
    _, rows = summary_rows(records)
    assert {r[1] for r in rows} == {
        "ε = 1 (sample)",
        "ε = 8 (sample)",
        "no ε: none",
        "no ε: nothing shared",
    }
    assert not any("ldp-vfl" in cell for r in rows for cell in r)  # 0.99, yet never picked
    _, cost = cost_rows(records)  # it stays listed with its costs
    assert any(r[1] == "ldp-vfl" and r[3].startswith("ε not asked") for r in cost)


def test_majority_and_holder_alone_are_stated_and_every_low_cell_marked(rendered):
    out, records = rendered
    fl = floors(settings(records))["breast"]
    assert fl.majority == pytest.approx(MAJORITY) and fl.alone.label == "local"
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text(encoding="utf-8")
    for text in (md, page):
        assert f"majority class {MAJORITY:.3f}" in text and "label holder alone local 0.920" in text
    header, cost = cost_rows(records)
    metric = header.index("metric")
    for row in cost:
        score = float(re.search(r"accuracy ([0-9.]+)", row[metric]).group(1))
        if score <= MAJORITY:
            assert "✗ at or below the majority class (0.628)" in row[metric], row
        elif score < 0.92 and row[1] != "local":
            assert "↓ below the label holder alone (0.920)" in row[metric], row
        else:
            assert "✗" not in row[metric] and "↓" not in row[metric], row
    # report.md's own table marks the same cells
    assert re.search(r"\| dpsgd-c \|.*0\.4800 ± 0\.0000 ✗ at or below the majority", md)
    assert re.search(r"\| hdp-vfl \|.*0\.8800 ± 0\.0000 ↓ below the label holder alone", md)


def test_one_sentence_per_epsilon_either_way(rendered):
    out, records = rendered
    found = verdicts(records)
    assert len(found) == 2 and found[0].startswith("breast, ε = 1 (sample): collaborating does")
    assert "hdp-vfl (0.880)" in found[0] and "local (0.920)" in found[0]
    assert found[1].startswith("breast, ε = 8 (sample): collaborating pays: hdp-vfl at ε = 8 ")
    assert "+3.0 points over the label holder alone" in found[1]
    md = (out / "report.md").read_text()
    assert all(v in md for v in found)
    _, rows = summary_rows(records)  # the pooled DP reference says it is DP, at its ε
    ref = next(r[6] for r in rows if r[1] == "ε = 1 (sample)")
    assert ref.startswith("dpsgd-c [DP, ε = 1 sample]")


def test_every_accuracy_plot_draws_both_floors(rendered, monkeypatch, tmp_path):
    _, records = rendered
    drawn: list[list[str]] = []
    real = matplotlib.axes.Axes.axhline

    def spy(self, y=0, *args, **kw):
        line = real(self, y, *args, **kw)
        drawn[-1].append(f"{kw.get('label', '')}@{y:.3f}")
        return line

    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", spy)
    real_subplots = matplotlib.pyplot.subplots

    def subplots(*a, **kw):
        drawn.append([])
        return real_subplots(*a, **kw)

    monkeypatch.setattr(matplotlib.pyplot, "subplots", subplots)
    plots = plot_metric_vs_epsilon(records, tmp_path)
    ss = settings(records)
    plots += accuracy_vs_epsilon(ss) + accuracy_vs_cost(ss, "time") + accuracy_vs_cost(ss, "bytes")
    assert len(drawn) == len(plots) == 4
    for lines in drawn:
        assert any(x.endswith(f"@{MAJORITY:.3f}") for x in lines), lines
        assert any(x.endswith("@0.920") for x in lines), lines


def test_a_constant_predictor_is_never_the_most_accurate():
    """A warned run, or an AUC within noise of 0.5, is passed over even when its accuracy is
    the highest of its row (it answers the majority class: no model)."""
    from bench.method_choice import choices

    recs = []
    for seed in (0, 1):
        recs += [_record("local", 0.92, seed), _record("hdp-vfl", 0.90, seed, 8.0)]
        flat = _record("ldp-vfl", 0.95, seed, 8.0)
        flat["metrics"]["auc"], flat["n_test"] = 0.51, 114  # within 2 null SEs of 0.5
        warned = _record("dpsgd-c", 0.96, seed, 8.0)
        warned["capabilities"] = CAPS["hdp-vfl"]  # a VFL option, not a pooled reference
        warned["method"] = "afe-vfl"
        warned["stats"] = {"warnings": ["the head did not beat the class shares"]}
        recs += [flat, warned]
    row = next(c for c in choices(recs) if c.row == "ε = 8 (sample)")
    assert row.best.label == "hdp-vfl"
    said = verdicts(recs)
    assert said == [
        "breast, ε = 8 (sample): collaborating does not pay: the most accurate DP option, "
        "hdp-vfl (0.900), loses to the label holder alone, local (0.920); at this ε train on "
        "the label holder's columns alone."
    ]


def test_the_floor_is_the_label_holders_pick_on_training_rows():
    """``local --model best`` is the floor even where another local run scored higher on the
    test rows (choosing on test rows would flatter the floor's choice)."""
    recs = []
    for seed in (0, 1):
        best = _record("local", 0.90, seed)
        best["config"]["model"] = "best"
        lucky = _record("local", 0.93, seed)
        lucky["config"]["model"] = "gbdt"
        recs += [best, lucky, _record("hdp-vfl", 0.91, seed, 8.0)]
    fl = floors(settings(recs))["breast"]
    assert fl.validated and fl.alone.score == pytest.approx(0.90)
    assert "chosen on its training rows" in fl.lines("breast")
    assert verdicts(recs)[0].startswith(
        "breast, ε = 8 (sample): collaborating pays: hdp-vfl at ε = 8 gives +1.0 points"
    )
