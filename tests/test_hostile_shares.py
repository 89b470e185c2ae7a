"""Hostile peers, round two (issue 45): the shares of fm-vfl's secure products are checked on
arrival (``protocols.share_checks``) before MPyC's or the RNS protocol's arithmetic uses them.

In-process: each checker refuses a share of the wrong length, type, field range or (RNS) a NaN,
fractional or oversized residue, naming the sender. Real processes: one MPyC party of three is
hostile (``tests/_hostile_mpyc_party.py``); the run stops with one line naming it, never a
traceback, a hang until the timeout or a wrong block.
"""

import numpy as np
import pytest

from protocols import shamir_launch as sl
from protocols import shamir_products as sp
from protocols.share_checks import (
    ShareError,
    _check_points,
    received_field_share,
    received_residues,
    received_seed,
)


def test_rns_shares_of_the_wrong_form_are_refused_naming_the_sender():
    good = np.arange(6, dtype="<f4").reshape(1, 2, 3)
    assert received_residues(good.tobytes(), sender=1, step="s", r=1, shape=(2, 3)).shape == (
        1,
        2,
        3,
    )
    for bad, why in [
        (good.tobytes()[:-4], "of 20 bytes, expected 24"),
        ("text", "of str"),
        (np.full(6, np.nan, "<f4").tobytes(), "not integers"),
        (np.full(6, 0.5, "<f4").tobytes(), "not integers"),
        (np.full(6, 2.0**21, "<f4").tobytes(), "not integers within"),
    ]:
        with pytest.raises(ShareError, match=f"party 1 sent a share at step 's' .*{why}"):
            received_residues(bad, sender=1, step="s", r=1, shape=(2, 3))
    with pytest.raises(ShareError, match="party 2 sent a share seed that is not 32 bytes"):
        received_seed(b"short", sender=2, size=32)


def test_field_shares_of_the_wrong_form_are_refused_naming_the_sender():
    p = 101
    ok = np.arange(4, dtype=np.int64)
    assert received_field_share(ok.tobytes(), sender=0, shape=(2, 2), order=p).shape == (2, 2)
    with pytest.raises(ShareError, match="party 0 sent an input share that is not 32 bytes"):
        received_field_share(ok.tobytes()[:-8], sender=0, shape=(2, 2), order=p)
    with pytest.raises(ShareError, match=r"outside the field \[0, 101\)"):
        received_field_share(np.full(4, 101).tobytes(), sender=0, shape=(2, 2), order=p)


class _Field:
    order = 101


class _Mpc:
    pid = 0

    def __init__(self):
        self.told = []

    def _securevfl_on_violation(self, why):
        self.told.append(why)


@pytest.mark.parametrize(
    "bad,why",
    [
        (np.arange(2), r"of shape \(2,\), expected \(3,\)"),
        (np.arange(3.0), "of dtype float64, not field elements"),
        (np.array([1, 2, 101]), "outside the field"),
        (np.array([1, "x", 2], dtype=object), "not integers"),
        ("abc", "not an array of field elements but str"),
        ([1, 2], r"of shape \(2,\), expected \(3,\)"),  # MPyC's scalar path: a list of ints
    ],
)
def test_mpyc_recombination_names_the_party_whose_share_is_bad(bad, why):
    mpc = _Mpc()
    own = (1, np.arange(3, dtype=object))
    _check_points(mpc, _Field, [own, (2, np.arange(3)), (3, np.arange(3))])
    with pytest.raises(ShareError, match=f"party 2 sent an MPyC share .*{why}"):
        _check_points(mpc, _Field, [own, (2, np.arange(3)), (3, bad)])
    assert mpc.told and mpc.told[0].startswith("party 2 sent")  # MPyC's task would only log


@pytest.fixture
def hostile_party(monkeypatch):
    """Party 1 of the next ``run_block_products`` runs the hostile program."""
    honest = sl.spawn_party

    def spawn(job, own, index, addresses, key):
        program = "tests._hostile_mpyc_party" if index == 1 else "protocols.mpyc_party"
        return honest(job, own, index, addresses, key, program=program)

    monkeypatch.setattr(sl, "spawn_party", spawn)
    return monkeypatch


@pytest.mark.networked
@pytest.mark.parametrize("mode,impl", [("rns-nan", "rns"), ("mpyc-short", "vectorized")])
def test_a_hostile_mpyc_party_is_named_in_one_line(hostile_party, mode, impl):
    hostile_party.setenv("SECUREVFL_HOSTILE", mode)
    M = {0: np.full((20, 3), 7, np.int64), 1: np.full((20, 2), 5, np.int64)}
    with pytest.raises(sp.ShamirProtocolError) as err:
        sl.run_block_products(
            M, {0: np.zeros((3, 2))}, [sp.Pair(0, 1, 0)], n_parties=3, receiver=2,
            frac_bits=4, noise_bound=1.0, impl=impl, timeout=60.0,
        )  # fmt: skip
    msg = str(err.value)
    assert "party 1 sent" in msg and "\n" not in msg and "Traceback" not in msg, msg
