"""VFL-CZOFO and its baselines: the ZO estimator, the round plan, metered bytes, the server's
order of work, the Theorem 4.1 record, VAFL-DP's ε, both runtimes."""

import math

import numpy as np
import pytest

from protocols.compress import encoded_size
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.privacy.czofo_intrinsic import ACCOUNTANT, advanced_composition, step_epsilon
from securevfl.runtime import serialization
from securevfl.training.rounds import plan_rounds, releases_per_client
from securevfl.training.zeroth_order import sample_directions, zo_estimate


def _quadratic(rng, d):
    m = rng.normal(size=(d, d))
    return m @ m.T / d + np.eye(d), rng.normal(size=d)


@pytest.mark.parametrize("direction", ["sphere", "gaussian", "coordinate", "orthogonal"])
@pytest.mark.parametrize("per_sample", [True, False])
def test_zo_estimate_is_unbiased_for_the_smoothed_quadratic(direction, per_sample):
    """f(h) = ½ hᵀAh + bᵀh per row: E ĝ = ∇f_μ = ∇f for every direction kind (the μ² term has
    odd symmetry; signed coordinates give the central difference). Monte Carlo over directions."""
    rng = np.random.default_rng(7)
    d, b, q, mu, draws = 4, 3, 3 if direction == "orthogonal" else 5, 1.0, 4000
    A, c = _quadratic(rng, d)
    h = rng.normal(size=(b, d))

    def f(x):  # per-row loss, x (..., d)
        return 0.5 * np.einsum("...i,ij,...j->...", x, A, x) + x @ c

    grad = h @ A + c
    want = grad
    ests = []
    for _ in range(draws):
        u = sample_directions(rng, direction, (q, b, d))
        rows = f(h[None] + mu * u) - f(h)[None]  # (q, b)
        ests.append(zo_estimate(rows if per_sample else rows.sum(1), u, mu=mu, direction=direction))
    ests = np.asarray(ests)
    se = ests.std(axis=0) / math.sqrt(draws)
    assert np.all(np.abs(ests.mean(axis=0) - want) <= 4.5 * se + 1e-9)
    # and the test can tell a biased estimator apart (a forward difference along unsigned
    # coordinates would give ∇f + μ/2 diag(A)): that term is many standard errors wide
    assert np.any(np.abs(ests.mean(axis=0) - (grad + mu / 2 * np.diag(A))) > 5 * se)


def test_orthogonal_directions_are_a_frame_with_less_error_than_independent_ones():
    rng = np.random.default_rng(2)
    q, b, d = 4, 500, 8
    u = sample_directions(rng, "orthogonal", (q, b, d))
    gram = np.einsum("jbi,kbi->bjk", u, u)
    assert np.allclose(gram, np.eye(q)[None])  # orthonormal per row
    g = rng.normal(size=(b, d))

    def err(direction, q):
        u = sample_directions(rng, direction, (q, b, d))
        return np.mean(np.sum((zo_estimate(np.einsum("jbi,bi->jb", u, g), u, mu=1.0,
                                                   direction=direction) - g) ** 2, 1))  # fmt: skip

    gg = np.mean(np.sum(g**2, 1))
    assert err("orthogonal", q) == pytest.approx((d / q - 1) * gg, rel=0.15)
    assert err("sphere", q) == pytest.approx((d - 1) / q * gg, rel=0.15)
    assert err("orthogonal", d) < 1e-20  # a full frame: the exact directional derivatives
    with pytest.raises(ConfigError, match="q must be <= the dimension"):
        sample_directions(rng, "orthogonal", (d + 1, b, d))


def test_rounds_plan_bounds_and_records_staleness():
    free = plan_rounds(200, 20, 4, 3, schedule="async", seed=1)
    bound = plan_rounds(200, 20, 4, 3, schedule="async", seed=1, max_staleness=5)
    sync = plan_rounds(200, 20, 4, 3, schedule="sync", seed=1)
    assert all(len(r.active) == 1 for r in free) and len(free) == len(sync) == 40
    assert max(r.staleness for r in free) > 5
    assert max(r.staleness for r in bound) <= 5 and sum(len(r.refresh) for r in bound) > 0
    assert [r.active for r in free] == [r.active for r in bound]  # same draws either way
    assert all(r.active == (0, 1, 2) and r.staleness == 0 for r in sync)
    assert releases_per_client(sync, 3) == [800, 800, 800]
    assert sum(releases_per_client(free, 3)) == 800


def _spec(method="czofo-vfl", **kw):
    base = dict(
        method=method, dataset="breast", parties=2, model="mlp", epochs=1, batch_size=64, seed=3,
        aggregation="concat",
    )  # fmt: skip
    opts = kw.pop("options", {})
    base.update(kw)
    return RunSpec(**base, options=opts if method == "vfl" else {"curve_points": 0, **opts})


def _wire(nbytes):
    """Bytes a message of ``nbytes`` compressed bytes takes on the wire (pickle frame)."""
    return len(serialization.dumps(bytes(nbytes)))


def test_metered_bytes_are_the_packed_sizes_and_replies_are_q_scalars():
    q, P = 6, 8
    rec = run_experiment(
        _spec(embedding_dim=P, options={"schedule": "sync", "q": q, "uplink_bits": 4,
                                        "downlink_bits": 8})
    )  # fmt: skip
    n = rec["n_train"]
    sizes = [min(64, n - s) for s in range(0, n, 64)]
    up = sum(_wire(encoded_size((b, P), bits=4)) for b in sizes)
    down = len(sizes) * _wire(encoded_size((q,), bits=8))
    assert rec["comm"]["by_phase"]["train"]["bytes"] == 2 * (up + down)
    server = rec["comm"]["bytes_by_party"]["2"]
    assert server["sent"] == 2 * down  # the replies: q quantised scalars per batch, no b x d_h
    assert down / len(sizes) < encoded_size((64, P)) / 20
    # split learning in the same topology returns the b x d_h float32 gradient
    fo = run_experiment(_spec("compressed-vfl", embedding_dim=P, options={"uplink_bits": 32}))
    grads = sum(_wire(encoded_size((b, P))) for b in sizes)
    assert fo["comm"]["bytes_by_party"]["2"]["sent"] == 2 * grads


def test_compressed_vfl_at_32_bits_is_split_learning():
    """Same models, same batches, float32 both ways: the server topology changes no parameter."""
    plain = run_experiment(_spec("vfl", options={}))
    fo = run_experiment(_spec("compressed-vfl", options={"uplink_bits": 32}))
    assert fo["model_fingerprint"] == plain["model_fingerprint"]
    assert fo["comm"]["bytes_total"] > plain["comm"]["bytes_total"]  # both clients' traffic


def test_server_takes_the_deltas_before_it_steps(monkeypatch):
    """The authors' code steps the top model first, so each δ mixes two models: not here."""
    from securevfl.training import cascade_trainer as ct

    seen = []
    real = ct.CascadeTrainer._deltas

    def spy(self, parts, k, moved, base_rows, y):
        seen.append([p.detach().clone() for p in self.state.top.parameters()])
        return real(self, parts, k, moved, base_rows, y)

    monkeypatch.setattr(ct.CascadeTrainer, "_deltas", spy)
    firsts = []
    real_train = ct.CascadeTrainer.train

    def train(self):
        firsts.append([p.detach().clone() for p in self.state.top.parameters()])
        return real_train(self)

    monkeypatch.setattr(ct.CascadeTrainer, "train", train)
    run_experiment(_spec(batch_size=1000, options={"schedule": "sync"}))  # one round, 2 replies
    assert len(seen) == 2
    for params in seen:  # both clients' δ at the initial (pre-step) server model
        assert all(np.array_equal(a, b) for a, b in zip(params, firsts[0], strict=True))


def test_record_carries_theorem_41_as_a_heuristic_not_a_guarantee():
    recs = {q: run_experiment(_spec(options={"q": q, "deltas": "sample"})) for q in (1, 16)}
    for q, rec in recs.items():
        p = rec["privacy"]
        assert p["epsilon"] is None and p["accountant"] == ACCOUNTANT
        assert any("not a DP guarantee" in s for s in p["outside_guarantee"])
        f = p["intrinsic_heuristic"]
        for k, v in p["per_party"].items():  # T: the ZO replies each client received
            assert v["intrinsic_heuristic"]["T"] == rec["extra"]["replies"][k] > 0
        assert f["q"] == q and f["zeta"] > 0 and f["epsilon_bar"] > f["epsilon_step"] > 0
        assert f["epsilon_step"] == pytest.approx(
            step_epsilon(zeta=f["zeta"], sigma=math.sqrt(f["sigma_sq"]), n=f["N"],
                         delta=f["delta"])
        )  # fmt: skip
    # more directions, less estimator error: σ² falls roughly like 1/q
    s1, s16 = (recs[q]["privacy"]["intrinsic_heuristic"]["sigma_sq"] for q in (1, 16))
    assert 4 < s1 / s16 < 64


def test_posters_table_2_does_not_compose_to_its_printed_epsilon_bar():
    """δ̄ = 9.4e-2 with δ = δ' = 1e-6 means T ≈ 94,000 steps; ε = 2.8e-3 then gives ε̄ ≈ 5.3."""
    T = round((9.4e-2 - 1e-6) / 1e-6)
    bar, dbar = advanced_composition(2.8e-3, steps=T, delta=1e-6, delta_prime=1e-6)
    assert dbar == pytest.approx(9.4e-2, rel=1e-3)
    assert 5 < bar < 6 and bar < 85.9 / 10


def test_vafl_dp_meets_its_epsilon_counting_every_row_release():
    # the split (VAFL cascade) schedule; release-once: tests/test_release_once.py
    rec = run_experiment(
        _spec("vafl-dp", epsilon=50.0, delta=1e-5, options={"release_schedule": "split"})
    )
    p = rec["privacy"]
    assert p["unit"] == "party-row" and 0.98 * 50 <= p["epsilon"] <= 50.0
    n_train, n_test = rec["n_train"], rec["n_test"]
    sent = sum(v["sent"] for k, v in rec["comm"]["bytes_by_party"].items() if k != "2")
    assert sent > 0
    # table fill + every upload of the round plan + the test rows, per client
    assert sum(v["releases"] for v in p["per_party"].values()) == 2 * (n_train + n_test) + n_train


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"q": 0}, "q must"),
        ({"mu": -1.0}, "mu must"),
        ({"uplink_bits": 0}, "uplink_bits must"),
        ({"downlink_bits": 33}, "downlink_bits must"),
        ({"topk": 1.5}, "topk must"),
        ({"schedule": "later"}, "schedule must"),
        ({"direction": "up"}, "direction must"),
        ({"direction": "orthogonal", "q": 9}, "q must be <= embedding_dim"),
        ({"deltas": "row"}, "deltas must"),
        ({"max_staleness": -2}, "max_staleness must"),
        ({"entropy_coding": "sideways"}, "entropy_coding must"),
    ],
)
def test_bad_options_are_refused(opts, match):
    with pytest.raises(ConfigError, match=match):
        run_experiment(_spec(options=opts))


@pytest.mark.networked
@pytest.mark.slow
@pytest.mark.parametrize("method", ["czofo-vfl"])
def test_same_fingerprints_in_both_runtimes(method):
    from bench.runner import PLUGINS
    from securevfl.experiment import run_in_processes

    eps = {"epsilon": 50.0, "delta": 1e-5} if method == "vafl-dp" else {}
    # stochastic rounding on both links: each party's rounding draws must match across runtimes
    opts = {
        "max_staleness": 2,
        "curve_points": 2,
        "stochastic_rounding": "both",
        "clip_range": "up",
        "entropy_coding": "both",
    }
    spec = _spec(method, timeout=60, options=opts, **eps)
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["runtime"] == "processes"
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert set(net["model_fingerprint"]) == {"0", "1", "top"}
    assert net["comm"]["bytes_total"] == local["comm"]["bytes_total"] > 0
    assert net["extra"]["curve"] == local["extra"]["curve"]
    assert net["extra"]["staleness"] == local["extra"]["staleness"]


def test_report_section_reads_bytes_to_reach_from_the_curve(tmp_path):
    from bench.reports import czofo

    sl = run_experiment(
        _spec("compressed-vfl", epochs=3, options={"uplink_bits": 32, "curve_points": 6})
    )
    cz = run_experiment(_spec(epochs=3, options={"schedule": "sync", "deltas": "sample", "q": 10,
                                                 "curve_points": 6}))  # fmt: skip
    target = 0.9 * sl["metrics"]["accuracy"]
    first = next(p for p in sl["extra"]["curve"] if p["accuracy"] >= target)
    assert czofo.bytes_to_reach(sl, target) == first["train_bytes"]
    md = czofo.render([sl, cz], tmp_path)
    assert "| breast, d_h=8, b=64 | split learning (server, sync) |" in md
    assert "czofo-vfl (sync, δ per sample, q=10, up 8b / down 8b)" in md
    assert (
        "split learning's bytes / these" in md
        and "T = 93,999 steps" in md
        and "not the printed 85.9" in md
    )
    assert (tmp_path / "czofo_convergence_breast_dh8_b64.png").exists()
