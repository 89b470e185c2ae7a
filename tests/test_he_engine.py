"""he-vfl on a party's Dask engine (issue 44 item 3): each minibatch's rows are taken from the
party's table on its engine (only those rows, in the minibatch's order, several planned
minibatches a pass) and he-vfl trains the same model as on the in-memory path."""

from __future__ import annotations

import numpy as np
import pytest

from securevfl import engine
from securevfl.context import RunSpec
from securevfl.engine import DaskEngine, EngineRows, open_engines
from securevfl.experiment import run_experiment

ROWS = 600  # 3 files of 200 rows per party, row groups of 100: 3 blocks a party


@pytest.fixture(scope="module")
def sources(parquet_dataset):
    return parquet_dataset("he-engine", ROWS, columns=3, group_rows=100, shard_rows=200, seed=11)


def _spec(
    sources: str, engine: str, address: str | None, center: bool = False, epochs: int = 1, **options
) -> RunSpec:
    return RunSpec(
        method="he-vfl",
        dataset=sources,
        seed=2,
        epochs=epochs,
        batch_size=32,  # 15 minibatches of the 480 training rows; a gather brings 3
        lr=1.0,
        center=center,
        engine=engine,
        dask_scheduler=address if engine == "dask" else None,
        options=options,
    )


def _count_passes(monkeypatch) -> list[int]:
    """The minibatches each gather brings in, one entry a pass over a table's blocks."""
    passes: list[int] = []
    wave = engine._Wave

    def counted(client, table, batches):
        passes.append(len(batches))
        return wave(client, table, batches)

    monkeypatch.setattr(engine, "_Wave", counted)
    return passes


def _weights(path) -> dict[str, np.ndarray]:
    return {p.parent.name + "/" + p.name: np.load(p) for p in sorted(path.glob("*/*.npy"))}


# CKKS: 15 minibatches, 3 a wave; Paillier: 2 epochs of their first 4 minibatches, 3 then 1
CASES = [
    ({"scheme": "ckks"}, 1e-4, {"center": True}, [3] * 5),
    (
        {"scheme": "paillier", "paillier_bits": 512, "timed_batches": 4},
        1e-9,
        {"epochs": 2},
        [3, 1] * 2,
    ),
]


@pytest.mark.parametrize(("options", "tol", "run", "waves"), CASES, ids=["ckks", "paillier"])
def test_he_vfl_trains_the_same_model_on_the_engine(
    sources, dask_address, tmp_path, monkeypatch, options, tol, run, waves
):
    """CKKS to its precision (SEAL's encryption noise is not seeded; columns centred on their
    training means), Paillier (exact on its fixed-point rows) to float rounding of the rows'
    scaling on the blocks. Each party's minibatches come from its engine in waves planned per
    epoch (a quarter of the 480 training rows a wave at most: 3 minibatches)."""
    want = run_experiment(_spec(sources, "numpy", None, **run, **options), save=str(tmp_path / "n"))
    passes = _count_passes(monkeypatch)
    spec = _spec(sources, "dask", dask_address, **run, **options)
    got = run_experiment(spec, save=str(tmp_path / "d"))
    assert sorted(passes) == sorted(waves * 2)  # both parties'
    mine, theirs = _weights(tmp_path / "d"), _weights(tmp_path / "n")
    assert mine.keys() == theirs.keys() and len(mine) >= 2
    for name, w in theirs.items():
        assert np.abs(w).max() > 0.01  # it trained
        np.testing.assert_allclose(mine[name], w, rtol=0, atol=tol)
    assert got["metrics"]["auc"] == pytest.approx(want["metrics"]["auc"], abs=0.01)
    assert got["comm"]["bytes_total"] == pytest.approx(want["comm"]["bytes_total"], rel=0.01)
    assert got["extra"]["engine"]["0"]["engine"] == "dask"


def test_the_minibatch_gather_equals_the_rows_of_a_shuffled_view(dask_address, monkeypatch):
    """engine.rows(view, idx) is X[rows[idx]] in the minibatch's order; planned minibatches
    come in several to a pass over the blocks; the minibatch's products use those rows."""
    import dask.array as da

    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 4))
    rows = rng.permutation(500)[:400]  # the view's order: shuffled, a part of the table
    batches = np.array_split(rng.permutation(400), 16)  # 25 rows each: 4 fit a gather (100)
    passes = _count_passes(monkeypatch)
    engine = DaskEngine(dask_address)
    try:
        view = EngineRows(da.from_array(X, chunks=(90, 4)), rows, engine)
        engine.plan(view, batches)
        for idx in batches:
            got = engine.rows(view, idx)
            np.testing.assert_array_equal(got, X[rows[idx]])
            assert not got.flags.writeable
            w, g = rng.normal(size=4), rng.normal(size=len(idx))
            np.testing.assert_allclose(engine.matvec(view, w, idx), X[rows[idx]] @ w, rtol=1e-13)
            np.testing.assert_allclose(engine.rmatvec(view, g, idx), X[rows[idx]].T @ g)
        assert passes == [4, 4, 4, 4]  # 16 minibatches, 4 passes
        odd = rng.permutation(400)[:7]  # not planned: gathered alone
        np.testing.assert_array_equal(engine.rows(view, odd), X[rows[odd]])
        assert passes[-1] == 1
        whole = rng.permutation(400)[:300]  # over a quarter of the view: products are a pass
        w = rng.normal(size=4)
        np.testing.assert_allclose(engine.matvec(view, w, whole), X[rows[whole]] @ w)
        assert len(passes) == 5
    finally:
        engine.close()


def test_a_method_off_the_engine_says_so_in_one_line(capsys):
    spec = RunSpec(method="vafl", dataset="synthetic", engine="dask")
    assert open_engines(spec, [0, 1]) == {}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vafl runs each party's local work in one process" in err[0]
    assert "he-vfl" in err[0]  # the methods --engine dask serves, he-vfl among them


def test_a_parquet_tables_rows_are_taken_before_the_rules(sources, dask_address):
    """A table on the engine from Parquet: a wave's rows are taken from each block's Arrow
    table and only they are encoded, scaled and centred; the same rows as in memory."""
    from securevfl.run.checks import validate_spec
    from securevfl.run.views import build_views

    views = {}
    for name, address in (("numpy", None), ("dask", dask_address)):
        spec = _spec(sources, name, address, center=True)
        views[name] = build_views(spec, validate_spec(spec), [0, 1])[1]
    rng = np.random.default_rng(5)
    for k in (0, 1):
        lazy, want = views["dask"][k].X_train, views["numpy"][k].X_train
        assert lazy.take is not None
        idx = rng.permutation(len(want))[:50]
        got = lazy.engine.rows(lazy, idx)
        np.testing.assert_allclose(got, want[idx], rtol=0, atol=1e-12)
        assert lazy.with_constant().take is None  # another table: taken from its blocks
        lazy.engine.close()
