"""The runtime capability rt.secure_products (securevfl/runtime/secure_products.py), fm-vfl on it,
and the perf report section that renders any record's phase breakdown."""

from __future__ import annotations

import numpy as np
import pytest

from bench.reports import perf
from bench.suites import load_suite
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.runtime import InProcessRuntime
from securevfl.runtime.secure_products import ProductRequest


@pytest.mark.networked
def test_in_process_capability_opens_exact_blocks_and_meters_every_byte():
    rng = np.random.default_rng(5)
    n, f, bound = 500, 16, 100.0
    A, B = rng.uniform(-1, 1, (n, 4)), rng.uniform(-1, 1, (n, 3))
    N = rng.laplace(0, 1.0, (4, 3))
    req = ProductRequest(
        pairs=((0, 1, 0),),
        shapes={0: (n, 4), 1: (n, 3)},
        receiver=2,
        frac_bits=f,
        noise_bound=bound,
        timeout=60,
    )
    rt = InProcessRuntime(3)
    res = rt.secure_products(req, {0: A, 1: B}, {0: N})
    exact = np.rint(A * 2**f).T @ np.rint(B * 2**f) / 4.0**f + np.rint(N * 4**f) / 4.0**f
    assert np.array_equal(res.blocks[0], exact)  # the fixed-point product, to the last bit
    assert np.abs(res.blocks[0] - (A.T @ B + N)).max() <= n * 2.0**-f
    mpc = rt.meter.summary(3)["by_phase"]["mpc"]
    assert mpc["bytes"] == sum(res.phases_bytes.values()) > 0 and mpc["rounds"] == 2
    assert set(res.slowest_phases()) == {"input sharing", "local product", "opening"}


def test_legacy_impls_keep_their_row_limit_with_a_named_error():
    spec = RunSpec(
        method="fm-vfl",
        dataset="synthetic-logistic",
        dataset_options={"n": 130_000, "d": 4},
        parties=2,
        seed=0,
        epsilon=1.0,
        options={"mpc_impl": "vectorized"},
    )
    with pytest.raises(ConfigError, match="mpc_impl 'vectorized' is sized for n <= 100000"):
        run_experiment(spec)


def _rec(method, n, phases, nbytes, seed=0, **cfg):
    return {
        "method": method,
        "dataset": "synthetic-logistic",
        "parties": 2,
        "n_train": n,
        "config": {"seed": seed, **cfg},
        "metrics": {"accuracy": 0.5},
        "extra": {"phases_s": phases, "phases_bytes": nbytes},
    }


def test_perf_report_renders_any_phase_record_and_its_plot(tmp_path):
    recs = [
        _rec(
            "fm-vfl",
            10_000,
            {"input sharing": 0.02, "opening": 0.001},
            {"input sharing": 10, "opening": 2},
            mpc_impl="rns",
        ),
        _rec(
            "fm-vfl",
            10_000,
            {"input sharing": 0.04, "opening": 0.003},
            {"input sharing": 10, "opening": 2},
            seed=1,
            mpc_impl="rns",
        ),
        _rec("fm-vfl", 10_000, {"secure": 0.3}, {"secure": 99}, mpc_impl="vectorized"),
        _rec("he-vfl", 30_000, {"encrypt": 1.0, "multiply": 2.0}, {"encrypt": 5, "multiply": 0}),
        {"method": "vfl", "dataset": "x", "parties": 2, "config": {}, "metrics": {}, "extra": {}},
    ]
    md = perf.render(recs, tmp_path)
    assert (
        "| fm-vfl synthetic-logistic n=10000 K=2 (mpc_impl=rns) | input sharing "
        "| 0.030 ± 0.010 | 10 |" in md
    )
    assert "mpc_impl=vectorized) | secure | 0.300" in md
    assert "he-vfl synthetic-logistic n=30000 K=2 | multiply | 2.000" in md
    assert "| vfl" not in md
    assert (tmp_path / perf.PLOT).stat().st_size > 0
    assert "No record carries" in perf.render(recs[-1:], tmp_path)


def test_perf_suite_has_the_three_sizes_and_the_report():
    suite = load_suite("perf")
    ns = sorted(
        c.spec.dataset_options["n"]
        for c in suite.cells
        if c.spec.method == "fm-vfl" and c.spec.options.get("mpc_impl") == "rns"
    )
    assert ns == [12_500, 125_000, 1_250_000] and "perf" in suite.extras
