"""Hostile peers, round two (issue 45): every message checked against what its step expects.

A hostile party substitutes one of its messages (wrong type, dtype, shape, NaN, infinity, a
list, a string) at a named step of a real in-process run (vfl with a GLM and with an MLP,
fm-vfl); the receiver refuses it with one ProtocolError naming itself, the sender and the step,
never a TypeError or matmul ValueError deep in a trainer, never a model trained on NaN. A forged
meter report is refused before it reaches the record.
"""

import re

import numpy as np
import pytest

from protocols import wire
from securevfl.context import RunSpec
from securevfl.errors import ProtocolError
from securevfl.experiment import run_experiment
from securevfl.runtime import Expect, InProcessRuntime, Meter
from securevfl.runtime.channel import check_peer_report


class Hostile(InProcessRuntime):
    """The in-process runtime, where party ``attacker`` replaces its first message at ``step``
    with ``forged`` (round-tripped through the wire, as a peer would send it)."""

    def __init__(self, n: int, attacker: int, step: str, forged) -> None:
        super().__init__(n)
        self.attacker, self.step, self.forged, self.done = attacker, step, forged, False

    def _delivered(self, value, *, src, dst, expect=None):
        if src == self.attacker and expect is not None and expect.step == self.step:
            if not self.done:
                self.done = True
                value = wire.loads(wire.dumps(self.forged))
        return super()._delivered(value, src=src, dst=dst, expect=expect)


FORGERIES = {
    "a string": "hello",
    "a list": [1.0, 2.0],
    "ints": np.arange(4),
    "wrong shape": np.zeros((3, 3)),
    "NaN": None,  # filled per step: the right shape with one NaN
    "infinity": None,
}


def _forged(kind: str, shape: tuple[int, ...]):
    if kind in ("NaN", "infinity"):
        a = np.zeros(shape)
        a.flat[0] = np.nan if kind == "NaN" else np.inf
        return a
    return FORGERIES[kind]


# (spec, attacker, step, receiver, the shape the step carries)
STEPS = [
    (dict(method="vfl", model="glm"), 1, "intermediate results", 0, (64,)),
    (dict(method="vfl", model="glm"), 0, "derivatives", 1, (64,)),
    (dict(method="vfl", model="glm"), 1, "scores", 0, (114,)),
    (dict(method="vfl", model="mlp"), 1, "embeddings", 0, (64, 8)),
    (dict(method="vfl", model="mlp"), 0, "gradients", 1, (64, 8)),
]


@pytest.mark.parametrize("kind", sorted(FORGERIES))
@pytest.mark.parametrize("spec,attacker,step,receiver,shape", STEPS)
def test_a_substituted_message_is_refused_naming_the_peer_and_the_step(
    spec, attacker, step, receiver, shape, kind
):
    rt = Hostile(2, attacker, step, _forged(kind, shape))
    run = RunSpec(dataset="breast", parties=2, epochs=1, batch_size=64, seed=0, **spec)
    with pytest.raises(ProtocolError) as err:
        run_experiment(run, rt)
    msg = str(err.value)
    assert f"party {receiver} refused the message of party {attacker} at step {step!r}" in msg
    assert "\n" not in msg
    assert rt.done


@pytest.mark.parametrize("forged", [{"lam0": 0.0, "lam": None}, {"lam0": "x"}, np.zeros(3)])
def test_fm_vfl_own_blocks_of_the_wrong_form_are_refused(forged):
    rt = Hostile(4, 1, "own block", forged)  # 3 data parties and the server, party 3
    run = RunSpec(method="fm-vfl", dataset="breast", parties=3, epsilon=1.0, seed=0)
    with pytest.raises(ProtocolError, match="party 3 refused the message of party 1 at step"):
        run_experiment(run, rt)


def test_expect_rules_name_what_differs():
    e = Expect("x", shape=(2, None), lo=-1.0, hi=1.0)
    assert e.check(np.zeros((2, 5)), src=1, dst=0).shape == (2, 5)
    for bad, why in [
        (np.zeros((3, 5)), "expected shape (2, any)"),
        (np.full((2, 1), 2.0), "outside"),
        (np.array([[1, 2]], dtype=np.int64), "array of float"),
        (np.array([[np.nan], [0.0]]), "NaN or infinite"),
        (True, "expected an array, got bool"),
    ]:
        with pytest.raises(ProtocolError, match=re.escape(why)):
            e.check(bad, src=1, dst=0)
    assert Expect("n", kind="int", lo=0).check(3, src=1, dst=0) == 3
    with pytest.raises(ProtocolError, match="expected an int"):
        Expect("n", kind="int").check(3.0, src=1, dst=0)
    with pytest.raises(ProtocolError, match="over the 4"):
        Expect("b", kind="bytes", max_len=4).check(b"12345", src=1, dst=0)
    assert Expect("o", optional=True).check(None, src=1, dst=0) is None


def _own_meter(rounds: int, messages: int) -> Meter:
    m = Meter()
    for _ in range(rounds):
        m.round()
    for _ in range(messages):
        m.message(src=0, dst=1, nbytes=100)
    return m


def test_a_forged_meter_report_is_refused_naming_the_peer():
    own = _own_meter(rounds=40, messages=20)
    honest = {
        "train": {
            "bytes_total": 4000,
            "messages": 40,
            "rounds": 40,
            "sent": {1: 4000},
            "received": {0: 4000},
        }
    }
    check_peer_report(honest, peer=1, own=own, n_parties=2, frame_limit=1 << 20)
    forged = {
        "train": {
            "bytes_total": 39_490_038_560,
            "messages": 81_000_080,
            "rounds": 40,
            "sent": {1: 39_490_038_560},
            "received": {0: 39_490_038_560},
        }
    }
    with pytest.raises(ProtocolError, match="party 1 sent a meter report that cannot be true"):
        check_peer_report(forged, peer=1, own=own, n_parties=2, frame_limit=1 << 20)
    for bad in (
        {"train": {**honest["train"], "sent": {0: 4000}}},  # claims another party's bytes
        {"train": {**honest["train"], "rounds": 41}},
        {"train": {**honest["train"], "messages": -1}},
        {"train": {**honest["train"], "bytes_total": 4001}},
        {"eval": honest["train"]},  # a phase this party never took part in
        {"train": "lots"},
        [1, 2],
    ):
        with pytest.raises(ProtocolError, match="party 1 sent a meter report"):
            check_peer_report(bad, peer=1, own=own, n_parties=2, frame_limit=1 << 20)
