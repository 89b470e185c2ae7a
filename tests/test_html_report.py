"""report.html: built by the runner from real runs, parsed with the standard library's parser."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.md_html import markdown_to_html
from bench.method_choice import choose, settings
from bench.report import render_report
from bench.runner import failure_of, read_results, run_suite, succeeded
from bench.suites import load_suite

SUITE = """
name = "html-test"
seeds = [0]
[defaults]
dataset = "breast"
parties = 2
epochs = 2
[[cells]]
method = ["vfl", "local"]
[[cells]]
method = "hdp-vfl"
epsilon = [1.0, 4.0]
delta = 1e-5
[[cells]]
method = "hdp-vfl"
dataset = "digits"
epsilon = 1.0
delta = 1e-5
"""


class Page(HTMLParser):
    """What a reader sees: images, tables, section ids, and the summary table's rows."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.svgs = 0
        self.tables = 0
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.choice_rows: list[list[str]] = []
        self._in_choice = False
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self.dataset = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "img":
            self.images.append(a.get("src", ""))
        elif tag == "svg":
            self.svgs += 1
        elif tag == "table":
            self.tables += 1
            self._in_choice = a.get("class") == "choice"
        elif tag == "h3" and a.get("class") == "dataset":
            self._heading = []
        elif tag == "tr" and self._in_choice:
            self.choice_rows.append([self.dataset])
        elif tag == "td" and self._in_choice:
            self._cell = []
        elif tag in ("script", "link", "iframe"):
            self.urls.append(f"<{tag}>")

    def handle_data(self, data):
        if self._heading is not None:
            self._heading.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "h3" and self._heading is not None:
            self.dataset, self._heading = "".join(self._heading), None
        elif tag == "td" and self._cell is not None:
            self.choice_rows[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._in_choice = False


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("html")
    suite_file = out / "html-test.toml"
    suite_file.write_text(SUITE)
    ran, _, errors = run_suite(load_suite(str(suite_file)), out, progress=False)
    assert ran == 4 and len(errors) == 1  # hdp-vfl is binary-only: digits fails (as a user's would)
    records = succeeded(read_results(out / "results.jsonl"))
    failed = [r for r in read_results(out / "results.jsonl") if failure_of(r) is not None]
    render_report(records, out, title="html test", failed=failed)
    return out, records


def test_report_html_has_every_plot_and_table_inline(built):
    out, records = built
    md = (out / "report.md").read_text()
    page = Page()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    md_images = re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", md, flags=re.M)
    md_tables = re.findall(r"^\|---", md, flags=re.M)
    # report.md's plots and tables, plus: one ε plot (one dataset, one unit), accuracy vs time
    # and vs bytes, the claims plot; the summary table, the claims table and the cost table
    assert md_images and md_tables
    assert len(page.images) + page.svgs == len(md_images) + 4
    assert page.tables == len(md_tables) + 3
    assert all(src.startswith("data:image/png;base64,") for src in page.images)
    assert not [u for u in page.urls if not u.startswith(("data:", "#"))]  # self-contained
    assert {"choice", "utility", "privacy", "cost", "attacks", "tables"} <= set(page.ids)


def test_summary_names_a_method_per_dataset_and_row(built):
    out, records = built
    page = Page()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    rows = {(r[0], r[1]): r for r in page.choice_rows if len(r) > 1}  # not the header row
    methods = {r["method"] for r in records}
    # hdp-vfl's ε rows (its unit named) and the row of the runs with no guarantee
    assert set(rows) == {
        ("breast", "ε = 1 (party-row)"),
        ("breast", "ε = 4 (party-row)"),
        ("breast", "no ε: none"),
        ("breast", "no ε: nothing shared"),
    }
    for row in rows.values():
        assert row[2].split(" ")[0] in methods
    assert rows[("breast", "ε = 1 (party-row)")][2].startswith("hdp-vfl")
    text = (out / "report.html").read_text(encoding="utf-8")
    assert "Could not run" in text and "<strong>hdp-vfl</strong> on digits at ε = 1" in text


def test_the_cheapest_close_method_is_chosen(built):
    _, records = built
    plain = [s for s in settings(records) if s.unit is None and s.kind == "none"]
    plain += [s for s in settings(records) if s.kind == "nothing shared"]
    best, fastest, fewest = choose(plain)
    assert best.score == max(s.score for s in plain)
    local = next(s for s in plain if s.label.startswith("local"))
    if local.score >= best.score - 0.01:  # local sends nothing: it wins bytes when close
        assert fewest is local
    assert fastest.train_s <= best.train_s


def test_markdown_tables_links_and_missing_plots(tmp_path):
    (tmp_path / "a.png").write_bytes(b"\x89PNG fake")
    md = "# T\n\n| a | b |\n|---|---|\n| x \\| y | `c` |\n\n![a](a.png)\n\n![b](gone.png)\n"
    html = markdown_to_html(md, tmp_path)
    assert "<td>x | y</td>" in html and "<code>c</code>" in html
    assert 'src="data:image/png;base64,' in html
    assert "plot gone.png is missing" in html
    assert "<script" not in markdown_to_html("<script>alert(1)</script>", tmp_path)
