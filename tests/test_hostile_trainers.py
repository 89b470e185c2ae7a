"""Hostile peers, round two (issue 45): the cascade trainer (czofo-vfl, zoo-vfl, compressed-vfl)
and afe-vfl check what they receive before they use it.

A hostile party substitutes its first message at a named step of a real in-process run: the
wrong type, bytes that are no compressed message, a compressed message whose header claims
another (or a huge) shape, one that decodes to NaN, or the honest embedding with one row
missing. The receiver stops with one ProtocolError naming itself, the sender and the step,
never a CompressError, a torch shape error or a model trained on NaN.
"""

import struct

import numpy as np
import pytest

import baselines  # noqa: F401  (registers zoo-vfl and compressed-vfl)
from protocols import wire
from protocols.compress import decode, encode
from securevfl.context import RunSpec
from securevfl.errors import ProtocolError
from securevfl.experiment import run_experiment
from securevfl.runtime import Expect, InProcessRuntime


class Hostile(InProcessRuntime):
    """Party ``attacker`` replaces its first message at ``step`` by ``forge(honest)``,
    round-tripped through the wire as a peer would send it."""

    def __init__(self, n: int, attacker: int, step: str, forge) -> None:
        super().__init__(n)
        self.attacker, self.step, self.forge, self.done = attacker, step, forge, False

    def _delivered(self, value, *, src, dst, expect=None):
        rule = expect.get(src) if isinstance(expect, dict) else expect
        if src == self.attacker and rule is not None and rule.step == self.step and not self.done:
            self.done = True
            value = wire.loads(wire.dumps(self.forge(value)))
        return super()._delivered(value, src=src, dst=dst, expect=expect)


def _with_nan(msg: bytes) -> bytes:
    a = decode(msg)
    a.flat[0] = np.nan
    return encode(a, bits=32)


def _huge(msg: bytes) -> bytes:
    """The honest message with its first axis claimed to be 2^31 rows (nothing is decoded)."""
    return msg[:3] + struct.pack("<I", 1 << 31) + msg[7:]


PACKED = {
    "a string": lambda m: "hello",
    "an array instead of bytes": lambda m: np.zeros(4),
    "bytes that are no message": lambda m: b"\x09\x20\x01junk",
    "another shape": lambda m: encode(np.zeros((3, 3)), bits=32),
    "a huge claimed shape": _huge,
    "NaN": _with_nan,
    "a cut message": lambda m: m[:-3],
}

# (method, options, attacker, step): clients 0 and 1, the server 2
CASCADE = [
    ("compressed-vfl", {}, 1, "embeddings"),
    ("compressed-vfl", {}, 2, "gradients"),
    ("czofo-vfl", {"q": 2}, 1, "embeddings"),  # async: the table's fill (phase setup)
    ("czofo-vfl", {"q": 2, "entropy_coding": "both", "uplink_bits": 4, "downlink_bits": 4}, 2,
     "loss differences"),
    ("czofo-vfl", {"q": 2, "schedule": "sync", "deltas": "sample", "uplink_delta_bits": 4}, 2,
     "loss differences"),
    ("zoo-vfl", {"q": 2}, 0, "embeddings"),  # h and its q perturbed copies, stacked
]  # fmt: skip


@pytest.mark.parametrize("kind", sorted(PACKED))
@pytest.mark.parametrize("method,options,attacker,step", CASCADE)
def test_a_substituted_cascade_message_is_refused_naming_the_peer_and_the_step(
    method, options, attacker, step, kind
):
    rt = Hostile(3, attacker, step, PACKED[kind])
    spec = RunSpec(
        method=method, dataset="breast", parties=2, model="mlp", epochs=1, batch_size=64, seed=0,
        options={"curve_points": 0, **options},
    )  # fmt: skip
    with pytest.raises(ProtocolError) as err:
        run_experiment(spec, rt)
    msg = str(err.value)
    assert f"refused the message of party {attacker} at step {step!r}" in msg, msg
    assert "\n" not in msg
    assert rt.done


def test_a_packed_rule_reads_the_header_before_decoding():
    rule = Expect("x", kind="packed", shape=(2, 3))
    good = encode(np.ones((2, 3)), bits=8)
    assert rule.check(good, src=1, dst=0) is good
    with pytest.raises(ProtocolError, match=r"a compressed message: expected shape \(2, 3\)"):
        rule.check(_huge(good), src=1, dst=0)
    with pytest.raises(ProtocolError, match="a malformed compressed message"):
        rule.check(good + b"\0", src=1, dst=0)


def _drop_row(a):
    return a[1:]


def _text(a):
    return "1"


# afe-vfl (split: 3 data parties, the server 3; release-once: the holder 0 with columns)
AFE = [
    ({"variant": "full"}, 4, 1, "embeddings", _drop_row),
    ({"variant": "full"}, 4, 1, "embeddings", lambda a: np.full_like(a, np.inf)),
    ({"variant": "full"}, 4, 3, "gradients", _text),
    ({"release_schedule": "release-once", "active_features": True}, 2, 0, "labels",
     lambda a: np.full_like(a, 7)),
    ({"release_schedule": "release-once", "active_features": True}, 2, 0, "labels", _drop_row),
    ({"release_schedule": "release-once", "active_features": True}, 2, 1, "embeddings",
     _drop_row),
]  # fmt: skip


@pytest.mark.parametrize("options,n,attacker,step,forge", AFE)
def test_a_substituted_afe_message_is_refused_naming_the_peer_and_the_step(
    options, n, attacker, step, forge
):
    rt = Hostile(n, attacker, step, forge)
    spec = RunSpec(
        method="afe-vfl", dataset="breast", parties=3 if n == 4 else 2, model="mlp", epochs=1,
        batch_size=64, epsilon=4.0, seed=0, options=options,
    )  # fmt: skip
    with pytest.raises(ProtocolError) as err:
        run_experiment(spec, rt)
    msg = str(err.value)
    assert f"refused the message of party {attacker} at step {step!r}" in msg, msg
    assert rt.done


# secureboost (party 0 the label holder, party 1 a partner): small keys, one shallow tree
BOOST = [
    (1, "bin sums", lambda v: b"\x01\x02junk"),
    (1, "bin sums", lambda v: v + v),
    (1, "split answers", lambda v: {"records": v["records"], "left": "x"}),
    (0, "gradients", lambda v: {"rows": v["rows"] + 10_000, "cts": v["cts"]}),
    (0, "nodes", lambda v: {"node": v["node"][1:], "n": v["n"]}),
    (0, "split requests", lambda v: np.zeros((1, 2))),
]


@pytest.mark.parametrize("attacker,step,forge", BOOST)
def test_a_substituted_secureboost_message_is_refused(attacker, step, forge):
    rt = Hostile(2, attacker, step, forge)
    spec = RunSpec(
        method="secureboost", dataset="breast", parties=2, model="gbdt", seed=0,
        options={"trees": 1, "depth": 2, "bins": 8, "paillier_bits": 512},
    )  # fmt: skip
    with pytest.raises(ProtocolError) as err:
        run_experiment(spec, rt)
    assert f"refused the message of party {attacker} at step {step!r}" in str(err.value)
    assert rt.done


# he-vfl (data parties 0 and 1, the key holder 2): every message kind of the CKKS run
def _cut(m):
    """The honest message one part short: a cut ciphertext or public key, an opened gradient
    one feature short."""
    if isinstance(m, list):
        return [m[0][:64], *m[1:]]
    return m[:64] if isinstance(m, bytes) else m[:-1]


def _one_more(m):
    if isinstance(m, list):
        return [*m, m[0]]
    return m + m if isinstance(m, bytes) else np.append(m, 0.0)


def _garbled(m):
    """The honest length with SEAL's header zeroed: past the rules, refused by SEAL's load;
    an opened gradient with a NaN."""
    if isinstance(m, list):
        return [bytes(16) + m[0][16:], *m[1:]]
    return bytes(16) + m[16:] if isinstance(m, bytes) else np.append(m[1:], np.nan)


HE_FORGERIES = {
    "a string": lambda m: "hello",
    "cut": _cut,
    "garbled": _garbled,
    "one more": _one_more,
}
HE_STEPS = [
    (2, "he public key"),
    (1, "intermediate results"),
    (0, "derivatives"),
    (0, "he gradient"),
    (1, "he gradient"),
    (2, "he opened gradient"),
]


def _he_spec(**options):
    return RunSpec(
        method="he-vfl", dataset="breast", parties=2, model="glm", epochs=1, batch_size=64,
        seed=0, options=options,
    )  # fmt: skip


@pytest.mark.parametrize("kind", sorted(HE_FORGERIES))
@pytest.mark.parametrize("attacker,step", HE_STEPS)
def test_a_substituted_he_vfl_message_is_refused_naming_the_peer_and_the_step(attacker, step, kind):
    rt = Hostile(3, attacker, step, HE_FORGERIES[kind])
    with pytest.raises(ProtocolError) as err:
        run_experiment(_he_spec(), rt)
    msg = str(err.value)
    assert f"refused the message of party {attacker} at step {step!r}" in msg, msg
    assert "\n" not in msg
    assert rt.done


def _past_n_squared(m):
    return b"\xff" * len(m)


PAILLIER = [
    (2, "he public key", lambda m: b"\x01" * len(m), "odd and of 512 bits"),
    (1, "intermediate results", _past_n_squared, r"in \(0, n\^2\)"),
    (0, "he gradient", _past_n_squared, r"in \(0, n\^2\)"),
    (2, "he opened gradient", lambda m: [1 << 600] * len(m), "outside"),
]


@pytest.mark.parametrize("attacker,step,forge,why", PAILLIER)
def test_a_forged_paillier_message_is_refused(attacker, step, forge, why):
    rt = Hostile(3, attacker, step, forge)
    with pytest.raises(ProtocolError, match=why) as err:
        run_experiment(_he_spec(scheme="paillier", paillier_bits=512, timed_batches=1), rt)
    assert f"refused the message of party {attacker} at step {step!r}" in str(err.value)
