"""A practitioner's own CSVs (issue 32): a named label column, text columns one-hot encoded
from public categories, blank cells imputed by the stated rule, ID-like columns refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.data.csv_columns import encode_columns
from securevfl.data.preprocess import scale_by_ranges
from securevfl.experiment import run_experiment
from securevfl.registry import _REGISTRIES


@pytest.fixture(autouse=True)
def _forget_user_datasets():
    before = set(_REGISTRIES.get("dataset", {}))
    yield
    for name in set(_REGISTRIES.get("dataset", {})) - before:
        del _REGISTRIES["dataset"][name]


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    X = rng.normal(size=(n, 3))
    colour = rng.choice(["red", "green", "blue"], size=n)
    y = (X[:, 0] + X[:, 2] + 2 * (colour == "red") > 0.5).astype(int)
    a, b, cats = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "cats.json"
    lines = ["f0,colour,f1,target"]
    for i in range(n):
        f0 = "" if i % 10 == 0 else f"{X[i, 0]:.5f}"  # a blank cell every tenth row
        lines.append(f"{f0},{colour[i]},{X[i, 1]:.5f},{'yes' if y[i] else 'no'}")
    a.write_text("\n".join(lines) + "\n")
    b.write_text("g0\n" + "\n".join(f"{v:.5f}" for v in X[:, 2]) + "\n")
    cats.write_text(json.dumps({"colour": ["red", "green", "blue"]}))
    return a, b, cats


def test_text_column_blank_cell_and_target_label_train(files, capsys):
    a, b, cats = files
    spec = RunSpec(
        method="vfl",
        dataset=f"csv:{a},{b}",
        epochs=30,
        seed=0,
        dataset_options={"label_column": "target", "categories": str(cats)},
    )
    rec = run_experiment(spec)
    # f0, its missingness indicator, colour one-hot (3), f1 | g0
    assert rec["features_per_party"] == [6, 1]
    # 60 test rows drawn without looking at the labels: the accuracy moves by ~0.05 with them
    assert rec["metrics"]["accuracy"] > 0.75
    argv = ["run", "vfl", "--dataset", f"csv:{a},{b}", "--label-column", "target"]
    assert main([*argv, "--categories", str(cats), "--seed", "0"]) == 0
    capsys.readouterr()
    # without the categories (public metadata) the text column is refused, not guessed
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'colour'" in err and "--categories" in err


def test_missing_cells_get_a_constant_and_an_indicator_never_a_mean():
    enc = encode_columns(0, "x.csv", ["v"], [["1"], [""], ["9"], ["NA"], ["2"]], {})
    assert enc.names == ["v", "v_missing"] and enc.with_missing == ["v"]
    v, ind = enc.columns
    assert ind.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    # scaled by the column's range [1, 9]: a blank is its midpoint 5 (0), never the mean 4
    scaled = scale_by_ranges(enc.block, [(1.0, 9.0), (0.0, 1.0)])[:, 0]
    assert scaled.tolist() == [-1.0, 0.0, 1.0, 0.0, -0.75]
    # with a declared domain (--bounds), the domain's midpoint: nothing read off the data
    assert scale_by_ranges(enc.block, [(0.0, 100.0), (0.0, 1.0)])[1, 0] == 0.0


@pytest.mark.parametrize(
    ("first", "needle"),
    [
        (lambda i: str(1000 + i), "holds distinct integers, strictly monotone"),
        (lambda i: str((7 * i) % 101), "holds distinct integers, dense"),  # a shuffled ID
        (lambda i: str((37 * i) % 1009), None),  # distinct, sparse, shuffled, a plain name
        (lambda i: f"c{i:04d}", "holds text, a distinct value per row"),
    ],
)
def test_id_like_first_column_is_refused_with_a_hint(tmp_path, capsys, first, needle):
    rng = np.random.default_rng(1)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    y = rng.integers(0, 2, size=100)
    a.write_text(
        "cust,f0,label\n" + "".join(f"{first(i)},{rng.normal():.4f},{y[i]}\n" for i in range(100))
    )
    b.write_text("g0\n" + "".join(f"{rng.normal():.4f}\n" for _ in range(100)))
    rc = main(["run", "vfl", "--dataset", f"csv:{a},{b}", "--epochs", "1"])
    err = capsys.readouterr().err.strip()
    if needle is None:
        assert rc == 0
        return
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert needle in err and "--id-column cust" in err and "Traceback" not in err


def test_bad_categories_and_unknown_values_are_one_line(files, tmp_path, capsys):
    a, b, cats = files
    argv = ["run", "vfl", "--dataset", f"csv:{a},{b}", "--label-column", "target"]
    cats.write_text(json.dumps({"colour": ["red", "green"]}))
    assert main([*argv, "--categories", str(cats)]) == 2
    assert "must hold one of its categories ['red', 'green'], got 'blue'" in capsys.readouterr().err
    cats.write_text("{not json")
    assert main([*argv, "--categories", str(cats)]) == 2
    assert "must be UTF-8 JSON" in capsys.readouterr().err
    assert main(["run", "vfl", "--dataset", "breast", "--label-column", "y"]) == 2
    assert "label_column applies to --dataset csv:... only" in capsys.readouterr().err


def test_a_binary_file_keyed_by_id_is_one_line(files, tmp_path, capsys):
    _, b, _ = files
    junk = tmp_path / "junk.csv"
    junk.write_bytes(bytes(range(128, 256)) * 8)
    assert main(["run", "vfl", "--dataset", f"csv:{junk},{b}", "--id-column", "cid"]) == 2
    err = capsys.readouterr().err.strip()
    assert "must be UTF-8 CSV text" in err and len(err.splitlines()) == 1
