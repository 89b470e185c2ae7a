"""The in-process runtime and the byte meter."""

import numpy as np
import pytest

from securevfl.errors import ConfigError, ProtocolError
from securevfl.runtime import InProcessRuntime, Meter, serialization


def test_send_returns_a_copy_and_meters_exact_bytes():
    rt = InProcessRuntime(3)
    x = np.arange(10.0)
    got = rt.send(x, src=1, dst=0)
    assert np.array_equal(got, x) and got is not x
    s = rt.meter.summary(3)
    assert s["bytes_total"] == len(serialization.dumps(x))
    assert s["bytes_by_party"]["1"]["sent"] == s["bytes_by_party"]["0"]["received"] > 0
    assert s["messages"] == 1 and s["rounds"] == 1


def test_broadcast_counts_one_message_per_receiver():
    rt = InProcessRuntime(4)
    rt.broadcast(np.ones(5), src=0, dsts=[1, 2, 3])
    s = rt.meter.summary(4)
    n = len(serialization.dumps(np.ones(5)))
    assert s["messages"] == 3 and s["rounds"] == 1 and s["bytes_total"] == 3 * n


def test_gather_skips_the_receivers_own_value():
    rt = InProcessRuntime(3)
    got = rt.gather({0: np.zeros(2), 1: np.ones(2), 2: np.full(2, 2.0)}, dst=0)
    assert sorted(got) == [0, 1, 2] and got[2][0] == 2.0
    assert rt.meter.summary(3)["messages"] == 2


def test_phases_are_kept_apart():
    rt = InProcessRuntime(2)
    with rt.meter.in_phase("setup"):
        rt.send(b"x" * 100, src=0, dst=1)
    rt.send(b"y", src=0, dst=1)
    by = rt.meter.summary(2)["by_phase"]
    assert by["setup"]["bytes"] > by["train"]["bytes"]


def test_bad_party_index_is_a_clear_error():
    rt = InProcessRuntime(2)
    with pytest.raises(ConfigError, match="dst must be a party index"):
        rt.send(1, src=0, dst=5)


def test_unpickler_refuses_arbitrary_classes():
    import pickle

    evil = pickle.dumps(Meter())
    with pytest.raises(ProtocolError, match="not a securevfl wire message"):
        serialization.loads(evil)
