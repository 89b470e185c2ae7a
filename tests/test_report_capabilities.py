"""report.html by capability (issue 28): the default suite's report (its vfl, local and hdp-vfl
cells, seed 0, 2 epochs: the same code path as `make bench`, in seconds) has five sections in
order, which method at which ε first, each with its plot and a one-sentence reading."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench import report_sections
from bench.report import render_report
from bench.report_sections import SECTIONS, attacks_section
from bench.runner import read_results, run_suite, succeeded
from bench.suite_filter import Filters, filter_suite
from bench.suites import load_suite
from tests._built_once import built_once

ORDER = ["choice", "utility", "privacy", "cost", "attacks"]


class Sections(HTMLParser):
    """Per <h2 id=...> section: its images and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self.images: dict[str, int] = {}
        self.text: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h2":
            self.order.append(a.get("id", ""))
            self.images[self.order[-1]] = 0
            self.text[self.order[-1]] = ""
        elif tag == "img" and self.order and a.get("src", "").startswith("data:image/png;base64,"):
            self.images[self.order[-1]] += 1

    def handle_data(self, data):
        if self.order:
            self.text[self.order[-1]] += data


@pytest.fixture(scope="module")
def default_report(tmp_path_factory) -> tuple[Path, list[dict]]:
    def build(out: Path) -> None:
        suite = filter_suite(
            load_suite("default"), Filters(methods=("vfl", "local", "hdp-vfl"), seeds=(0,))
        )
        short = [dataclasses.replace(c.spec, epochs=2) for c in suite.cells]
        cells = [dataclasses.replace(c, spec=s) for c, s in zip(suite.cells, short, strict=True)]
        suite = dataclasses.replace(suite, cells=cells)
        ran, _, errors = run_suite(suite, out, progress=False)
        assert ran == len(cells) and not errors
        records = succeeded(read_results(out / "results.jsonl"))
        render_report(records, out, title="default", extras=suite.extras)

    out = built_once(tmp_path_factory, "default-report", build)
    return out, succeeded(read_results(out / "results.jsonl"))


def _parsed(out: Path) -> Sections:
    page = Sections()
    page.feed((out / "report.html").read_text())
    return page


def test_five_capability_sections_in_order_decision_first(default_report):
    out, _ = default_report
    page = _parsed(out)
    assert [s for s in page.order if s in ORDER] == ORDER
    assert page.order[0] == "choice"  # the decision before everything else
    for key in ORDER[:4]:
        assert page.images[key] >= 1, key  # each with its plot
        assert "Reading:" in page.text[key], key
    assert "ran no attack" in page.text["attacks"]  # the default suite has no attack cells
    assert re.search(r"\d+ of \d+ DP settings report an ε at or below", page.text["privacy"])
    assert "Training took" in page.text["cost"] and "hdp-vfl" in page.text["cost"]


def test_the_utility_reading_states_the_measured_accuracies(default_report):
    out, records = default_report
    text = _parsed(out).text["utility"]
    top = max(r["config"]["epsilon"] for r in records if r["method"] == "hdp-vfl")
    hdp = [r for r in records if r["method"] == "hdp-vfl" and r["config"]["epsilon"] == top]
    best = max(r["metrics"]["accuracy"] for r in hdp)  # one seed: the mean is the run's
    # the reading names the smallest and the largest ε, each against the floor, not another ε
    assert f"at ε = {top:g} hdp-vfl {best:.3f}" in text
    assert "vs the label holder" in text


def test_an_audit_renderer_joins_the_privacy_section(default_report, monkeypatch):
    out, records = default_report
    hook = lambda recs: [f"<h3>Audits</h3><p>audited {len(recs)} runs</p>"]  # noqa: E731
    monkeypatch.setattr(
        report_sections, "PRIVACY_RENDERERS", [*report_sections.PRIVACY_RENDERERS, hook]
    )
    render_report(records, out / "hooked", title="hooked")
    page = _parsed(out / "hooked")
    assert f"audited {len(records)} runs" in page.text["privacy"]
    assert "audited" not in page.text["cost"]


def test_attack_records_get_a_plot_and_a_reading():
    recs = [
        {"attack": "label-norm", "method": "vfl", "metrics": {"auc": 0.95}, "target_epsilon": None},
        {"attack": "label-norm", "method": "hdp-vfl", "metrics": {"auc": 0.5}, "target_epsilon": 1},
    ]
    parts = "".join(attacks_section(recs))
    assert parts.count("data:image/png;base64,") == 1
    assert "label-norm on vfl: performance 0.90" in parts


def test_sections_are_declared_once_each():
    assert [key for key, _, _ in SECTIONS] == ORDER


def test_the_decision_says_for_every_dp_row_whether_collaborating_pays(default_report):
    """Issue 43: one sentence per dataset, ε and unit, either way, held against the label
    holder's floor chosen on its training rows (``local --model best`` is in the suite)."""
    from bench.choice_tables import summary_rows
    from bench.floors import floors, verdicts
    from bench.method_choice import settings

    out, records = default_report
    text = _parsed(out).text["choice"]
    assert floors(settings(records))["breast"].validated
    dp_rows = [r[1] for r in summary_rows(records)[1] if r[1].startswith("ε = ")]
    said = verdicts(records)
    assert dp_rows and len(said) == len(dp_rows)
    for row, sentence in zip(dp_rows, said, strict=True):
        assert sentence.startswith(f"breast, {row}: collaborating ")
        assert ("collaborating pays: " in sentence) != ("does not pay" in sentence)
        assert sentence in text
