"""The he-vfl baseline: protocol against a numpy reference, key separation, masking, errors."""

import numpy as np
import pytest

from baselines.he_schemes import SCHEMES
from baselines.he_vfl import taylor_derivative, taylor_loss, train_taylor_he
from securevfl.context import RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import build_views, run_experiment, run_in_processes, validate_spec
from securevfl.runtime import InProcessRuntime
from securevfl.training import minibatches


def _spec(**kw):
    base = dict(method="he-vfl", dataset="breast", parties=2, epochs=1, batch_size=64, seed=0)
    base.update(kw)
    return RunSpec(**base)


def _ctx(spec):
    method = validate_spec(spec)
    rt = InProcessRuntime(method.n_parties(spec))
    info, views, _ = build_views(spec, method, rt.local_parties)
    return RunContext(rt=rt, spec=spec, info=info, views=views, shared_seed=spec.seed)


def test_taylor_loss_is_the_second_order_expansion_of_the_logistic_loss():
    t = np.linspace(-0.3, 0.3, 7)
    for y in (-1.0, 1.0):
        exact = np.logaddexp(0.0, -y * t)
        assert np.max(np.abs(taylor_loss(t, y) - exact)) < 0.3**4 / 100
        eps = 1e-6
        num = (taylor_loss(t + eps, y) - taylor_loss(t - eps, y)) / (2 * eps)
        np.testing.assert_allclose(taylor_derivative(t, y), num, atol=1e-8)


@pytest.mark.parametrize(
    "scheme, K, tol", [("plain", 3, 1e-10), ("ckks", 2, 1e-4), ("paillier", 2, 1e-4)]
)
def test_protocol_matches_a_pooled_numpy_taylor_sgd(scheme, K, tol):
    opts = {"scheme": scheme} | ({"paillier_bits": 512} if scheme == "paillier" else {})
    spec = _spec(parties=K, epochs=2, lr=1.0, options=opts)
    ctx = _ctx(spec)
    s = SCHEMES[scheme](ctx)
    s.setup()
    state, _, extra = train_taylor_he(ctx, s)
    assert extra["batches_run_per_epoch"] == extra["batches_per_epoch"] == 8
    # reference: minibatch SGD on the Taylor loss with all columns in one place
    X = np.hstack([ctx.views[k].X_train for k in range(K)])
    y = np.where(ctx.views[0].y_train == 1, 1.0, -1.0)
    w, b = np.zeros(X.shape[1]), 0.0
    for epoch in range(2):
        for idx in minibatches(len(y), 64, seed=0, epoch=epoch):
            d = taylor_derivative(X[idx] @ w + b, y[idx])
            w, b = w - 1.0 * X[idx].T @ d / len(idx), b - 1.0 * float(np.mean(d))
    np.testing.assert_allclose(np.concatenate([state.w[k] for k in range(K)]), w, atol=tol)
    assert abs(state.bias - b) < tol


def test_data_parties_cannot_decrypt_and_coordinator_sees_only_masked_gradients():
    ctx = _ctx(_spec())
    s = SCHEMES["ckks"](ctx)
    s.setup()
    assert s.sides[0].keys_held() == s.sides[1].keys_held() == ["public"]
    assert not hasattr(s.sides[1], "decryptor") and "secret" in s.sides[2].keys_held()
    assert "secret" not in s.describe()["keys"]["party 1"].replace("no secret", "")
    # record what the coordinator opens and compare with the true X^T (4d) of that step
    seen = []
    real_open = s.open
    s.open = lambda payload, F, src: seen.append(real_open(payload, F, src)) or seen[-1]
    state, _, _ = train_taylor_he(ctx, s)
    assert len(seen) == 2 * 8  # two data parties x 8 minibatches
    idx = next(iter(minibatches(ctx.info.n_train, 64, seed=0, epoch=0)))
    y = np.where(ctx.views[0].y_train[idx] == 1, 1.0, -1.0)
    truth_1 = ctx.views[1].X_train[idx].T @ (0.0 - 2.0 * y)  # first step: w = 0, b = 0
    assert np.median(np.abs(seen[1] - truth_1)) > 1000  # masked by 2^20-range noise
    paillier = SCHEMES["paillier"](
        _ctx(_spec(options={"scheme": "paillier", "paillier_bits": 512}))
    )
    paillier.setup()
    assert all(not hasattr(paillier.pub[k], "p") for k in (0, 1, 2))


def test_record_reports_keys_setup_traffic_and_accuracy_close_to_plain():
    ckks = run_experiment(_spec(epochs=3))
    plain = run_experiment(_spec(epochs=3, options={"scheme": "plain"}))
    ex = ckks["extra"]
    assert ex["scheme"] == "ckks" and not ex["extrapolated"]
    assert (
        "public key only" in ex["keys"]["party 1"]
        and "secret" in ex["keys"]["party 2 (coordinator)"]
    )
    setup = ckks["comm"]["by_phase"]["setup"]
    # the public context reaches both data parties, metered apart from training
    assert setup["messages"] == 2 and setup["bytes"] >= 2 * ex["public_context_bytes"] > 0
    assert "setup" not in plain["comm"]["by_phase"]
    assert (
        ckks["comm"]["by_phase"]["train"]["bytes"]
        > 100 * plain["comm"]["by_phase"]["train"]["bytes"]
    )
    assert abs(ckks["metrics"]["auc"] - plain["metrics"]["auc"]) < 1e-3
    assert ckks["model_fingerprint"] == {} and ex["approx_fingerprint"]
    # where the time and the bytes went: every channel byte of training belongs to one message
    assert {"encrypt", "multiply", "decrypt", "serialize", "send"} <= set(ex["phases_s"])
    assert sum(ex["phases_s"].values()) == pytest.approx(ckks["time"]["train_s"], rel=0.05)
    assert sum(ex["phases_bytes"].values()) == ckks["comm"]["by_phase"]["train"]["bytes"]
    assert ex["phases_bytes"]["gradient"] > ex["phases_bytes"]["opened"] > 0


def test_paillier_djn_randomness_trains_like_textbook_paillier():
    full = run_experiment(_spec(options={"scheme": "paillier", "paillier_bits": 512}))
    djn = run_experiment(
        _spec(options={"scheme": "paillier", "paillier_bits": 512, "paillier_randomness": "djn"})
    )
    # exact fixed-point arithmetic either way: the same model, only the randomness differs
    assert djn["model_fingerprint"] == full["model_fingerprint"]
    assert "DJN" in djn["extra"]["paillier"]["randomness"]
    assert "h_s" in djn["extra"]["keys"]["party 1"]
    # n and h_s (at ciphertext width) reach each data party
    assert djn["comm"]["by_phase"]["setup"]["bytes"] > 2 * (64 + 128)


def test_paillier_timed_batches_are_extrapolated_and_say_so():
    rec = run_experiment(
        _spec(options={"scheme": "paillier", "paillier_bits": 512, "timed_batches": 2})
    )
    ex = rec["extra"]
    assert ex["extrapolated"] and ex["truncated_training"]
    assert ex["batches_run_per_epoch"] == 2 and ex["batches_per_epoch"] == 8
    assert ex["epoch_s_extrapolated"] > 0 and "2 timed minibatches" in ex["extrapolation"]
    # n of a 512-bit key (64 bytes) to each data party, plus the channel's framing
    assert 2 * 64 <= rec["comm"]["by_phase"]["setup"]["bytes"] < 2 * 64 + 64


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(options={"scheme": "rsa"}), "scheme must be one of"),
        (dict(options={"ckks_coeff_bits": "60,40,40,40,40,60"}), "<= 218 bits"),
        # issue 12: scales that used to train silently to 0.23-0.80 accuracy
        (dict(options={"ckks_scale_bits": 25}, batch_size=1024), "use scale_bits >= 3"),
        (dict(options={"ckks_coeff_bits": "60,60", "ckks_scale_bits": 20}), "longer chain"),
        (dict(options={"ckks_scale_bits": 60, "ckks_mask_bits": 40}), "features keep"),
        (
            dict(options={"scheme": "ckks", "paillier_bits": 1024}),
            "paillier-bits of method .he-vfl. applies",
        ),
        (
            dict(options={"scheme": "paillier", "ckks_scale_bits": 40}),
            "ckks-scale-bits of method .he-vfl. applies",
        ),
        (dict(options={"ckks_coeff_bits": "sixty"}), "comma-separated"),
        (dict(options={"ckks_rows_per_ct": 300}), "divide"),
        (dict(options={"scheme": "paillier", "paillier_bits": 100}), "paillier_bits"),
        (dict(options={"timed_batches": -1}), "timed_batches"),
        (dict(loss="least-squares"), "loss for he-vfl"),
        (dict(dataset="diabetes"), "task must be 'binary'"),
    ],
)
def test_bad_input_raises_config_error(kw, match):
    with pytest.raises(ConfigError, match=match):
        run_experiment(_spec(**kw))


@pytest.mark.slow
@pytest.mark.networked
def test_runs_with_one_process_per_party():
    rec = run_in_processes(_spec(epochs=2), plugins=("baselines",))
    ref = run_experiment(_spec(epochs=2, options={"scheme": "plain"}))
    assert rec["runtime"] == "processes"
    assert rec["comm"]["by_phase"]["setup"]["messages"] == 2
    assert abs(rec["metrics"]["auc"] - ref["metrics"]["auc"]) < 1e-3


def test_report_section_and_demo(tmp_path, capsys):
    from bench.demos import ckks as demo
    from bench.reports import he

    recs = [
        run_experiment(_spec(options={"scheme": s, "timed_batches": t} | extra))
        for s, t, extra in (
            ("ckks", 0, {}),
            ("plain", 0, {}),
            ("paillier", 2, {"paillier_bits": 512}),
        )
    ]
    md = he.render(recs, tmp_path)
    assert "| breast | 455 | 64 | 2 | he-vfl/paillier | 1 |" in md and "CPU s / epoch" in md
    assert "(extrapolated)" in md and "n/a (truncated run)" in md
    assert "6,021 s for 40 epochs" in md and "Keys held" in md
    assert demo.main(["--rows", "4"]) == 0
    out = capsys.readouterr().out
    assert "C sees" in out and "ValueError" in out and "public context" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--batch-size", "1024", "--ckks-scale-bits", "25"], "use scale_bits >= 3"),
        (
            ["--paillier-bits", "1024"],
            "--paillier-bits of method 'he-vfl' applies with --scheme paillier",
        ),
        (
            ["--scheme", "plain", "--ckks-degree", "4096"],
            "--ckks-degree of method 'he-vfl' applies with --scheme ckks",
        ),
    ],
)
def test_cli_refuses_imprecise_ckks_and_options_of_another_scheme(argv, needle, capsys):
    from bench.cli import main

    assert main(["run", "he-vfl", "--dataset", "breast", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
