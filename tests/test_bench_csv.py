"""``securevfl bench`` on CSV data: a ``csv:`` dataset with absolute paths in a suite's
``[defaults]`` runs (fm-vfl/fm-central included), its plots get file-system-safe names, a
rerun skips the finished cells, and ``--datasets`` can name it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.file_names import name_part, plot_file
from bench.runner import run_suite
from bench.suite_filter import filter_suite, parse_filters
from bench.suites import load_suite
from tests._csv_pair import write_csv_pair


@pytest.fixture
def csv_suite(tmp_path) -> tuple[Path, str]:
    """A suite whose [defaults] name the bank/insurer pair by absolute paths: (file, dataset)."""
    bank, insurer, cats = write_csv_pair(tmp_path, n=200)
    dataset = f"csv:{bank.resolve()},{insurer.resolve()}"
    path = tmp_path / "csv.toml"
    path.write_text(
        'name = "csv"\nseeds = [0, 1]\n[defaults]\n'
        f'dataset = {json.dumps(dataset)}\nid_column = "customer_id"\n'
        f'label_column = "default_12m"\ncategories = {json.dumps(str(cats.resolve()))}\n'
        'epochs = 1\n[[cells]]\nmethod = "vfl"\n'
        '[[cells]]\nmethod = "fm-central"\nepsilon = 2.0\n'
    )
    return path, dataset


def _results(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_a_csv_suite_runs_plots_and_skips_finished_cells_on_rerun(csv_suite, tmp_path, capsys):
    suite, dataset = csv_suite
    out = tmp_path / "out"
    argv = ["bench", "--suite", str(suite), "--out", str(out), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "ran 4, skipped 0" in capsys.readouterr().out
    recs = _results(out)
    assert len(recs) == 4 and {r["method"] for r in recs} == {"vfl", "fm-central"}
    assert all(r.get("status") != "failed" for r in recs) and {r["dataset"] for r in recs} == {
        dataset
    }
    plots = sorted(p.name for p in out.glob("*.png"))
    assert plots and all(":" not in p and "," not in p and "/" not in p for p in plots)
    assert plot_file(dataset, "time_per_method") in plots
    report = (out / "report.md").read_text()
    assert all(f"]({p})" in report for p in plots)  # the report shows every plot it wrote
    # the same suite again (a fresh load, as a new command): every cell found done, nothing
    # run, nothing appended (they were run twice: "4/4 runs" for 2 seeds)
    assert run_suite(load_suite(str(suite)), out, progress=False) == (0, 4, [])
    assert _results(out) == recs
    # the dataset's name holds commas: --datasets still names it
    kept = filter_suite(load_suite(str(suite)), parse_filters("vfl", dataset, None, None))
    assert [(c.spec.method, c.spec.dataset) for c in kept.cells] == [("vfl", dataset)] * 2


def test_file_name_parts_are_safe_and_distinct():
    assert (
        name_part("breast") == "breast" and name_part("synthetic-logistic") == "synthetic-logistic"
    )
    a = name_part("csv:/data/x/bank.csv,/data/x/insurer.csv")
    b = name_part("csv:/data/y/bank.csv,/data/y/insurer.csv")
    assert a.startswith("csv-bank-insurer-") and a != b
    assert all(c.isalnum() or c in "._-" for c in a + name_part("../../etc/passwd") + name_part(""))
    assert not name_part("..").startswith(".")


@pytest.mark.slow
def test_a_csv_suite_report_renders_in_a_fresh_process(tmp_path, capsys):
    """The afe and per-row report sections looked the dataset up in the catalogue: a csv:
    dataset (registered only by a run) ended ``--render-only`` with "unknown dataset"."""
    import os
    import subprocess
    import sys

    bank, insurer, cats = write_csv_pair(tmp_path, n=200)
    path = tmp_path / "afe.toml"
    path.write_text(
        'name = "afe"\nseeds = [0]\n[defaults]\n'
        f'dataset = "csv:{bank},{insurer}"\nid_column = "customer_id"\n'
        f'label_column = "default_12m"\ncategories = "{cats}"\nepochs = 1\n'
        '[[cells]]\nmethod = "afe-vfl"\nepsilon = 2.0\n[report]\nextras = ["afe", "per_row"]\n'
    )
    out = tmp_path / "out"
    assert main(["bench", "--suite", str(path), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli", "bench", "--suite", str(path), "--out", str(out)]
        + ["--render-only"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )
    assert done.returncode == 0, done.stderr
    assert "afe-vfl" in (out / "report.md").read_text()
