"""PBM-VFL, NPQ and LDP-VFL on the shared split-NN core: records, secure aggregation, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from securevfl.context import RunSpec
from securevfl.errors import ConfigError, ProtocolError
from securevfl.experiment import run_experiment
from securevfl.methods import pbm_hooks
from securevfl.methods import pbm_vfl as mod
from securevfl.privacy.units import LABEL_EXPOSURE


def _spec(method: str, **kw) -> RunSpec:
    base = dict(
        method=method,
        dataset="breast",
        parties=3,
        model="mlp",
        epochs=2,
        batch_size=64,
        seed=0,
        embedding_dim=4,
    )
    base.update(kw)
    return RunSpec(**base)


def test_pbm_vfl_record_carries_both_units_and_config() -> None:
    rec = run_experiment(_spec("pbm-vfl", options={"b": 16, "beta": 0.1}))
    p = rec["privacy"]
    assert p["unit"] == "party-row" and p["delta"] == 1e-5
    # the headline composes every release of a party's rows (RDP): each may depend on any row
    assert p["accountant"].startswith("rdp")
    assert set(p["per_party"]) == {"0", "1", "2"}
    every = 4 * (2 * rec["n_train"] + rec["n_test"])  # P x (epochs x n_train + n_test)
    for v in p["per_party"].values():
        assert v["epsilon"] == p["epsilon"] and v["releases"] == every
    assert p["releases_per_party"] == every
    # exact label-dependent gradients reach the data parties: no sample unit (issue 31)
    assert p["by_unit"] == {"party-row": p["epsilon"]}
    assert p["releases_per_row"] == {"train": 8, "test": 4}  # private scoring: 1 use
    assert "target_epsilon" not in p and p["outside_guarantee"] == [LABEL_EXPOSURE]
    # the seed paper's per-row figure is kept, labelled as not a guarantee, and far smaller
    assert p["per_row_only"]["party-row"] * 10 < p["epsilon"]
    assert p["sampler"]["p_levels"] == [0.5 - 409 / 4096, 0.5 + 409 / 4096]  # floor(0.1 2^12)
    cfg = rec["config"]
    assert (cfg["b"], cfg["beta"], cfg["embedding_dim"], cfg["epochs"], cfg["batch_size"]) == (
        16,
        0.1,
        4,
        2,
        64,
    )
    # the accountant can be re-run from the record alone
    from securevfl.privacy.pbm_accountant import pbm_epsilon

    again = pbm_epsilon(
        "party-row",
        b=cfg["b"],
        beta=cfg["beta"],
        n_parties=rec["parties"],
        dim=cfg["embedding_dim"],
        uses=cfg["epochs"] * rec["n_train"] + rec["n_test"],
        delta=1e-5,
        kind="rdp",
    )
    assert again == pytest.approx(p["epsilon"], rel=1e-12)
    assert rec["comm"]["by_phase"]["setup"]["bytes"] > 3 * 32  # X25519 keys, metered apart
    assert 0.0 <= rec["metrics"]["accuracy"] <= 1.0


@pytest.mark.parametrize("method", ["pbm-vfl", "ldp-vfl"])
def test_epsilon_target_is_met_within_two_percent(method: str) -> None:
    """--epsilon E --delta D: achieved epsilon <= E and >= 0.98 E (pbm-vfl calibrates beta on
    the 2^-12 grid at fixed b, ldp-vfl its sigma)."""
    for target in (3.0, 8.0):
        rec = run_experiment(
            _spec(
                method,
                parties=2,
                epochs=1,
                embedding_dim=2,
                epsilon=target,
                delta=1e-6,
                options={"b": 8},
            )
        )
        p = rec["privacy"]
        assert p["target_epsilon"] == target and p["delta"] == 1e-6
        assert 0.98 * target <= p["epsilon"] <= target, (method, target, p["epsilon"])
        if method == "pbm-vfl":
            level = round(p["sampler"]["beta"] * 4096)
            assert p["sampler"]["beta"] == level / 4096 and 0 < level <= 1024
    if method == "pbm-vfl":  # beta = 2^-12 is the most noise the grid has
        with pytest.raises(ConfigError, match="cannot be"):
            run_experiment(_spec(method, parties=2, epochs=1, epsilon=1e-6, options={"b": 8}))
        with pytest.raises(ConfigError, match="within 2%"):  # beyond beta = 1/4: change b
            run_experiment(_spec(method, parties=2, epochs=1, epsilon=1e6, options={"b": 8}))


def test_plain_eval_is_listed_outside_the_guarantee() -> None:
    rec = run_experiment(_spec("ldp-vfl", epochs=1, options={"eval": "plain"}))
    out = rec["privacy"]["outside_guarantee"]
    assert any("plain embeddings" in o for o in out)
    assert rec["privacy"]["releases_per_row"]["test"] == 0


def test_packed_uplink_matches_r_bits_per_value() -> None:
    spec = dict(parties=3, epochs=1, embedding_dim=16, batch_size=100)
    pbm = run_experiment(_spec("pbm-vfl", options={"b": 64, "beta": 0.25}, **spec))
    npq = run_experiment(_spec("npq", **spec))
    assert pbm["extra"]["bits_per_value"] == 8  # bitlength(b*M) = bitlength(192)
    sizes = [100] * 4 + [55]  # 455 training rows in batches of 100
    # per party and step: masked values (header, B*P*r bits, 2 sealed shares, tag), the
    # server's unmasking request (3 survivors, 2 forwarded shares) and the answer (3 shares)
    from protocols.secagg import HEADER_BYTES, SHARE_RECORD_BYTES, TAG_BYTES

    frame = HEADER_BYTES + TAG_BYTES
    per_step = 2 * SHARE_RECORD_BYTES + frame  # masked message without its values
    per_step += frame + 4 + 3 * 4 + 2 * SHARE_RECORD_BYTES  # request
    per_step += frame + 3 * 32  # response
    packed = sum(3 * (per_step + b * 16 * 8 // 8) for b in sizes)
    floats = sum(3 * b * 16 * 4 for b in sizes)
    train = lambda r: r["comm"]["by_phase"]["train"]["bytes"]  # noqa: E731
    saved = train(npq) - train(pbm)
    # framing differs by < 200 B a message; pbm sends 3 messages a party and step, npq 1
    assert abs(saved - (floats - packed)) < 3 * 5 * 4 * 200


def test_pbm_vfl_is_reproducible_with_a_seed_despite_fresh_masks() -> None:
    a = run_experiment(_spec("pbm-vfl", epochs=1, reproducible_noise=True))
    b = run_experiment(_spec("pbm-vfl", epochs=1, reproducible_noise=True))
    assert a["model_fingerprint"] == b["model_fingerprint"]


def test_secure_sum_equals_plain_sum_of_quantized_values(monkeypatch) -> None:
    """The server's estimate is exactly C/(beta b)(sum q - bM/2) of what the parties quantized."""
    seen: dict[int, list[np.ndarray]] = {}
    orig = pbm_hooks.pbm_quantize

    def spy(x, **kw):
        q, ev = orig(x, **kw)
        seen.setdefault(kw["party"], []).append(q)
        return q, ev

    got: list[np.ndarray] = []
    orig_agg = mod.PBMSecAggHooks.aggregate

    def agg(self, ctx, messages, *, dst, step):
        h = orig_agg(self, ctx, messages, dst=dst, step=step)
        if h is not None:
            got.append(h)
        return h

    monkeypatch.setattr(pbm_hooks, "pbm_quantize", spy)  # the hooks quantize
    monkeypatch.setattr(mod.PBMSecAggHooks, "aggregate", agg)
    run_experiment(_spec("pbm-vfl", epochs=1, options={"b": 8, "beta": 0.2}))
    for step, h in enumerate(got):
        q_sum = sum(seen[k][step] for k in range(3))
        assert np.allclose(h, (q_sum - 8 * 3 / 2) / (0.2 * 8), atol=1e-5)


def test_one_dropout_is_recovered_two_abort_naming_them(monkeypatch) -> None:
    orig = mod.PBMSecAggHooks.party_message
    gone: set[int] = {1}
    sums = []
    orig_finish = mod.PBMSecAggHooks.aggregate

    def drop(self, ctx, k, emb, step):
        return None if (k in gone and step == 2) else orig(self, ctx, k, emb, step)

    def spy(self, ctx, messages, *, dst, step):
        h = orig_finish(self, ctx, messages, dst=dst, step=step)
        if step == 2:
            sums.append(self.server.survivors)
        return h

    monkeypatch.setattr(mod.PBMSecAggHooks, "party_message", drop)
    monkeypatch.setattr(mod.PBMSecAggHooks, "aggregate", spy)
    # M = 3, threshold 2: the round of step 2 finishes without party 1
    rec = run_experiment(_spec("pbm-vfl", epochs=1))
    assert sums == [[0, 2]] and 0.0 <= rec["metrics"]["accuracy"] <= 1.0
    assert rec["extra"]["secagg_dropouts"] == 1
    gone.add(2)
    with pytest.raises(ProtocolError, match=r"parties \[1, 2\] sent no masked values"):
        run_experiment(_spec("pbm-vfl", epochs=1))


@pytest.mark.parametrize(
    "tamper,match",
    [
        (lambda m: 12345, "party 1 sent a value of type int, not bytes"),
        (lambda m: m[:-1], "party 1's message is truncated"),
        (lambda m: m + b"x", "party 1's message is extended"),
        (lambda m: m[:60] + bytes([m[60] ^ 1]) + m[61:], "party 1's message fails authentic"),
    ],
)
def test_a_malformed_message_aborts_training_in_one_line_naming_the_party(
    monkeypatch, tamper, match
) -> None:
    orig = mod.PBMSecAggHooks.party_message

    def bad(self, ctx, k, emb, step):
        msg = orig(self, ctx, k, emb, step)
        return tamper(msg) if (k == 1 and step == 2) else msg

    monkeypatch.setattr(mod.PBMSecAggHooks, "party_message", bad)
    with pytest.raises(ProtocolError, match=match) as exc:
        run_experiment(_spec("pbm-vfl", epochs=1))
    assert "\n" not in str(exc.value)


def test_ldp_vfl_noise_and_privacy() -> None:
    rec = run_experiment(_spec("ldp-vfl", options={"b": 64, "beta": 0.25}))
    assert rec["extra"]["sigma"] == pytest.approx(math.sqrt(2 * 3 / (64 * 0.0625)))
    p = rec["privacy"]
    assert p["unit"] == "party-row" and set(p["per_party"]) == {"0", "1", "2"}
    assert 0 < p["by_unit"]["party-row"] == p["epsilon"] and "sample" not in p["by_unit"]
    assert rec["comm"]["by_phase"].get("setup") is None  # no secure aggregation


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(options={"beta": 0.3}), "beta must be <= 0.25"),
        (dict(options={"b": 0}), "b must be >= 1"),
        (dict(aggregation="concat"), "aggregation for method"),
        (dict(model="glm"), "model for method"),
        (dict(options={"b": 2**31}), "b must be <= 1024"),
        (dict(delta=2.0), "delta must be < 1"),
    ],
)
def test_bad_input_raises_config_error(kw, match) -> None:
    with pytest.raises(ConfigError, match=match):
        run_experiment(_spec("pbm-vfl", **kw))


def test_npq_has_no_privacy_and_no_options() -> None:
    rec = run_experiment(_spec("npq", epochs=1))
    assert rec["privacy"] is None
    with pytest.raises(ConfigError, match="epsilon does not apply"):
        run_experiment(_spec("npq", epochs=1, epsilon=1.0))
    with pytest.raises(ConfigError, match="does not apply"):
        run_experiment(_spec("npq", options={"b": 4}))


def test_secagg_demo_prints_the_recovered_sum(capsys) -> None:
    from bench.demos import secagg

    assert secagg.main(["--parties", "3", "--b", "4", "--dim", "3"]) == 0
    out = capsys.readouterr().out
    assert "server recovers q_hat" in out and out.count("PBM q") == 3
    with pytest.raises(ConfigError, match="parties must be >= 2"):
        secagg.main(["--parties", "1"])


def test_per_epoch_train_accuracy_is_recorded() -> None:
    rec = run_experiment(_spec("npq", epochs=3))
    acc = rec["stats"]["epoch_accuracy"]
    assert len(acc) == 3 and all(0.0 <= a <= 1.0 for a in acc)
    assert acc[-1] > 0.7  # breast is easy: the training forward pass learns within 3 epochs


def test_private_eval_goes_through_secure_aggregation() -> None:
    priv = run_experiment(_spec("pbm-vfl", epochs=1, reproducible_noise=True))
    plain = run_experiment(
        _spec("pbm-vfl", epochs=1, options={"eval": "plain"}, reproducible_noise=True)
    )
    assert priv["model_fingerprint"] == plain["model_fingerprint"]  # same training
    # 114 test rows in 2 batches of <= 64, packed at r = bitlength(64*3) = 8 bits, not float32
    from protocols.secagg import HEADER_BYTES, SHARE_RECORD_BYTES, TAG_BYTES

    ev = lambda r: r["comm"]["by_phase"]["eval"]["bytes"]  # noqa: E731
    # the values travel packed; on top: sealed shares, the survivor list and the vouches for
    # it (the consistency round), the unmasking request (with the dealers' commitments and the
    # vouches forwarded) and answer, tags: 5 messages per party and batch
    frame = HEADER_BYTES + TAG_BYTES
    # (3 survivors: 2 sealed shares out and 2 forwarded, 2 x 3 commitments in the masked
    # message, 2 vouches out, 2 commitments and 2 vouches forwarded, 3 shares back)
    protocol = 5 * frame + 4 * SHARE_RECORD_BYTES + 2 * (4 + 3 * 4) + (6 + 2 + 4 + 3) * 32
    assert ev(priv) - 3 * 2 * protocol < 0.5 * ev(plain)
    assert priv["comm"]["by_phase"]["eval"]["messages"] == 3 * 2 * 5
    with pytest.raises(ConfigError, match="eval must be"):
        run_experiment(_spec("pbm-vfl", options={"eval": "noisy"}))


@pytest.mark.slow
@pytest.mark.networked
def test_pbm_vfl_over_real_processes_matches_in_process() -> None:
    from securevfl.experiment import run_in_processes

    # b = 8 trials: the same protocol; each process's exact accountant then takes seconds
    spec = _spec(
        "pbm-vfl", parties=2, epochs=1, timeout=30.0, reproducible_noise=True, options={"b": 8}
    )
    net = run_in_processes(spec)
    local = run_experiment(spec)
    assert net["runtime"] == "processes"
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert net["metrics"] == local["metrics"]
    assert net["comm"]["by_phase"]["train"]["bytes"] == local["comm"]["by_phase"]["train"]["bytes"]


def test_a_setting_the_exact_accountant_cannot_analyse_in_minutes_is_refused_up_front() -> None:
    with pytest.raises(ConfigError, match=r"b \* parties must be <= 2048.*= 2500"):
        run_experiment(_spec("pbm-vfl", parties=10, epsilon=1.0, options={"b": 250}))
    # the largest accepted setting's level tables are still exact and cheap to build
    from securevfl.privacy import pbm_accountant as A

    assert len(A.level_pmfs(16, 0.1, 8)) == 16 * 8 + 1
