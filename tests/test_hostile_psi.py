"""Hostile peers, round two (issue 45): PSI refuses bad points and proves its alignment.

Small-order points are refused whichever X25519 backend runs (OpenSSL here; crypto_mb where
this CPU and install have it), and the list of them is checked against OpenSSL itself. A peer's
round-3 positions of the wrong type (float, NaN, bool, str) are one PSIError; a reordered
round-2 reply or too few positions leave the parties with different rows, which the final check
(a hash of each party's aligned ID list, compared at party 0) stops before training.
"""

import numpy as np
import pytest

from protocols import psi
from protocols.psi import SMALL_ORDER, Crypto, PSIError
from securevfl.data.alignment import align_ids
from securevfl.errors import ProtocolError
from securevfl.runtime import InProcessRuntime


def _backends() -> list[tuple[str, object]]:
    out = [("openssl", psi._openssl_mult)]
    name, mult = psi.backend()
    if name == "crypto_mb":
        out.append((name, mult))
    return out


def test_the_small_order_list_is_what_openssl_refuses():
    """Independent check of SMALL_ORDER: OpenSSL's X25519 of each is zero (refused)."""
    s = psi.new_scalar()
    for u in SMALL_ORDER:
        with pytest.raises(PSIError, match="small-order"):
            psi._openssl_mult(s, u)


@pytest.mark.parametrize("which", ["openssl", "crypto_mb"])
def test_every_backend_refuses_small_order_points(which, monkeypatch):
    chosen = dict(_backends())
    if which not in chosen:
        pytest.skip("crypto_mb not loaded here (no ipp-crypto install or no AVX-512 IFMA)")
    monkeypatch.setattr(psi, "_BACKEND", (which, chosen[which]))
    ok = psi.hash_ids([b"a", b"b"])
    s = psi.new_scalar()
    assert len(Crypto().reblind(ok, s)) == len(ok)
    for u in SMALL_ORDER:
        with pytest.raises(PSIError, match="small-order point"):
            Crypto().reblind(ok + u, s)


class Hostile(InProcessRuntime):
    """Party 0 (or 1) alters one PSI message: ``what(value)`` replaces it."""

    def __init__(self, n, *, on: str, what) -> None:
        super().__init__(n)
        self.on, self.what, self.gathers = on, what, 0

    def send(self, value, *, src, dst, **kw):
        if self.on == "positions" and isinstance(value, np.ndarray):
            value = self.what(value)
        return super().send(value, src=src, dst=dst, **kw)

    def gather(self, values, *, dst, **kw):
        if self.on == "replies" and isinstance(values.get(1), bytes):
            self.gathers += 1
            if self.gathers == 2:  # round 2: party 1's re-blinded copy of party 0's points
                values = {**values, 1: self.what(values[1])}
        return super().gather(values, dst=dst, **kw)


IDS = {0: [f"id{i}" for i in range(40)], 1: [f"id{i}" for i in range(0, 80, 2)]}


@pytest.mark.parametrize(
    "forged",
    [
        lambda p: p.astype(np.float64),
        lambda p: np.full(len(p), np.nan),
        lambda p: p.astype(bool),
        lambda p: "0,1,2",
        lambda p: [int(v) for v in p],
        lambda p: p.reshape(-1, 1),
    ],
    ids=["float", "nan", "bool", "str", "list", "2d"],
)
def test_positions_of_the_wrong_type_are_one_line(forged):
    rt = Hostile(2, on="positions", what=forged)
    with pytest.raises(ProtocolError, match="party 1 got positions from party 0 that are not"):
        align_ids(rt, IDS)


def test_too_few_positions_are_caught_by_the_final_check():
    rt = Hostile(2, on="positions", what=lambda p: p[: len(p) // 2])
    with pytest.raises(ProtocolError, match="PSI left party 1 with other rows"):
        align_ids(rt, IDS)


def test_a_reordered_round_2_reply_is_caught_by_the_final_check():
    def reorder(blob: bytes) -> bytes:
        pts = np.frombuffer(blob, np.uint8).reshape(-1, 32)
        return pts[np.roll(np.arange(len(pts)), 1)].tobytes()

    rt = Hostile(2, on="replies", what=reorder)
    with pytest.raises(ProtocolError, match="PSI left party 1 with other rows"):
        align_ids(rt, IDS)
    assert rt.gathers >= 2


def test_an_honest_alignment_passes_the_final_check():
    rows = align_ids(InProcessRuntime(2), IDS)
    assert [IDS[0][i] for i in rows[0]] == [IDS[1][i] for i in rows[1]]
    assert len(rows[0]) == 20
