"""HE-VFL speed work (issue 29): the residual's maker reuses its ciphertexts (same gradients as
loading its own bytes), and the epoch bench's gradient check and perf line (no peer needed)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from baselines.he_schemes import SCHEMES
from bench import he_epoch_bench as heb
from securevfl.context import RunContext, RunSpec
from securevfl.experiment import build_views, validate_spec
from securevfl.runtime import InProcessRuntime


def _ctx(**options):
    spec = RunSpec(
        method="he-vfl", dataset="breast", epochs=1, batch_size=64, seed=0, options=options
    )
    method = validate_spec(spec)
    rt = InProcessRuntime(method.n_parties(spec))
    info, views, _ = build_views(spec, method, rt.local_parties)
    return RunContext(rt=rt, spec=spec, info=info, views=views, shared_seed=0)


def test_residual_maker_reuses_its_ciphertexts_with_identical_openings():
    ctx = _ctx(scheme="ckks")
    s = SCHEMES["ckks"](ctx)
    s.setup()
    rng = np.random.default_rng(3)
    X = ctx.views[0].X_train[:64]
    u1, plain = rng.uniform(-1, 1, 64), rng.uniform(-3, 3, 64)
    loads = []
    real_load = s._load
    s._load = lambda *args: loads.append(1) or real_load(*args)
    msg = s.combine(0, [s.encrypt_ir(1, u1)], plain)
    n_loads = len(loads)
    reused, m1 = s.gradient_message(0, list(msg), X, np.random.default_rng(9))
    assert len(loads) == n_loads  # equal bytes from its own combine: no deserialization
    loaded, m2 = s.gradient_message(0, msg, X, np.random.default_rng(9))  # cache spent
    assert len(loads) == n_loads + 1
    a = s.open(reused, X.shape[1], 0) - m1
    b = s.open(loaded, X.shape[1], 0) - m2
    np.testing.assert_array_equal(a, b)  # same ciphertexts, same masks: bit-identical
    # CKKS: final scale 2^30, 64 rows summed (/ 4b = 256 later: ~4e-7 per gradient entry)
    np.testing.assert_allclose(a, X.T @ (u1 + plain), atol=1e-4)
    # a residual that is not the one it made (another party's bytes) is always loaded
    s.combine(0, [s.encrypt_ir(1, u1)], plain)
    other = s.combine(0, [s.encrypt_ir(1, u1 + 1.0)], plain)
    s.made[0] = (msg, s.made[0][1])  # what party 0 made differs from what it receives
    got, m3 = s.gradient_message(0, other, X, np.random.default_rng(9))
    np.testing.assert_allclose(s.open(got, X.shape[1], 0) - m3, X.T @ (u1 + 1.0 + plain), atol=1e-4)


@pytest.mark.parametrize("scheme", ["ckks", "paillier"])
def test_epoch_bench_checks_every_gradient_and_prints_the_perf_line(scheme, tmp_path, capsys):
    argv = [
        "--scheme",
        scheme,
        "--dataset",
        "breast",
        "--batch-size",
        "64",
        "--batches",
        "2",
        "--key-bits",
        "512",
        "--dump-blocks",
        str(tmp_path),
        "--json",
    ]
    assert heb.main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["exact"] is True and out["seconds"] > 0 and out["peak_mb"] > 0
    d = out["detail"]
    assert d["gradients_checked"] == 2 * 2 and d["batches"] == 2
    assert out["bytes"] == sum(d["phases_bytes"].values()) > 0
    assert out["version"].startswith("securevfl ") and ("tenseal" in out["version"]) == (
        scheme == "ckks"
    )
    z = np.load(tmp_path / "blocks.npz", allow_pickle=False)
    assert sorted(z["order"].tolist()) == list(range(len(z["y"])))  # the epoch's permutation
    assert set(np.unique(z["y"]).tolist()) == {-1.0, 1.0} and int(z["batch_size"]) == 64
    assert z["X0"].shape[0] == z["X1"].shape[0] == len(z["y"])


def test_epoch_bench_check_catches_a_wrong_gradient(monkeypatch, capsys):
    base = SCHEMES["ckks"]
    monkeypatch.setattr(base, "unmask", lambda self, k, o, m: np.asarray(o) - m + 0.05)
    argv = [
        "--scheme",
        "ckks",
        "--dataset",
        "breast",
        "--batch-size",
        "64",
        "--batches",
        "1",
        "--json",
    ]
    assert heb.main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["exact"] is False and out["detail"]["max_error_over_tolerance"] > 1.0


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    got = subprocess.run(
        [sys.executable, "-m", "bench.he_epoch_bench", "--batches", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2 and got.stderr.count("\n") == 1 and "--batches" in got.stderr
    # the peer script refuses missing blocks before importing HEU (runs with our interpreter)
    got = subprocess.run(
        [sys.executable, "bench/peers/heu_vfl.py", "--blocks", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2 and "blocks.npz" in got.stderr and "Traceback" not in got.stderr
