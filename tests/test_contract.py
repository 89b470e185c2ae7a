"""Every registered method and baseline goes through the same checks (contract tests)."""

import math

import pytest

from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.registry import lookup, names

METHODS = names("method")
# methods whose defaults cost minutes on breast (2048-bit Paillier, 20 trees): small settings
FAST_OPTIONS = {
    "secureboost": {"trees": 2, "depth": 2, "paillier_bits": 256},
    "secureboost-dp": {"trees": 2, "depth": 2, "paillier_bits": 256},
}


def _spec(name: str, **kw) -> RunSpec:
    m = lookup("method", name)
    base = dict(
        method=name, dataset="breast", parties=2, epochs=1, batch_size=64, seed=0, model=m.models[0]
    )
    if m.requires_epsilon:
        base.update(epsilon=1.0, delta=1e-5)
    if name in FAST_OPTIONS:
        base["options"] = dict(FAST_OPTIONS[name])
    base.update(kw)
    return RunSpec(**base)


def test_the_plain_baselines_are_registered():
    assert {"vfl", "local", "centralized"} <= set(METHODS)


def check_complete_record(name: str) -> dict:
    """A seeded one-epoch run gives a complete, consistent record (returned)."""
    rec = run_experiment(_spec(name))
    assert rec["method"] == name and rec["dataset"] == "breast"
    assert rec["n_train"] + rec["n_test"] == 569
    acc = rec["metrics"]["accuracy"]
    assert 0.0 <= acc <= 1.0 and not math.isnan(acc)
    assert rec["time"]["train_s"] >= 0 and rec["time"]["total_s"] >= rec["time"]["train_s"]
    comm = rec["comm"]
    assert sum(v["sent"] for v in comm["bytes_by_party"].values()) == comm["bytes_total"]
    assert sum(v["received"] for v in comm["bytes_by_party"].values()) == comm["bytes_total"]
    method = lookup("method", name)
    if method.requires_epsilon:
        p = rec["privacy"]
        assert p is not None and p["epsilon"] > 0 and 0 <= p["delta"] < 1 and p["accountant"]
    elif method.family == "plain":
        assert rec["privacy"] is None
    if rec["capabilities"]["federated"]:
        assert comm["bytes_total"] > 0, "a federated method must send something"
    assert rec["family"] == method.family and rec["capabilities"]["family"] == method.family
    return rec


def check_reproducible(name: str) -> None:
    # the named reproduction mode: --seed alone never seeds DP noise (CSPRNG)
    a = run_experiment(_spec(name, reproducible_noise=True))
    b = run_experiment(_spec(name, reproducible_noise=True))
    assert a["metrics"] == b["metrics"]
    assert a["model_fingerprint"] == b["model_fingerprint"]


def check_refuses_other_models(name: str) -> None:
    m = lookup("method", name)
    for other in [x for x in ("glm", "mlp", "cnn", "gbdt") if x not in m.models]:
        with pytest.raises(ConfigError, match="model for method"):
            run_experiment(_spec(name, model=other))


def check_contract(name: str) -> dict:
    """Every check above, for one method (a plugin's test calls this); returns a record."""
    rec = check_complete_record(name)
    check_reproducible(name)
    check_refuses_other_models(name)
    m = lookup("method", name)
    if m.requires_epsilon:
        with pytest.raises(ConfigError, match="epsilon"):
            run_experiment(_spec(name, epsilon=None))
    elif not m.accepts_epsilon:
        with pytest.raises(ConfigError, match="epsilon does not apply"):
            run_experiment(_spec(name, epsilon=1.0))
    return rec


@pytest.mark.parametrize("name", METHODS)
def test_method_produces_a_complete_record(name):
    check_complete_record(name)


@pytest.mark.parametrize("name", METHODS)
def test_method_is_reproducible_with_a_seed(name):
    check_reproducible(name)


@pytest.mark.parametrize("name", METHODS)
def test_method_rejects_a_model_it_does_not_support(name):
    check_refuses_other_models(name)


@pytest.mark.parametrize("name", [n for n in METHODS if not lookup("method", n).requires_epsilon])
def test_epsilon_is_refused_where_it_sets_nothing(name):
    m = lookup("method", name)
    if m.accepts_epsilon:
        pytest.skip("calibrates its noise to --epsilon when given")
    with pytest.raises(ConfigError, match="epsilon does not apply"):
        run_experiment(_spec(name, epsilon=1.0))


@pytest.mark.parametrize("name", [n for n in METHODS if lookup("method", n).requires_epsilon])
def test_private_method_requires_epsilon(name):
    with pytest.raises(ConfigError, match="epsilon"):
        run_experiment(_spec(name, epsilon=None))


def test_vfl_beats_the_active_party_alone():
    vfl = run_experiment(_spec("vfl", epochs=30))
    local = run_experiment(_spec("local", epochs=30))
    assert vfl["metrics"]["accuracy"] > 0.9
    assert vfl["metrics"]["auc"] > local["metrics"]["auc"]
