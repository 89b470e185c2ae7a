"""Bring-your-own per-party data: validation errors and an end-to-end run from CSV files."""

import numpy as np
import pytest

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.data.custom import register_party_arrays
from securevfl.errors import DataError
from securevfl.experiment import run_experiment
from securevfl.registry import _REGISTRIES


@pytest.fixture(autouse=True)
def _forget_user_datasets():
    """User datasets registered here must not leak into the catalogue other tests check."""
    before = set(_REGISTRIES.get("dataset", {}))
    yield
    for name in set(_REGISTRIES.get("dataset", {})) - before:
        del _REGISTRIES["dataset"][name]


def _write(path, header, rows):
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")


def test_parties_with_different_row_counts_are_rejected():
    y = np.array([0, 1] * 5)
    with pytest.raises(DataError, match="party 1 has 9 rows, the labels have 10"):
        register_party_arrays("t-rows", [np.ones((10, 2)), np.ones((9, 2))], y, task="binary")


def test_nan_and_inf_are_rejected_with_their_place():
    a = np.ones((4, 2))
    a[2, 1] = np.inf
    with pytest.raises(
        DataError, match="party 1's data must be finite, got inf at row 2, column 1"
    ):
        register_party_arrays("t-inf", [np.ones((4, 1)), a], np.array([0, 1, 0, 1]), task="binary")


def test_csv_parties_run_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] + X[:, 2] > 0).astype(int)
    p0, p1 = tmp_path / "a.csv", tmp_path / "b.csv"
    _write(p0, ["f0", "f1", "label"], np.column_stack([X[:, :2], y]).tolist())
    _write(p1, ["g0", "g1"], X[:, 2:].tolist())
    rec = run_experiment(RunSpec(method="vfl", dataset=f"csv:{p0},{p1}", epochs=30, seed=0))
    assert rec["features_per_party"] == [2, 2] and rec["n_train"] + rec["n_test"] == 200
    assert rec["metrics"]["accuracy"] > 0.85


def test_csv_errors_reach_the_cli_as_one_line(tmp_path, capsys):
    p0, p1 = tmp_path / "a.csv", tmp_path / "b.csv"
    _write(p0, ["f0", "label"], [[1, 0], [2, 1], [3, 0]])
    _write(p1, ["g0"], [[1], [2]])
    assert main(["run", "vfl", "--dataset", f"csv:{p0},{p1}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "party 1 has 2 rows, the labels have 3" in err and len(err.splitlines()) == 1
    _write(p1, ["g0"], [[1], [2], [3]])
    _write(p0, ["f0", "y"], [[1, 0], [2, 1], [3, 0]])
    assert main(["run", "vfl", "--dataset", f"csv:{p0},{p1}"]) == 2
    assert "must have a 'label' column" in capsys.readouterr().err
