import os

import pytest

# keep numerical libraries single-threaded in tests: deterministic and fair on 2 cores
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import baselines
from securevfl.methods import load_all


@pytest.fixture(scope="module")
def dask_address():
    """One Dask cluster per test module that the parties of a run connect to
    (``--dask-scheduler``; a party's default is a LocalCluster of its own): workers are threads
    of the test process, reached over TCP so party processes can join too."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", dashboard_address=":0"
    )
    yield cluster.scheduler_address
    cluster.close()


@pytest.fixture(scope="session")
def parquet_dataset(tmp_path_factory):
    """``make(name, rows, **kw)``: generated Parquet sources of each party
    (``bench.scale_parquet.write_parties``) as a ``parquet:DIR0,DIR1`` dataset."""
    from bench.scale_parquet import write_parties

    def make(name: str, rows: int, **kw) -> str:
        dirs = write_parties(tmp_path_factory.mktemp(name), rows, **kw)
        return "parquet:" + ",".join(str(d) for d in dirs)

    return make


# every registered method and baseline, as the CLI sees them
load_all()
baselines.load_all()


@pytest.fixture(scope="session", autouse=True)
def _session_calibration_cache(tmp_path_factory):
    """Calibration results (``securevfl.privacy.calibration_cache``) land in a directory of this
    session, never the user's ~/.cache: a run starts cold as on a fresh machine, and tests that
    calibrate the same setting share one search (subprocess parties inherit the variable).
    Under pytest-xdist the workers' temporary roots share a parent: one directory there serves
    every worker (entries are written atomically), so two workers do not search one setting."""
    from securevfl.privacy.calibration_cache import ENV_VAR

    old = os.environ.get(ENV_VAR)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "calibration-cache"
        shared.mkdir(exist_ok=True)
        os.environ[ENV_VAR] = str(shared)
    else:
        os.environ[ENV_VAR] = str(tmp_path_factory.mktemp("calibration-cache"))
    # the method cards (bench.method_cards) in that directory, made from the classes this
    # process has loaded: else the first CLI processes of the session (a deployment test's
    # parties, started together) would each import every method to make them (~7 CPU-s each)
    from bench.method_cards import catalogue

    catalogue()
    # the party processes of this session's --processes runs are forked from one warm server
    # per worker (protocols.forked), which imports what the methods' parties import once;
    # a test that changes start-time variables (PYTHONPATH) gets fresh interpreters instead
    from protocols.forked import start_server
    from securevfl.runtime.launcher import PRELOAD_ENV, preload_modules

    os.environ.setdefault(PRELOAD_ENV, "torch,torch._dynamo,dp_accounting,scipy.stats")
    # a Dask LocalCluster writes these into the environment of the process that starts it
    # (distributed's nanny "pre-spawn-environ"), and they stay: set here first, so that the
    # server's start-time variables are still this worker's after its first engine test
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", "65536")
    os.environ.setdefault("PYTHONHASHSEED", "6640")
    if preload_modules(""):
        start_server(preload_modules(""))
    yield
    if old is None:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = old
