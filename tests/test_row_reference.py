"""Delta coding of the uplink: both ends hold the same per-row values, the quantisation error
stays within one message's step (error feedback), and a run sends fewer bytes."""

import numpy as np
import pytest

from protocols.compress import decode, encode, max_error, quant_range
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.training.row_reference import RowReferences


def test_both_ends_agree_and_the_error_does_not_accumulate():
    rng = np.random.default_rng(0)
    n, d = 40, 8
    client, server = RowReferences(n, 8, 3), RowReferences(n, 8, 3)
    h = rng.normal(size=(n, d))
    sent_bits = []
    for _ in range(30):
        for idx in np.array_split(rng.permutation(n), 4):
            h[idx] += 0.05 * rng.normal(size=(len(idx), d))  # the model moves a little
            msg = client.send(1, idx, h[idx], lambda x, bits: encode(x, bits=bits))
            sent_bits.append(msg[1])
            got = server.receive(1, idx, msg)
            assert np.array_equal(got, client.values[1][idx])  # no flag, same decision
            diff = decode(msg).ravel()
            step = max_error(*quant_range(diff, msg[1]), msg[1])
            # the last difference was taken against what the server held: one step, not a sum
            assert np.abs(got - h[idx]).max() <= step * (1 + 1e-9) + 1e-6
    assert sent_bits[:4] == [8] * 4 and set(sent_bits[4:]) == {3}


def _spec(**options):
    return RunSpec(
        method="czofo-vfl", dataset="breast", parties=2, model="mlp", epochs=3, batch_size=64,
        seed=3, aggregation="concat",
        options={"schedule": "sync", "deltas": "sample", "q": 4, "uplink_bits": 8,
                 "downlink_bits": 2, "curve_points": 0, **options},
    )  # fmt: skip


def test_a_run_sends_fewer_uplink_bytes_and_still_learns():
    full = run_experiment(_spec())
    delta = run_experiment(_spec(uplink_delta_bits=4))
    for k in ("0", "1"):
        sent = [r["comm"]["bytes_by_party"][k]["sent"] for r in (full, delta)]
        # epoch 1 and the test rows at 8 bits, epochs 2-3 at 4 bits
        assert sent[1] < 0.8 * sent[0]
    assert delta["extra"]["uplink_delta_bits"] == 4
    acc = [r["metrics"]["accuracy"] for r in (full, delta)]
    assert acc[1] > 0.75 and acc[1] >= acc[0] - 0.03  # majority class: 0.63


def test_zoo_on_the_client_model_refuses_delta_coding():
    spec = RunSpec(
        method="zoo-vfl", dataset="breast", parties=2, model="mlp", aggregation="concat",
        options={"uplink_delta_bits": 3},
    )  # fmt: skip
    with pytest.raises(ConfigError, match="uplink_delta_bits must be 0"):
        run_experiment(spec)
