"""A party's table that stays on its Dask engine (issue 44): a ``parquet:`` source with
``--engine dask`` is read block by block on the party's cluster, never whole in its process,
and hdp-vfl trains the same model as on the in-memory path (same seed, reproducible noise)."""

from __future__ import annotations

import numpy as np
import pytest

from securevfl.context import RunSpec
from securevfl.engine import EngineRows
from securevfl.experiment import run_experiment
from securevfl.models.active_refit import refit_active
from securevfl.models.glm import make_loss
from securevfl.registry import create
from securevfl.run.checks import validate_spec
from securevfl.run.views import build_views

ROWS = 1500  # 3 files of 500 rows per party, row groups of 250: 3 blocks a party


@pytest.fixture(scope="module")
def sources(parquet_dataset):
    return parquet_dataset("resident", ROWS, columns=4, group_rows=250, shard_rows=500, seed=5)


def _spec(sources: str, engine: str, address: str | None, **extra) -> RunSpec:
    return RunSpec(
        method="hdp-vfl",
        dataset=sources,
        epsilon=2.0,
        delta=1e-5,
        seed=1,
        reproducible_noise=True,
        epochs=2,
        batch_size=10_000_000,  # one batch per epoch (the CLI's default for hdp-vfl)
        engine=engine,
        dask_scheduler=address if engine == "dask" else None,
        **extra,
    )


def test_the_table_stays_on_the_engine_and_equals_the_in_memory_one(sources, dask_address):
    views = {}
    for engine in ("numpy", "dask"):
        spec = _spec(sources, engine, dask_address)
        views[engine] = build_views(spec, validate_spec(spec), [0, 1])[1]
    for k in (0, 1):
        want, got = views["numpy"][k], views["dask"][k]
        for side in ("X_train", "X_test"):
            lazy = getattr(got, side)
            assert isinstance(lazy, EngineRows)  # positions and a lazy table, no rows here
            assert lazy.table.numblocks == (3, 1) and not isinstance(lazy.table, np.ndarray)
            rows = np.asarray(lazy.engine.client.compute(lazy.table, sync=True))[lazy.rows]
            np.testing.assert_allclose(rows, getattr(want, side), rtol=0, atol=1e-12)
        if k == 0:
            np.testing.assert_array_equal(got.y_train, want.y_train)
        else:
            assert got.y_train is None
    for k in (0, 1):
        views["dask"][k].X_train.engine.close()


def test_blank_cells_and_categories_follow_the_same_rules(tmp_path, dask_address):
    """Blank cells (an indicator column each) and a categorical column with its public
    categories: the blocks on the engine equal the in-memory encoding."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    a = rng.normal(size=600)
    colours = np.array(["red", "green", "blue"], dtype=object)[rng.integers(0, 3, 600)]
    colours[rng.random(600) < 0.05] = None
    for k in (0, 1):
        (tmp_path / f"p{k}").mkdir()
    for s in range(3):  # 3 files of 200 rows
        part = slice(200 * s, 200 * (s + 1))
        first = pa.array(a[part], mask=rng.random(200) < 0.1)
        label = rng.integers(0, 2, 200)
        own = pa.table({"a": first, "b": rng.uniform(0, 5, 200), "label": label})
        pq.write_table(own, tmp_path / "p0" / f"{s}.parquet", row_group_size=100)
        other = pa.table({"c": pa.array(list(colours[part])), "d": rng.uniform(0, 9, 200)})
        pq.write_table(other, tmp_path / "p1" / f"{s}.parquet", row_group_size=100)
    (tmp_path / "cats.json").write_text(json.dumps({"c": ["red", "green", "blue"]}))
    dataset = f"parquet:{tmp_path / 'p0'},{tmp_path / 'p1'}"
    views = {}
    for engine in ("numpy", "dask"):
        spec = _spec(dataset, engine, dask_address)
        spec.dataset_options = {"categories": str(tmp_path / "cats.json")}
        views[engine] = build_views(spec, validate_spec(spec), [0, 1])[1]
    for k, width in ((0, 3), (1, 5)):  # a, a_missing, b | c=red, c=green, c=blue, c_missing, d
        lazy = views["dask"][k].X_train
        rows = np.asarray(lazy.engine.client.compute(lazy.table, sync=True))[lazy.rows]
        assert rows.shape[1] == width
        np.testing.assert_allclose(rows, views["numpy"][k].X_train, rtol=0, atol=1e-12)
        lazy.engine.close()


def _assert_same_saved_model(tmp_path, want: dict, got: dict) -> None:
    """Each party's saved weights under tmp_path/numpy and tmp_path/dask (to float rounding)
    and the two records' metrics are the same."""
    for k in (0, 1):
        files = sorted((tmp_path / "numpy" / f"party_{k}").glob("*.npy"))
        assert files
        for path in files:
            mine = np.load(tmp_path / "dask" / f"party_{k}" / path.name, allow_pickle=False)
            np.testing.assert_allclose(mine, np.load(path), rtol=1e-9, atol=1e-12)
    for name, v in want["metrics"].items():
        assert got["metrics"][name] == pytest.approx(v, abs=1e-9)


def test_hdp_vfl_trains_the_same_model_on_the_engine(sources, dask_address, tmp_path):
    opts = {"options": {"final_fit": "trained"}}
    want = run_experiment(_spec(sources, "numpy", None, **opts), save=str(tmp_path / "numpy"))
    got = run_experiment(_spec(sources, "dask", dask_address, **opts), save=str(tmp_path / "dask"))
    _assert_same_saved_model(tmp_path, want, got)
    assert got["extra"]["sigma_b"] == want["extra"]["sigma_b"]  # the same releases
    assert got["extra"]["engine"]["0"]["engine"] == "dask"


def test_the_refit_through_products_equals_the_refit_on_rows():
    rng = np.random.default_rng(2)
    X, passive = rng.uniform(-1, 1, (400, 3)), rng.normal(size=(400, 1))
    y = np.where(X @ [1.0, -0.5, 0.2] + 0.3 * passive[:, 0] > 0, 1.0, -1.0)
    loss = make_loss("logistic")
    want = refit_active(loss, X, passive, y)
    got = refit_active(loss, (lambda w: X @ w, lambda g: X.T @ g, 3), passive, y)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_an_id_column_on_the_engine_is_one_line(sources):
    spec = _spec(sources, "dask", None)
    spec.id_column = "id"
    with pytest.raises(Exception, match="--id-column with --engine dask"):
        validate_spec(spec)
    assert create("method", "hdp-vfl").name == "hdp-vfl"


def test_products_on_the_engine_equal_numpy_block_by_block(dask_address, monkeypatch):
    """X w brought back block by block and Xᵀ g shipped in waves (2 blocks a wave here, 5
    blocks): the numbers of the products on the rows in memory."""
    import dask.array as da

    import securevfl.engine as eng

    monkeypatch.setattr(eng, "WAVE_BLOCKS", 2)
    rng = np.random.default_rng(4)
    X, w = rng.normal(size=(500, 3)), rng.normal(size=3)
    rows = rng.permutation(500)[:380].astype(np.int32)
    idx = rng.permutation(380)[:300]
    g = rng.normal(size=300)
    engine = eng.DaskEngine(dask_address)
    try:
        view = EngineRows(da.from_array(X, chunks=(100, 3)), rows, engine)
        np.testing.assert_allclose(engine.matvec(view, w, idx), X[rows[idx]] @ w, rtol=1e-13)
        got = engine.rmatvec(view, g, idx)
        np.testing.assert_allclose(got, X[rows[idx]].T @ g, rtol=1e-12, atol=1e-12)
        wide = view.with_constant()  # a clipped intercept: one more column, one chunk a block
        assert wide.table.numblocks == (5, 1)
        both = engine.rmatvec(wide, g, idx)
        np.testing.assert_allclose(both[:3], got, rtol=1e-12, atol=1e-12)
        assert both[3] == pytest.approx(g.sum(), rel=1e-12)
    finally:
        engine.close()


def _fm_spec(sources: str, engine: str, address: str | None) -> RunSpec:
    return RunSpec(
        method="fm-vfl",
        dataset=sources,
        epsilon=2.0,
        seed=3,
        reproducible_noise=True,
        engine=engine,
        dask_scheduler=address if engine == "dask" else None,
    )


def test_fm_vfl_releases_the_same_model_on_the_engine(sources, dask_address, tmp_path):
    """fm-vfl with each table on its engine: the same single-party coefficients (to float
    rounding), the same opened cross products (exact integers, read in table order there) and
    so the same model as the in-memory path."""
    want = run_experiment(_fm_spec(sources, "numpy", None), save=str(tmp_path / "numpy"))
    got = run_experiment(_fm_spec(sources, "dask", dask_address), save=str(tmp_path / "dask"))
    _assert_same_saved_model(tmp_path, want, got)
    assert got["comm"]["bytes_total"] == want["comm"]["bytes_total"]
    assert got["extra"]["engine"]["1"]["engine"] == "dask"


def test_the_product_input_streams_from_the_engine_in_table_order(dask_address):
    """EngineInput: the view's rows, mapped and encoded on the workers, read in consecutive
    slices that cut across blocks, equal the encoded rows in table order, the label holder's
    column (given in the view's order) in front; reading out of order is refused."""
    import dask.array as da

    from protocols.shamir_products import encode_fixed
    from securevfl.engine import DaskEngine
    from securevfl.errors import ProtocolError
    from securevfl.runtime.engine_stream import EngineInput, row_order

    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, (500, 3))
    rows = rng.permutation(500)[:380].astype(np.int32)  # the view's order: shuffled
    v = rng.uniform(-0.5, 0.5, 380)
    engine = DaskEngine(dask_address)
    try:
        view = EngineRows(da.from_array(X, chunks=(90, 3)), rows, engine)
        half = view.map_rows(lambda B: B / 2, 3)
        assert row_order(half) == "table" and row_order(X) == "view"
        stream = EngineInput(half, 12, timeout=60, front=v)
        assert stream.shape == (380, 4)
        got = np.concatenate([stream[s : s + 37] for s in range(0, 380, 37)])
        order = np.argsort(rows)
        want = encode_fixed(np.hstack([v[order, None], X[rows[order]] / 2]), 12)
        np.testing.assert_array_equal(got, want)
        gram, xtv = stream.sums()  # the party's own sums from the same read of its blocks
        np.testing.assert_allclose(gram, (X[rows] / 2).T @ (X[rows] / 2), rtol=1e-12)
        np.testing.assert_allclose(xtv, (X[rows] / 2).T @ v, rtol=1e-12)
        again = EngineInput(half, 12, timeout=60)
        np.testing.assert_array_equal(again.whole(), want[:, 1:])
        early = EngineInput(half, 12, timeout=60)
        with pytest.raises(ProtocolError, match="read in order"):
            early[40:80]
        with pytest.raises(ProtocolError, match="not complete"):
            early.sums()
    finally:
        engine.close()


def test_fm_vfl_streams_the_product_from_the_engine_with_one_process_a_party(
    sources, dask_address, tmp_path
):
    """`--processes --engine dask`: each party process reads its table on the engine and
    streams its product input from there; the same model and bytes as in one process."""
    from securevfl.experiment import run_in_processes

    want = run_experiment(_fm_spec(sources, "numpy", None), save=str(tmp_path / "numpy"))
    spec = _fm_spec(sources, "dask", dask_address)  # the party processes reach it over TCP
    got = run_in_processes(spec, save=str(tmp_path / "dask"))
    _assert_same_saved_model(tmp_path, want, got)
    assert got["comm"]["by_phase"]["mpc"]["bytes"] == want["comm"]["by_phase"]["mpc"]["bytes"]
    assert got["runtime"] == "processes" and got["extra"]["engine"]["0"]["engine"] == "dask"
