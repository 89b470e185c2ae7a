"""Parquet input (issue 44): the same rows as CSV or as Parquet (typed columns, shards) give
the same encoded blocks and the same model; the CSV rules refuse the same things in both."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from securevfl.context import RunSpec
from securevfl.data import load_dataset
from securevfl.data.custom import register_csv_parties
from securevfl.data.own_csv import OwnFile, open_own_files
from securevfl.errors import ConfigError, DataError
from securevfl.experiment import run_experiment
from securevfl.registry import _REGISTRIES
from securevfl.runtime.inprocess import InProcessRuntime
from tests._csv_pair import write_csv_pair


@pytest.fixture(autouse=True)
def _forget_user_datasets():
    before = set(_REGISTRIES.get("dataset", {}))
    yield
    for name in set(_REGISTRIES.get("dataset", {})) - before:
        del _REGISTRIES["dataset"][name]


def _typed(path):
    """The CSV as a user's Parquet would hold it: typed columns, nulls for blank cells."""
    opts = pacsv.ConvertOptions(null_values=["", "NA"], strings_can_be_null=True)
    return pacsv.read_csv(path, convert_options=opts)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pq")
    bank, insurer, cats = write_csv_pair(root, n=200)
    pq.write_table(_typed(bank), root / "bank.parquet")
    shards = root / "insurer"  # a folder of two shards, read as one table in name order
    shards.mkdir()
    t = _typed(insurer)
    pq.write_table(t.slice(0, 90), shards / "part-0.parquet")
    pq.write_table(t.slice(90), shards / "part-1.parquet")
    return root, bank, insurer, cats, root / "bank.parquet", shards


def test_typed_parquet_columns_are_typed_and_csv_blanks_are_nulls(pair):
    _, _, _, _, bank_pq, shards = pair
    schema = pq.read_schema(bank_pq)
    assert pa.types.is_floating(schema.field("income").type)
    assert pa.types.is_string(schema.field("job").type)
    assert pq.read_table(bank_pq).column("income").null_count > 0
    assert len(list(shards.iterdir())) == 2


def test_csv_and_parquet_give_the_same_blocks_and_the_same_model(pair):
    _, bank, insurer, cats, bank_pq, shards = pair
    opts = {"label_column": "default_12m", "categories": str(cats)}
    recs, tables = [], []
    for dataset in (f"csv:{bank},{insurer}", f"parquet:{bank_pq},{shards}"):
        spec = RunSpec(
            method="vfl",
            dataset=dataset,
            epochs=3,
            seed=0,
            id_column="customer_id",
            dataset_options=dict(opts),
        )
        recs.append(run_experiment(spec))
        tables.append(load_dataset(dataset))
    np.testing.assert_array_equal(tables[0].X, tables[1].X)
    np.testing.assert_array_equal(tables[0].y, tables[1].y)
    assert recs[0]["metrics"] == recs[1]["metrics"]
    assert recs[0]["features_per_party"] == recs[1]["features_per_party"] == [6, 3]
    assert recs[0]["alignment"]["kept"] == recs[1]["alignment"]["kept"]


def test_a_partys_own_parquet_file_is_the_same_block_as_its_csv(pair):
    _, bank, insurer, cats, bank_pq, shards = pair
    blocks = []
    for b, i in ((bank, insurer), (bank_pq, shards)):
        files = {
            0: OwnFile(str(b), label_column="default_12m", categories=str(cats)),
            1: OwnFile(str(i)),
        }
        blocks.append(
            open_own_files(InProcessRuntime(2), files, id_column="customer_id", data_parties=2)
        )
    for k in (0, 1):
        np.testing.assert_array_equal(blocks[0][k].X, blocks[1][k].X)
        assert blocks[0][k].names == blocks[1][k].names
    np.testing.assert_array_equal(blocks[0][0].y, blocks[1][0].y)


def test_parquet_refusals_are_the_csv_rules_in_one_line(tmp_path):
    n = 20
    rng = np.random.default_rng(1)
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"g": rng.normal(size=n)}), good)
    cases = [
        # a text column without its categories (a CSV's text column: the same rule)
        ({"colour": ["red", "blue"] * 10, "label": [0, 1] * 10}, ConfigError, "holds text"),
        # an ID-like first column: distinct, strictly monotone integers
        ({"row": np.arange(n), "label": [0, 1] * 10}, ConfigError, "--id-column row"),
        # a number out of the rules' range
        ({"x": [1e200] + [0.0] * 19, "label": [0, 1] * 10}, DataError, "magnitude at most"),
        # a missing label (a null)
        ({"x": rng.normal(size=n), "label": [None] + [0, 1] * 9 + [1]}, DataError, "no missing"),
    ]
    for cols, err, needle in cases:
        p = tmp_path / "p0.parquet"
        pq.write_table(pa.table(cols), p)
        with pytest.raises(err) as exc:
            register_csv_parties(f"parquet:{p},{good}")
        assert needle in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(DataError, match="no such files"):
        register_csv_parties(f"parquet:{tmp_path / 'none' / '*.parquet'},{good}")


def test_csv_read_by_arrow_keeps_the_text_rules(tmp_path):
    """Cells Arrow would read otherwise (``1_000``, `` 3 ``, ``N/A``, quoted) follow the rules."""
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    rows = ["x,label", "1_000,0", " 3 ,1", "N/A,0", '"2.5",1', "7,0", "-1e3,1"]
    a.write_text("\n".join(rows) + "\n")
    b.write_text("g\n" + "\n".join(str(v / 7) for v in range(6)) + "\n")
    register_csv_parties(f"csv:{a},{b}")
    t = load_dataset(f"csv:{a},{b}")
    # x: 1000, 3, blank, 2.5, 7, -1000 -> its missing indicator is the second column
    assert t.X.shape == (6, 3)
    np.testing.assert_array_equal(t.X[:, 1], [-1, -1, 1, -1, -1, -1])  # scaled 0/1
    assert t.X[0, 0] == 1.0 and t.X[5, 0] == -1.0


def test_align_keeps_a_parquet_sources_rows_as_parquet(pair, tmp_path):
    from securevfl.data.align_files import align_files

    _, bank, insurer, _, bank_pq, shards = pair
    rec = align_files([bank_pq, shards], "customer_id", tmp_path / "out", workers=1)
    ref = align_files([bank, insurer], "customer_id", tmp_path / "ref", workers=1)
    assert rec["kept"] == ref["kept"] and rec["files"][1].endswith("insurer.parquet")
    got = pq.read_table(rec["files"][1])
    want = pacsv.read_csv(
        ref["files"][1],
        convert_options=pacsv.ConvertOptions(column_types={"customer_id": pa.string()}),
    )
    assert got.column("customer_id").to_pylist() == want.column("customer_id").to_pylist()
    assert got.num_rows == rec["kept"]


def test_predict_scores_parquet_rows_as_their_csv(pair, tmp_path):
    from securevfl import load_model

    _, bank, insurer, cats, bank_pq, shards = pair
    spec = RunSpec(
        method="vfl",
        dataset=f"csv:{bank},{insurer}",
        epochs=2,
        seed=0,
        id_column="customer_id",
        dataset_options={"label_column": "default_12m", "categories": str(cats)},
    )
    run_experiment(spec, save=str(tmp_path / "model"))
    model = load_model(str(tmp_path / "model"))
    from_csv = model.predict_csv([bank, insurer], "customer_id")
    from_parquet = model.predict_csv([bank_pq, shards], "customer_id")
    assert list(from_parquet.ids) == list(from_csv.ids)
    np.testing.assert_array_equal(from_parquet.scores, from_csv.scores)
