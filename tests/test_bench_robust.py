"""Bench robustness: malformed suites, the output lock, torn lines, failed cells retried."""

import os
from pathlib import Path

import pytest

from bench.cli import main
from bench.results_file import OutputLock, append_record, cut_torn_tail, read_results
from bench.runner import failure_of, run_suite
from bench.suites import load_suite
from securevfl.errors import ConfigError, DataError

GOOD = 'name = "t"\nseeds = [0]\n[defaults]\ndataset = "breast"\nepochs = 1\n'


def _suite(tmp_path: Path, text: str, name: str = "s") -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, needle",
    [
        ("seeds = 5\n[[cells]]\nmethod = 'vfl'\n", "must be a non-empty list of integers"),
        ('seeds = ["a"]\n[[cells]]\nmethod = "vfl"\n', "must be a non-empty list of integers"),
        ('cells = "vfl"\n', "cells in suite file"),
        ("defaults = 3\n[[cells]]\nmethod = 'vfl'\n", "defaults in suite file"),
        ('[[cells]]\nmethod = "vfl"\nepsilon = "x"\n', "epsilon"),
        ('[[cells]]\nmethod = "vfl"\nepochs = 1.5\n', "epochs must be an integer"),
        ('[[cells]]\nmethod = "vfl"\n[report]\nextras = ["nosuch"]\n', "report extras"),
        ('[[cells]]\nmethod = "vfl"\nseeds = []\n', "must be a non-empty list of integers"),
        ('[[cellz]]\nmethod = "vfl"\n', "at least one cell"),
    ],
)
def test_malformed_suite_is_one_config_error(tmp_path, text, needle):
    with pytest.raises(ConfigError, match=None) as exc:
        load_suite(str(_suite(tmp_path, text)))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_bad_fragment_binary_file_and_directory(tmp_path):
    main_file = _suite(tmp_path, GOOD + '[[cells]]\nmethod = "vfl"\n')
    frag = tmp_path / "s.d"
    frag.mkdir()
    (frag / "x.toml").write_text("[[cells]\nmethod = 1\n")
    with pytest.raises(ConfigError, match="x.toml must be UTF-8 TOML"):
        load_suite(str(main_file))
    (frag / "x.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(ConfigError, match="must be UTF-8 TOML"):
        load_suite(str(main_file))
    (frag / "x.toml").unlink()
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ConfigError, match="must be a regular file"):
        load_suite(str(tmp_path / "dir.toml"))


def test_cli_suite_errors_exit_2_one_line(tmp_path, capsys):
    empty = _suite(tmp_path, GOOD, "empty")
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    good = _suite(tmp_path, GOOD + '[[cells]]\nmethod = "vfl"\n', "good")
    (tmp_path / "d.toml").mkdir()
    for argv, needle in [
        (["--suite", str(empty), "--out", str(tmp_path / "o")], "at least one cell"),
        (["--suite", str(good), "--out", str(a_file)], "--out must be a directory"),
        (["--suite", str(good), "--out", str(a_file), "--render-only"], "--out must be a dir"),
        (["--suite", str(tmp_path / "d.toml")], "must be a regular file"),
    ]:
        assert main(["bench", *argv, "--no-progress"]) == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], lines


def test_torn_last_line_tolerated_and_cut(tmp_path):
    path = tmp_path / "results.jsonl"
    append_record(path, {"cell_id": "a", "metrics": {"accuracy": 0.9}})
    with path.open("a") as f:
        f.write('{"cell_id": "b", "metr')  # a crash mid-write
    assert [r["cell_id"] for r in read_results(path)] == ["a"]
    cut_torn_tail(path)
    append_record(path, {"cell_id": "c"})
    assert [r["cell_id"] for r in read_results(path)] == ["a", "c"]
    path.write_text('{"cell_id": "a"}\nnot json\n{"cell_id": "c"}\n')
    with pytest.raises(DataError, match="line 2 must be one JSON record"):
        read_results(path)


def test_second_runner_on_same_out_refused(tmp_path):
    # flock belongs to an open file description: a second open conflicts even in one process,
    # exactly as a second runner's would; the kernel drops it when the holder dies
    with OutputLock(tmp_path):
        with pytest.raises(
            ConfigError, match=f"in use by another bench runner \\(pid {os.getpid()}"
        ):
            with OutputLock(tmp_path):
                pass
    with OutputLock(tmp_path):  # released on exit
        pass


def test_failed_cells_recorded_then_retried(tmp_path):
    # he-vfl trains logistic regression: on digits (10 classes) its fit refuses, after loading
    text = GOOD + '[[cells]]\nmethod = "he-vfl"\nscheme = "plain"\ndataset = ["breast", "digits"]\n'
    suite = load_suite(str(_suite(tmp_path, text)))
    out = tmp_path / "out"
    ran, skipped, errors = run_suite(suite, out, progress=False)
    records = read_results(out / "results.jsonl")
    failed = [r for r in records if r.get("status") == "failed"]
    assert len(records) == 2 and len(failed) == 1 and len(errors) == 1
    assert "dataset task must be" in failed[0]["error"]
    ran2, skipped2, errors2 = run_suite(suite, out, progress=False)
    assert skipped2 == 1 and len(errors2) == 1  # the good cell is kept, the failed one retried
    assert len(read_results(out / "results.jsonl")) == 3


@pytest.mark.parametrize("value", [float("nan"), None, float("inf")])
def test_non_finite_metric_is_a_failure(value):
    assert "not a finite number" in failure_of({"metrics": {"accuracy": value}})
    assert failure_of({"metrics": {"accuracy": 0.5}}) is None


def test_cell_against_its_method_rules_refused_before_any_run(tmp_path, capsys):
    # vfl takes no ε, so that cell can never run: the suite is refused, nothing is run or written
    text = (
        GOOD
        + '[[cells]]\nmethod = "hdp-vfl"\nepsilon = 1.0\n[[cells]]\nmethod = "vfl"\nepsilon = 1.0\n'
    )
    out = tmp_path / "out"
    assert main(["bench", "--suite", str(_suite(tmp_path, text)), "--out", str(out)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "cell vfl/breast" in err[0] and "epsilon" in err[0], err
    assert not (out / "results.jsonl").exists()


def test_n_beyond_the_dataset_refused_before_any_run(tmp_path, capsys):
    # breast has 569 rows: a 100,000-row subsample can never run (bench pre-check, and run)
    text = GOOD + '[[cells]]\nmethod = "vfl"\nn = [100, 100000]\n'
    out = tmp_path / "out"
    assert main(["bench", "--suite", str(_suite(tmp_path, text)), "--out", str(out)]) == 2
    assert main(["run", "vfl", "--dataset", "breast", "--n", "100000", "--processes"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 2 and all("n must be <= 569 (rows of dataset 'breast')" in e for e in err)
    assert "cell vfl/breast" in err[0] and not (out / "results.jsonl").exists()
