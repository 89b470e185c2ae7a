"""Hostile inputs at the command line (issue 45): every file error is one line and exit 2.

``--dataset csv:`` with no file, ``align --out`` naming an existing file, ``predict --out`` a
directory, a path whose directory does not exist or a file that cannot be written, a CSV cell
beyond 1e150 in magnitude (its range and square overflow float64).
"""

from pathlib import Path

import pytest

from bench.cli import main


def _one_line(code: int, capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


@pytest.fixture
def csvs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("ID,x,label\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(40)))
    b.write_text("ID,z\n" + "".join(f"{i},{i % 5}\n" for i in range(40)))
    return a, b


def test_an_empty_csv_dataset_is_one_line(capsys):
    _one_line(main(["run", "vfl", "--dataset", "csv:"]), capsys, "must name one CSV per party")


def test_align_out_naming_a_file_is_one_line(csvs, tmp_path, capsys):
    out = tmp_path / "taken.csv"
    out.write_text("x\n")
    argv = ["align", str(csvs[0]), str(csvs[1]), "--id-column", "ID", "--out", str(out)]
    _one_line(main(argv), capsys, "--out must name a directory")
    assert out.read_text() == "x\n"


def test_a_cell_beyond_1e150_is_refused_by_name(csvs, capsys):
    a, b = csvs
    a.write_text(a.read_text().replace("\n3,3,1\n", "\n3,1e308,1\n"))
    argv = ["run", "vfl", "--dataset", f"csv:{a},{b}", "--id-column", "ID", "--epochs", "1"]
    _one_line(main(argv), capsys, "column 'x' (a.csv) must hold numbers of magnitude at most")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("m") / "model"
    assert main(["run", "vfl", "--dataset", "breast", "--model", "glm", "--epochs", "1",
                 "--save", str(out)]) == 0  # fmt: skip
    return out


@pytest.mark.parametrize(
    "where,needle",
    [
        ("dir", "--out must name a file, got the directory"),
        ("missing/x.csv", "--out must be in a directory that exists"),
    ],
)
def test_predict_out_that_cannot_be_written_is_one_line(model, tmp_path, capsys, where, needle):
    out = tmp_path if where == "dir" else tmp_path / where
    capsys.readouterr()
    _one_line(main(["predict", "--model", str(model), "--out", str(out)]), capsys, needle)


def test_a_shuffled_integer_id_column_is_refused_unless_named_a_feature(tmp_path, capsys):
    rng = __import__("numpy").random.default_rng(0)
    ids = rng.permutation(40) + 1000  # distinct, dense, shuffled: the red team's 'customer'
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(
        "customer,x,label\n" + "".join(f"{c},{i % 7},{i % 2}\n" for i, c in enumerate(ids))
    )
    b.write_text("z\n" + "".join(f"{i % 5}\n" for i in range(40)))
    argv = ["run", "vfl", "--dataset", f"csv:{a},{b}", "--epochs", "1", "--model", "glm"]
    _one_line(main(argv), capsys, "first column 'customer' (a.csv) holds distinct integers, dense")
    assert main([*argv, "--feature-column", "customer"]) == 0  # the user says it is a feature
