"""--engine dask (issue 44): a party's own products as Dask reductions over row blocks give the
same model as the numpy path (same seed, reproducible noise), to float rounding."""

from __future__ import annotations

import numpy as np
import pytest

from securevfl.context import RunSpec
from securevfl.engine import DaskEngine, NumpyEngine, open_engines
from securevfl.experiment import run_experiment


@pytest.fixture(scope="module")
def scheduler():
    """One small cluster for the module (a party's default is a LocalCluster of its own)."""
    engine = DaskEngine(workers=2, block_rows=97)  # blocks that do not divide the rows
    yield engine
    engine.close()


def test_the_engines_products_agree_with_numpy(scheduler):
    rng = np.random.default_rng(0)
    X, w, g = rng.normal(size=(500, 7)), rng.normal(size=7), rng.normal(size=500)
    idx = rng.permutation(500)[:120]
    ref = NumpyEngine()
    np.testing.assert_allclose(scheduler.matvec(X, w, idx), ref.matvec(X, w, idx), rtol=1e-12)
    got, want = scheduler.rmatvec(X, g[:120], idx), ref.rmatvec(X, g[:120], idx)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(scheduler.gram(X), ref.gram(X), rtol=1e-12)
    assert scheduler.blocks(X).numblocks == (6, 1)  # 500 rows in blocks of 97


@pytest.mark.parametrize(
    "method, extra",
    [
        ("hdp-vfl", {"epochs": 1, "delta": 1e-5}),
        ("fm-vfl", {}),
    ],
)
def test_the_dask_engine_trains_the_same_model(scheduler, method, extra, tmp_path):
    address = scheduler.client.scheduler.address
    base = dict(
        method=method,
        dataset="synthetic-logistic",
        dataset_options={"n": 1200, "d": 8},
        epsilon=8.0,
        seed=3,
        reproducible_noise=True,
        **extra,
    )
    numpy_rec = run_experiment(RunSpec(**base), save=str(tmp_path / "numpy"))
    spec = RunSpec(**base, engine="dask", dask_scheduler=address)
    dask_rec = run_experiment(spec, save=str(tmp_path / "dask"))
    for k in (0, 1):  # each party's trained weights, to float rounding
        want = sorted((tmp_path / "numpy" / f"party_{k}").glob("*.npy"))
        assert want
        for path in want:
            got = np.load(tmp_path / "dask" / f"party_{k}" / path.name, allow_pickle=False)
            np.testing.assert_allclose(got, np.load(path), rtol=1e-9, atol=1e-12)
    assert "engine" not in numpy_rec.get("extra", {})
    stats = dask_rec["extra"]["engine"]
    assert set(stats) == {"0", "1"} and stats["0"]["engine"] == "dask"
    assert stats["0"]["workers"] == 2
    for name, v in numpy_rec["metrics"].items():
        assert dask_rec["metrics"][name] == pytest.approx(v, abs=1e-9)


def test_other_methods_say_they_run_in_one_process(capsys):
    spec = RunSpec(method="vfl", engine="dask")
    assert open_engines(spec, [0, 1]) == {}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vfl runs each party's local work in one process" in err[0]


def test_a_scheduler_without_the_dask_engine_is_one_line(capsys):
    from bench.cli import main

    argv = ["run", "hdp-vfl", "--epsilon", "1", "--dask-scheduler", "tcp://127.0.0.1:1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "securevfl: error: --dask-scheduler applies with --engine dask, got --engine numpy"
    ]


def test_local_clusters_start_no_more_workers_than_cores(monkeypatch):
    import securevfl.engine as eng

    for cores, parties, want in ((2, 2, 1), (2, 1, 2), (1, 3, 1), (16, 2, eng.LOCAL_WORKERS)):
        monkeypatch.setattr(eng.os, "sched_getaffinity", lambda _pid, c=cores: set(range(c)))
        assert eng.local_workers(parties) == want


def test_secureboosts_key_holder_gets_the_workers_of_a_party_alone(monkeypatch):
    """Its randomness runs in the background (niced): on 2 cores it gets 2 workers and the
    partners share the cores among themselves (one partner: 2, two partners: 1 each); other
    methods' parties share the cores evenly whoever holds the labels."""
    import securevfl.engine as eng

    monkeypatch.setattr(eng.os, "sched_getaffinity", lambda _pid: {0, 1})

    def recorder(scheduler=None, *, workers, timeout):  # the workers each engine would start
        assert timeout == 120.0  # the run's --timeout
        return workers

    monkeypatch.setattr(eng, "DaskEngine", recorder)
    for method, parties, want in (
        ("secureboost", [0, 1], {0: 2, 1: 2}),
        ("secureboost-dp", [0, 1, 2], {0: 2, 1: 1, 2: 1}),
        ("hdp-vfl", [0, 1], {0: 1, 1: 1}),
    ):
        spec = RunSpec(method=method, engine="dask")
        assert eng.open_engines(spec, parties, key_holder=0) == want
    assert eng.open_engines(RunSpec(method="secureboost", engine="dask"), [1], key_holder=0) == {
        1: 2
    }  # a partner in its own process


def test_a_result_the_cluster_does_not_deliver_in_time_is_a_protocol_error(dask_address):
    """Every wait on the party's cluster ends at the run's timeout, with one line naming it."""
    import time

    from dask import delayed

    from securevfl.errors import ProtocolError

    engine = DaskEngine(dask_address, timeout=0.2)
    try:
        with pytest.raises(ProtocolError, match=r"did not deliver a slow block within 0.2 s"):
            engine.gather([delayed(time.sleep, pure=False)(1.0)], "a slow block")
        assert engine.gather([delayed(sum)([1, 2])], "a sum") == [3]  # and the engine goes on
        assert engine.gathered.timeout == 0.2  # the minibatches' rows wait as long
    finally:
        engine.close()
