"""End-to-end CLI: one JSON record, clear one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from bench.cli import main


def test_run_json_prints_exactly_one_record(capsys):
    assert (
        main(["run", "vfl", "--dataset", "breast", "--epochs", "2", "--seed", "0", "--json"]) == 0
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    rec = json.loads(out[0])
    for key in (
        "method",
        "dataset",
        "parties",
        "n_train",
        "n_test",
        "n_features",
        "metrics",
        "time",
        "comm",
        "privacy",
        "config",
    ):
        assert key in rec
    assert set(rec["time"]) >= {"train_s", "total_s"}
    assert set(rec["comm"]) >= {"bytes_total", "bytes_by_party", "messages", "rounds"}
    assert rec["privacy"] is None and 0.5 < rec["metrics"]["accuracy"] <= 1


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "nope"], "unknown method 'nope'"),
        (["run", "vfl", "--dataset", "nope"], "unknown dataset 'nope'"),
        (["run", "vfl", "--parties", "1"], "parties must be >= 2, got 1"),
        (["run", "vfl", "--parties", "99"], "parties must be <="),
        (["run", "vfl", "--batch-size", "0"], "batch_size must be >= 1, got 0"),
        (["run", "vfl", "--epsilon", "-1"], "epsilon must be >= 1e-06, got -1.0"),
        (["run", "vfl", "--delta", "1.5"], "delta must be < 1, got 1.5"),
        (["run", "vfl", "--epochs", "x"], "epochs must be an integer in [1, 100000], got 'x'"),
        (["bench", "--suite", "nope"], "suite must be one of"),
        (["run", "fm-vfl", "--epsilon", "1", "--intercept", "maybe"], "must be true or false"),
        (["run", "vfl", "--b", "64"], "option --b does not apply to method 'vfl'"),
        (["run", "vfl", "--epsilon", "1"], "epsilon does not apply to method 'vfl'"),
        (["run", "hdp-vfl", "--epsilon", "1e308"], "epsilon must be <= 1e+06, got 1e+308"),
        (["run", "dpsgd-c", "--epsilon", "1", "--clip", "nan"], "clip must be finite"),
        (["run", "fm-central", "--epsilon", "1", "--ridge", "-2"], "ridge must be >= 0"),
        (["run", "ldp-vfl", "--beta", "1e-300"], "beta must be >= 0.000244141"),
        (["run", "vfl", "--model", "mlp", "--lr", "1e300"], "lr must be <= 100"),
        # a party checks its spec and addresses before it connects (no wait for peers)
        (["party", "vfl", "--index", "0", "-P", "127.0.0.1:20001"], "once per party"),
        (["party", "vfl", "--epochs", "0", "--index", "0", "-P", "127.0.0.1:20001"], "epochs"),
        (["demo", "shamir", "--noise", "nan"], "noise must be a finite Laplace scale"),
        (["demo", "shamir", "--noise", "-1"], "noise must be a finite Laplace scale"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_argparse_errors_exit_2_without_traceback():
    p = subprocess.run([sys.executable, "-m", "bench.cli", "run"], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_datasets_and_methods_listing(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "breast" in out and "adult" in out
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "vfl" in out and "centralized" in out and "local" in out
