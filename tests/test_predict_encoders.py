"""A model trained on CSVs with categories and blank cells scores new rows of such CSVs: each
party's encoder (categories, the missing-value rule and its indicator columns, scaling, column
order) is saved with its part of the model and applied by predict; the rules for new rows
(docs/predict.md) hold, and a saved encoder is checked when loaded."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import securevfl
from bench.cli import main
from securevfl.data import load_dataset
from securevfl.data.alignment import align_tables, read_party_csv
from securevfl.data.csv_columns import encode_rows
from securevfl.errors import DataError
from securevfl.runtime import InProcessRuntime
from tests._csv_pair import csv_args, write_csv_pair

ID = "customer_id"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A vfl model trained (and saved) on the bank/insurer pair: (model dir, bank, insurer)."""
    root = tmp_path_factory.mktemp("enc")
    bank, insurer, cats = write_csv_pair(root)
    out = root / "model"
    argv = ["run", "vfl", *csv_args(bank, insurer, cats), "--seed", "1", "--epochs", "2"]
    assert main([*argv, "--save", str(out)]) == 0
    return out, bank, insurer


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _write(path: Path, rows: list[dict[str, str]], columns: list[str]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows([r.get(c, "") for c in columns] for r in rows)
    return path


def _new_rows(tmp_path: Path) -> tuple[Path, Path]:
    bank, insurer, _ = write_csv_pair(tmp_path, n=60, seed=5, prefix="new_", label=False)
    return bank, insurer


def test_predict_scores_new_rows_of_a_model_trained_with_categories_and_blanks(
    trained, tmp_path, capsys
):
    """The issue's reproduction: it failed with "must be numeric: could not convert string to
    float: 'retired'" and refused every blank."""
    model_dir, _, _ = trained
    bank, insurer = _new_rows(tmp_path)
    out = tmp_path / "scores.csv"
    argv = ["predict", "--model", str(model_dir), "--dataset", f"csv:{bank},{insurer}"]
    rc = main([*argv, "--id-column", ID, "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    common = {r[ID] for r in _rows(bank)} & {r[ID] for r in _rows(insurer)}
    scored = _rows(out)
    assert sorted(r["id"] for r in scored) == sorted(common)
    assert all(0.0 <= float(r["score"]) <= 1.0 for r in scored)
    assert {r["class"] for r in scored} <= {"0", "1"}
    assert json.loads(captured.out)["warnings"] == []  # nothing the rules had to change


def test_saved_encoders_prepare_training_rows_exactly_as_training_did(trained):
    """The training files through the saved encoders and scaling equal the table trained on."""
    model_dir, bank, insurer = trained
    model = securevfl.load_model(model_dir)
    ds = load_dataset(model.card["settings"]["dataset"], seed=0)  # registered by the run
    tables = {k: read_party_csv(p, ID, k) for k, p in enumerate((bank, insurer))}
    kept, _ = align_tables(InProcessRuntime(2), tables, workers=1)
    for k, t in kept.items():
        header = [h for h in t.header if h != ID]
        rows = [r[: t.id_index] + r[t.id_index + 1 :] for r in t.rows]
        enc = encode_rows(k, "train", model.rules(k), header, rows)
        got = model.prepare(k, enc.block) * np.sqrt(model.bound_sq)
        np.testing.assert_allclose(got, ds.X[:, model.columns(k)["indices"]], atol=1e-12, rtol=0)
    assert model.columns(0)["names"] == [
        "income",
        "income_missing",
        "job=employed",
        "job=retired",
        "job=student",
        "job_missing",
    ]


def test_new_rows_follow_the_stated_rules(trained, tmp_path):
    model_dir, _, _ = trained
    model = securevfl.load_model(model_dir)
    bank, insurer = _new_rows(tmp_path)
    base = model.predict_csv([bank, insurer], ID)
    rows = _rows(bank)
    # reordered columns and an extra one: matched by name, the extra named in a warning
    moved = _write(tmp_path / "moved.csv", rows, ["job", "note", ID, "income"])
    got = model.predict_csv([moved, insurer], ID)
    np.testing.assert_array_equal(got.scores, base.scores)
    assert any("'note'" in w and "ignored" in w for w in got.record["warnings"])
    # an unseen category: all zeros of its group (no indicator), counted in a warning
    rules = model.rules(0)
    enc = encode_rows(0, "x", rules, ["income", "job"], [["50", "astronaut"], ["50", ""]])
    names = model.columns(0)["names"]
    job = [names.index(f"job={c}") for c in ("employed", "retired", "student")]
    assert enc.block[:, job].tolist() == [[0, 0, 0], [0, 0, 0]]
    assert enc.block[:, names.index("job_missing")].tolist() == [0.0, 1.0]  # the blank only
    assert (
        len(enc.warnings) == 1
        and "1 row(s)" in enc.warnings[0]
        and "'astronaut'" in enc.warnings[0]
    )
    # a blank numeric cell: its indicator set, the value the range midpoint (0 once scaled)
    enc = encode_rows(0, "x", rules, ["income", "job"], [["", "retired"]])
    prepared = model.prepare(0, enc.block)[0]
    assert (
        prepared[names.index("income")] == 0.0 and enc.block[0, names.index("income_missing")] == 1
    )
    # a blank where training had none (claims): imputed as in training, counted in a warning
    enc = encode_rows(1, "x", model.rules(1), ["claims", "age"], [["", "40"], ["3", "40"]])
    assert model.prepare(1, enc.block)[0, 0] == 0.0
    assert len(enc.warnings) == 1 and "'claims'" in enc.warnings[0]
    assert "no indicator" in enc.warnings[0]
    # a column named twice: matching by name would be ambiguous
    with pytest.raises(DataError, match="must name each column once, got 'age' twice"):
        encode_rows(1, "x", model.rules(1), ["claims", "age", "age"], [["1", "40", "41"]])


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda r: r.pop("job"), "must have the model's column 'job'"),
        (lambda r: r.update(income="lots"), "column 'income' (bad.csv) must hold finite numbers"),
    ],
    ids=["missing-column", "text-in-numeric"],
)
def test_bad_new_rows_are_one_line_naming_column_and_line(trained, tmp_path, capsys, edit, says):
    model_dir, _, _ = trained
    bank, insurer = _new_rows(tmp_path)
    rows = _rows(bank)
    edit(rows[3])
    columns = [c for c in rows[0] if c in rows[3]]
    if says.startswith("must have"):
        for r in rows:
            r.pop("job", None)
    bad = _write(tmp_path / "bad.csv", rows, columns)
    argv = ["predict", "--model", str(model_dir), "--dataset", f"csv:{bad},{insurer}"]
    rc = main([*argv, "--id-column", ID, "--out", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err
    if "finite" in says:
        assert "'lots' on line 5" in err[0]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda c: c["encoder"][1].update(categories=["employed", "employed", "x"]), "distinct"),
        (lambda c: c["encoder"][1]["categories"].pop(), "become its inputs"),
        (lambda c: c["encoder"][0].update(kind="pickle"), "kind numeric|categorical"),
        (lambda c: c["encoder"][0].update(missing_indicator=False), "become its inputs"),
        (lambda c: c["scaling"].pop(), "columns.scaling"),
        (lambda c: c["center"].__setitem__(0, "x"), "columns.center"),
    ],
    ids=[
        "duplicate-category",
        "fewer-categories",
        "unknown-kind",
        "indicator-dropped",
        "scaling",
        "center",
    ],
)
def test_a_tampered_encoder_is_refused_when_loaded(trained, tmp_path, capsys, edit, says):
    model_dir, _, _ = trained
    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    card = bad / "party_0" / "card.json"
    doc = json.loads(card.read_text())
    edit(doc["columns"])
    card.write_text(json.dumps(doc))
    rc = main(["predict", "--model", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0] and "card.json" in err[0], err


def test_a_checkpoint_resumes_only_on_the_same_csv_encoding(tmp_path):
    """A checkpoint keeps a digest of the CSV's encoders and scaling: the same paths holding
    other rows (here one more age range: the same column count, so no shape check notices)
    are refused."""
    from securevfl.errors import ConfigError
    from securevfl.model.checkpoint import make_checkpoints
    from securevfl.run_options import build_spec

    bank, insurer, cats = write_csv_pair(tmp_path, n=200)
    given = {
        "method": "vfl",
        "dataset": f"csv:{bank},{insurer}",
        "id_column": ID,
        "label_column": "default_12m",
        "categories": str(cats),
        "epochs": 2,
        "seed": 3,
    }
    ck = tmp_path / "ck"

    def run(**how):  # a fresh spec each time, as each command builds its own
        spec = build_spec(given)
        return securevfl.run_experiment(spec, checkpoints=make_checkpoints(spec, **how))

    first = run(every=1, directory=str(ck), resume=None)
    again = run(every=None, directory=None, resume=str(ck))
    assert again["model_fingerprint"] == first["model_fingerprint"]
    rows = _rows(insurer)
    rows[0]["age"] = "150"  # the same columns, another scaling range of age: refused too
    _write(insurer, rows, ["customer_id", "claims", "age"])
    with pytest.raises(ConfigError, match="same CSV encoding"):
        run(every=None, directory=None, resume=str(ck))


@pytest.mark.networked
def test_predict_processes_apply_each_partys_encoder_as_in_process(trained, tmp_path, capsys):
    """One process per party, each with only its own part and file: the same scores as in one
    process; each party's own warning (an extra column of the insurer's) is printed."""
    model_dir, _, _ = trained
    bank, insurer = _new_rows(tmp_path)
    moved = _write(tmp_path / "moved.csv", _rows(insurer), ["age", "note", ID, "claims"])
    base = ["predict", "--model", str(model_dir), "--dataset", f"csv:{bank},{moved}"]
    base += ["--id-column", ID]
    outs = [tmp_path / "inprocess.csv", tmp_path / "processes.csv"]
    assert main([*base, "--out", str(outs[0])]) == 0
    capsys.readouterr()
    assert main([*base, "--out", str(outs[1]), "--processes", "--timeout", "60"]) == 0
    err = capsys.readouterr().err
    assert "party 1: columns ['note'] are not the model's: ignored" in err
    assert outs[0].read_text() == outs[1].read_text()
