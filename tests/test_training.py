"""The shared trainers against plaintext references."""

import numpy as np
import pytest

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.training import minibatches


def test_minibatches_are_shared_and_cover_every_row():
    a = list(minibatches(103, 10, seed=4, epoch=1))
    b = list(minibatches(103, 10, seed=4, epoch=1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert sorted(np.concatenate(a).tolist()) == list(range(103))
    assert not np.array_equal(a[0], next(minibatches(103, 10, seed=4, epoch=2)))


def test_vertical_glm_equals_pooled_sgd():
    """Split across K parties, vertical SGD computes exactly pooled minibatch SGD."""
    spec = RunSpec(
        method="vfl", dataset="breast", parties=3, epochs=2, batch_size=50, seed=1, lr=0.5
    )
    from securevfl.context import RunContext
    from securevfl.experiment import build_views, validate_spec
    from securevfl.runtime import InProcessRuntime
    from securevfl.training import train_glm

    method = validate_spec(spec)
    info, views, _ = build_views(spec, method, [0, 1, 2])
    ctx = RunContext(InProcessRuntime(3), spec, info, views, shared_seed=1)
    state, _ = train_glm(ctx)
    X = np.hstack([views[k].X_train for k in range(3)])
    y = np.where(views[0].y_train == 1, 1.0, -1.0)
    w = np.zeros(X.shape[1])
    b = 0.0
    for epoch in range(2):
        for idx in minibatches(len(y), 50, seed=1, epoch=epoch):
            theta = X[idx] @ w + b
            d = -y[idx] / (1 + np.exp(y[idx] * theta))
            w -= 0.5 * X[idx].T @ d / len(idx)
            b -= 0.5 * d.mean()
    np.testing.assert_allclose(np.concatenate([state.w[k] for k in range(3)]), w, atol=1e-12)
    assert state.bias == pytest.approx(b, abs=1e-12)


@pytest.mark.parametrize("model", ["glm", "mlp"])
def test_vfl_learns_breast(model):
    rec = run_experiment(
        RunSpec(method="vfl", dataset="breast", parties=2, model=model, epochs=30, seed=0)
    )
    assert rec["metrics"]["accuracy"] > 0.9
    assert rec["comm"]["bytes_total"] > 0 and rec["privacy"] is None


def test_concat_aggregation_runs():
    rec = run_experiment(
        RunSpec(
            method="vfl",
            dataset="breast",
            parties=3,
            model="mlp",
            aggregation="concat",
            epochs=10,
            seed=0,
        )
    )
    assert rec["metrics"]["accuracy"] > 0.9


def test_bytes_in_record_equal_serialized_payloads():
    """GLM: per step each passive party sends b floats up and receives b floats back."""
    from securevfl.runtime import serialization

    spec = RunSpec(method="vfl", dataset="breast", parties=2, epochs=1, batch_size=569, seed=0)
    rec = run_experiment(spec)
    n_train = rec["n_train"]  # one batch (batch_size >= n_train)
    one = len(serialization.dumps(np.zeros(n_train)))
    train = rec["comm"]["by_phase"]["train"]
    assert train["bytes"] == 2 * one and train["messages"] == 2
    ev = rec["comm"]["by_phase"]["eval"]
    assert ev["bytes"] == len(serialization.dumps(np.zeros(rec["n_test"])))
