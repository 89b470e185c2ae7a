"""`securevfl bench` filters and --quick, and --help's choices and real defaults (issue 32)."""

from __future__ import annotations

import pytest

from bench.cli import build_parser, main
from bench.suite_filter import Filters, filter_suite, parse_filters, quick
from bench.suites import load_suite


def test_filters_keep_the_asked_cells_and_the_reference_points():
    suite = load_suite("compare")
    f = parse_filters(None, "breast", "1,8", "0")
    cells = filter_suite(suite, f).cells
    assert {c.spec.dataset for c in cells} == {"breast"} and {c.spec.seed for c in cells} == {0}
    assert {c.spec.epsilon for c in cells} == {None, 1.0, 8.0}
    dp = {(c.spec.method, c.spec.epsilon) for c in cells if c.spec.epsilon is not None}
    assert len(dp) == 20  # 10 DP methods (fm-central, vafl-dp, opacus-dpsgd, secureboost-dp) x 2 ε
    assert {"vfl", "local", "centralized", "he-vfl"} <= {c.spec.method for c in cells}
    assert {c.cell_id for c in cells} <= {c.cell_id for c in suite.cells}  # same ids: reused
    only = filter_suite(suite, parse_filters("hdp-vfl", "breast", "1,8", "0")).cells
    assert [(c.spec.method, c.spec.epsilon) for c in only] == [("hdp-vfl", 1.0), ("hdp-vfl", 8.0)]


def test_quick_is_one_dataset_one_seed_two_epsilons_and_explicit_filters_win():
    suite = load_suite("compare")
    f = quick(suite, Filters())
    assert f == Filters(datasets=("breast",), epsilons=(1.0, 8.0), seeds=(0,))
    assert quick(suite, Filters(datasets=("adult",))).datasets == ("adult",)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--datasets", "brest"], "--datasets must name values of the suite"),
        (["--epsilons", "3"], "got '3'"),
        (["--epsilons", "x"], "--epsilons must list numbers"),
        (["--seeds", "-1"], "--seeds must list integers >= 0"),
        (["--methods", ","], "--methods must be a comma-separated list"),
    ],
)
def test_bad_filters_are_one_line(argv, needle, capsys, tmp_path):
    assert main(["bench", "--suite", "compare", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing ran


def _help(method: str | None) -> str:
    p = build_parser(method)
    sub = next(a for a in p._actions if a.dest == "command")
    return sub.choices["run"].format_help()


def test_help_lists_every_choice_and_the_methods_real_defaults(monkeypatch):
    monkeypatch.setenv("COLUMNS", "4000")  # no wrapping inside a phrase
    text = " ".join(_help("hdp-vfl").split())  # argparse wraps lines
    assert "GLM loss [one of" in text and "least-squares" in text and "logistic" in text
    assert "GLM penalty [one of elastic-net, l1, l2, none; default l2]" in text
    assert "default 1e-05 (hdp-vfl's own)" in text  # δ, not 'none'
    assert "default 10000000 (hdp-vfl's own)" in text  # its full batch, not 64
    assert "[default on, hdp-vfl's own]" in text  # --center
    assert "one of auto, clipped, free, none (or true/false); default auto" in text
    assert "_hdp_intercept" not in text
    pbm = " ".join(_help("pbm-vfl").split())
    assert (
        "default 1e-05 (pbm-vfl's own)" in pbm
        and "[one of glm, mlp, cnn, gbdt, best; default mlp]" in pbm
    )
    assert "minibatch size [integer in [1, 10000000]; default 1024 (dpsgd-c's own)]" in " ".join(
        _help("dpsgd-c").split()
    )


def test_jobs_run_cells_in_workers_with_the_same_results(tmp_path):
    from bench.runner import read_results, run_suite

    suite_file = tmp_path / "two.toml"
    suite_file.write_text(
        'name = "two"\nseeds = [0]\n[defaults]\ndataset = "breast"\nepochs = 2\n'
        '[[cells]]\nmethod = ["vfl", "local"]\n'
    )
    suite = load_suite(str(suite_file))
    assert run_suite(suite, tmp_path / "seq", progress=False) == (2, 0, [])
    assert run_suite(suite, tmp_path / "par", progress=False, jobs=2) == (2, 0, [])
    seq = {r["cell_id"]: r for r in read_results(tmp_path / "seq" / "results.jsonl")}
    par = {r["cell_id"]: r for r in read_results(tmp_path / "par" / "results.jsonl")}
    assert seq.keys() == par.keys()
    for key, r in par.items():
        assert r["bench_jobs"] == 2 and "bench_jobs" not in seq[key]
        assert r["metrics"] == seq[key]["metrics"]
        assert r["model_fingerprint"] == seq[key]["model_fingerprint"]


def test_the_default_suite_has_epsilon_8_beside_1():
    eps = {c.spec.epsilon for c in load_suite("default").cells}
    assert {1.0, 8.0} <= eps
