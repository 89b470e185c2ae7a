"""Silently wrong results say so; CSV inputs that are not CSVs, and label columns, are judged."""

import json
import math

import numpy as np
import pytest

from bench.cli import main
from securevfl.data.custom import label_task, register_csv_parties
from securevfl.errors import DataError
from securevfl.run.outcome import finite_values, outcome_warnings, strict_json


def test_warnings_name_nan_metric_constant_predictor_and_infinite_epsilon():
    w = outcome_warnings("binary", np.full(5, np.nan), {"accuracy": math.nan}, None)
    assert len(w) == 1 and "accuracy is not a finite number" in w[0]
    w = outcome_warnings("binary", np.full(5, 0.7), {"accuracy": 0.6}, None)
    assert len(w) == 1 and "constant predictor" in w[0] and "class 1" in w[0]
    w = outcome_warnings("multiclass", np.eye(3)[[2, 2, 2]], {"accuracy": 0.3}, None)
    assert "class 2" in w[0]
    w = outcome_warnings("binary", np.array([0.2, 0.8]), {"accuracy": 1.0}, {"epsilon": math.inf})
    assert len(w) == 1 and "privacy epsilon is inf" in w[0]
    assert outcome_warnings("regression", np.array([0.1, 0.2]), {"mse": 0.1}, None) == []
    w = outcome_warnings("binary", np.array([0.2, 0.8]), {"accuracy": 0.34, "auc": 0.45}, None)
    assert len(w) == 1 and "no better than chance" in w[0]
    assert outcome_warnings("binary", np.array([0.2, 0.8]), {"auc": 0.51}, None) == []


def test_strict_json_has_no_nan_tokens():
    rec = {"metrics": {"accuracy": math.nan}, "eps": [math.inf, 1.0], "x": np.float64("nan")}
    text = strict_json(rec)
    assert json.loads(text) == {"metrics": {"accuracy": None}, "eps": [None, 1.0], "x": None}
    assert finite_values({"a": (1.0, -math.inf)}) == {"a": [1.0, None]}


def test_constant_predictor_run_warns_in_record_and_on_stderr(capsys):
    # a learning rate of 1e-12 leaves the GLM at its start (all zero): one class out
    argv = ["run", "vfl", "--lr", "1e-12", "--epochs", "1", "--seed", "0", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    rec = json.loads(out)
    assert any("constant predictor" in w for w in rec["stats"]["warnings"])
    assert "securevfl: warning: constant predictor" in err


@pytest.mark.parametrize(
    "y, task",
    [([0, 1, 1, 0], "binary"), ([0, 1, 2, 1], "multiclass"), ([0.5, 1.0, 2.5], "regression")],
)
def test_label_task_rule(y, task):
    assert label_task(np.array(y, dtype=float)) == task


def test_csv_binary_directory_and_one_class_are_one_line(tmp_path):
    good = tmp_path / "p1.csv"
    good.write_text("c,d\n" + "\n".join(f"{i},{i % 3}" for i in range(10)) + "\n")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    one = tmp_path / "one.csv"
    one.write_text("a,label\n" + "\n".join(f"{i},1" for i in range(10)) + "\n")
    (tmp_path / "d.csv").mkdir()
    for first, needle in [
        (binary, "must be UTF-8 text, got binary data"),
        (tmp_path / "d.csv", "must be a file"),
        (one, "must hold >= 2 distinct values, got 1"),
    ]:
        with pytest.raises(DataError, match=None) as exc:
            register_csv_parties(f"csv:{first},{good}")
        assert needle in str(exc.value) and "\n" not in str(exc.value)
