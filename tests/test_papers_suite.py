"""Suite papers: every paper figure it shows is read against cells the suite runs."""

from pathlib import Path

from bench.reports import papers
from bench.reports.paper_figures import TABLES
from bench.suites import load_suite

ALWAYS_AVAILABLE = {
    "breast", "adult", "cps1988", "diabetes", "phishing", "digits",
    "synthetic-logistic", "synthetic-sparse",
}  # fmt: skip


def _as_record(cell) -> dict:
    s = cell.spec
    rec = {"method": s.method, "dataset": s.dataset, "parties": s.parties, "config": s.to_config()}
    return {**rec, "attack": cell.attack} if cell.attack else rec


def test_every_paper_row_selects_cells_of_the_suite_on_always_available_data():
    suite = load_suite("papers")
    records = [_as_record(c) for c in suite.cells]
    assert {r["dataset"] for r in records} <= ALWAYS_AVAILABLE
    for table in TABLES:
        assert table.source and table.differs, table.table
        for row in table.rows:
            if row.ours is not None:
                assert any(papers.matches(r, row.ours) for r in records), (table.table, row)
                assert row.metric in papers.METRICS
    assert {c.spec.dataset for c in load_suite("papers-fashion").cells} == {"fashion-mnist"}


def test_render_puts_the_paper_figure_beside_ours(tmp_path: Path):
    rec = {
        "method": "fm-vfl",
        "dataset": "adult",
        "parties": 2,
        "config": {"epsilon": 10.0, "center": False, "encoding": "compact"},
        "metrics": {"accuracy": 0.8},
        "time": {"train_s": 1.0},
    }
    text = papers.render([rec, {**rec, "metrics": {"accuracy": 0.82}}], tmp_path)
    line = next(x for x in text.splitlines() if x.startswith("| FM, Adult, ε = 10 |"))
    assert "0.8132 ± 0.0231" in line and "0.810 ± 0.010 (n = 2)" in line
    assert "| FM, Adult, ε = 1 | 0.7315 ± 0.0379 | not in these results |" in text
