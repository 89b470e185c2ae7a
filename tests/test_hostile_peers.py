"""Hostile peers (issue 30): what a malicious party can send, and that it is refused, named.

- wire: mutated and forged payloads never execute, never amplify, fail only with WireError;
- frames: a peer announcing a frame over the run's derived limit on a real socket is refused
  from the header, named, with no memory growth (tests/_oversize_party.py);
- secure aggregation: the issue's tampering scenarios (truncation, extension, bit flips,
  replays, forged senders, non-bytes, a second unmasking request, forged seed shares with t and
  more than t responders, forged pair-mask reveals, wrong dealing, a silent survivor) each abort
  naming the culprit, never a wrong sum; honest runs with dropouts give the exact sum.
"""

import re
import struct
import tracemalloc

import numpy as np
import pytest

from protocols import shamir, wire
from protocols.secagg import (
    HEADER_BYTES,
    SERVER,
    SHARE_RECORD_BYTES,
    SecAggAbort,
    SecAggParty,
    SecAggServer,
    _mac,
    modulus_bits,
)


def _payloads():
    return [
        wire.dumps(np.arange(64, dtype=np.float32).reshape(8, 8)),
        wire.dumps({"keys": [b"x" * 32, b"y" * 32], "session": 7, "t": (1.5, None, True)}),
        wire.dumps([np.zeros(3, dtype=np.int64), "text", {1: 2}]),
    ]


def test_mutated_payloads_decode_or_refuse_within_bounded_memory():
    rng = np.random.default_rng(0)
    tracemalloc.start()
    try:
        for base in _payloads():
            for _ in range(700):
                b = bytearray(base)
                for _ in range(int(rng.integers(1, 4))):  # flip, overwrite or cut
                    i = int(rng.integers(len(b)))
                    kind = rng.integers(3)
                    if kind == 0:
                        b[i] ^= 1 << int(rng.integers(8))
                    elif kind == 1:
                        b[i] = 0xFF
                    else:
                        del b[i:]
                        break
                try:
                    wire.loads(bytes(b))
                except wire.WireError:
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20  # no message of < 1 KB made the decoder hold more than 64 MB


@pytest.mark.parametrize("n", [8, 16, 32])
def test_short_forged_payloads_never_amplify(n):
    """Every n-byte payload with the format's header and 0xFF sizes is refused or tiny."""
    head = wire.dumps(None)[: max(1, len(wire.dumps(None)) - 1)]
    rng = np.random.default_rng(n)
    tracemalloc.start()
    try:
        for _ in range(2000):
            body = bytes(rng.integers(0, 256, size=n, dtype=np.uint8))
            for forged in (head + body, head + b"\xff" * n, body):
                try:
                    wire.loads(forged)
                except wire.WireError:
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def _claims(tag: bytes, body: bytes) -> bytes:
    return wire.MAGIC + tag + body


# 32-byte-class payloads that name a huge size: 2 GiB bytes, a 2^32-item list, a 2^40-element
# float64 array, an int array of 2^40 ints, a 64 KiB int (the largest allowed) without its bytes
AMPLIFIERS = {
    "bytes": _claims(b"b", (2**31).to_bytes(4, "little") + b"x" * 20),
    "list": _claims(b"l", (2**32 - 1).to_bytes(4, "little") + b"N" * 20),
    "array": _claims(
        b"a", b"\x03<f8" + b"\x01" + (2**40).to_bytes(8, "little") + (2**43).to_bytes(8, "little")
    ),
    "intarray": _claims(b"O", b"\x01\x01" + (2**40).to_bytes(8, "little") + b"\0" * 16),
    "bigint": _claims(b"I", (2**16).to_bytes(4, "little") + b"\xff" * 20),
}


@pytest.mark.parametrize("name", sorted(AMPLIFIERS))
def test_a_32_byte_amplification_payload_is_refused_without_allocating(name):
    payload = AMPLIFIERS[name]
    assert len(payload) <= 40
    tracemalloc.start()
    try:
        with pytest.raises(wire.WireError):
            wire.loads(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the payload made the old decoder allocate 2 GB


def test_a_pickle_stream_is_refused_not_run():
    import pickle

    with pytest.raises(wire.WireError, match="not a securevfl wire message"):
        wire.loads(pickle.dumps(print))


# ------------------------------------------------------------------ oversize frames, real sockets


@pytest.mark.networked
@pytest.mark.slow  # two party processes start (imports dominate: the abort itself takes ms)
def test_an_oversize_frame_on_a_real_socket_aborts_naming_the_peer_with_bounded_memory():
    """Party 1 announces a 3 GiB frame on loopback and streams 256 MiB: party 0 refuses it from
    the header (its run's derived limit is ~1.6 MB), names party 1, buffers nothing."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from protocols.processes import free_ports

    root = Path(__file__).resolve().parents[1]
    script = str(root / "tests" / "_oversize_party.py")
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("SECUREVFL_MAX_FRAME_MB", None)
    victim = subprocess.Popen(
        [sys.executable, script, "victim", *addresses],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    attacker = subprocess.Popen(
        [sys.executable, script, "attacker", *addresses, str(3 << 30)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        out, err = victim.communicate(timeout=120)
    finally:
        for p in (victim, attacker):
            if p.poll() is None:
                p.kill()
        attacker.wait(timeout=30)
    assert victim.returncode == 0, err.decode()[-2000:]
    got = json.loads(out.decode().strip().splitlines()[-1])
    # the frame's header is refused (the victim's 30 s timeout would name the wait instead)
    assert "party 1 sent a frame of 3221225472 bytes" in got["error"], got
    assert got["limit"] < 8 << 20  # derived from the small run, not the old 256 MiB cap
    assert got["rss_growth"] < 200 << 20, got  # the 256 MiB streamed were never buffered


# ------------------------------------------------- secure aggregation: the 15 scenarios
# Each scenario is a hostile party (or server) tampering with one message of a 5-party
# aggregation (threshold t = 3); each must abort naming the culprit, in one line, and the server
# never returns a sum. Honest runs (with and without dropouts) give the exact sum.

M, N, T = 5, 10, 3


def _agg():
    """Five parties after key agreement, their values and round-1 masked messages."""
    bits = modulus_bits(M * 8)
    srv = SecAggServer(M, bits=bits, threshold=T)
    parties = [SecAggParty(i, M, bits=bits, threshold=T) for i in range(M)]
    table = srv.relay({p.index: p.public_key for p in parties})
    for p in parties:
        p.agree(table, srv.session, srv.public_key)
    q = np.arange(M * N).reshape(M, N) % 9
    msgs = {p.index: p.mask(q[p.index], round_id=1, batch_id=1) for p in parties}
    return srv, parties, q, msgs


def _collect(srv, msgs):
    return srv.collect(msgs, round_id=1, batch_id=1, count=N)


def _requests(srv, parties, msgs, *, round_id=1, batch_id=1):
    """Masked messages in, the consistency round run honestly, the unmasking requests out."""
    checks = srv.collect(msgs, round_id=round_id, batch_id=batch_id, count=N)
    return srv.requests({v: parties[v].vouch(c) for v, c in checks.items()})


def _answers(parties, reqs, who=None):
    return {v: parties[v].respond(r) for v, r in reqs.items() if who is None or v in who}


def _retag(msg: bytes, key: bytes, pos: int) -> bytes:
    """``msg`` with one body bit flipped at ``pos`` and re-tagged with ``key`` (its sender's)."""
    body = bytearray(msg[:-32])
    body[pos] ^= 1
    return bytes(body) + _mac(key, bytes(body))


def _flip(msg: bytes, pos: int) -> bytes:
    b = bytearray(msg)
    b[pos] ^= 1
    return bytes(b)


def s_truncated(srv, parties, q, msgs):
    return lambda: _collect(srv, {**msgs, 1: msgs[1][:-1]}), 1, "truncated"


def s_extended(srv, parties, q, msgs):
    return lambda: _collect(srv, {**msgs, 1: msgs[1] + b"\0"}), 1, "extended"


def s_bit_flip(srv, parties, q, msgs):
    return lambda: _collect(srv, {**msgs, 3: _flip(msgs[3], HEADER_BYTES)}), 3, "authentication"


def s_replayed_masked_message(srv, parties, q, msgs):
    old = parties[4].mask(q[4], round_id=0, batch_id=1)  # an earlier round's message, as it was
    return lambda: _collect(srv, {**msgs, 4: old}), 4, "expected a masked"


def s_replayed_body_under_fresh_header(srv, parties, q, msgs):
    old = parties[2].mask(q[2] + 1, round_id=0, batch_id=1)
    replay = msgs[2][:HEADER_BYTES] + old[HEADER_BYTES:]
    return lambda: _collect(srv, {**msgs, 2: replay}), 2, "fails authentication"


def s_forged_sender_id(srv, parties, q, msgs):
    # party 3 submits party 4's message as its own: the header names sender 4
    return lambda: _collect(srv, {**msgs, 3: msgs[4]}), 3, "expected a masked"


def s_forged_sender_header(srv, parties, q, msgs):
    # party 4's body under party 3's header: party 3's key does not verify it
    forged = msgs[3][:HEADER_BYTES] + msgs[4][HEADER_BYTES:]
    return lambda: _collect(srv, {**msgs, 3: forged}), 3, "authentication"


def s_non_bytes_message(srv, parties, q, msgs):
    return lambda: _collect(srv, {**msgs, 0: [1, 2]}), 0, "type list, not bytes"


def s_replayed_response(srv, parties, q, msgs):
    old = _answers(parties, _requests(srv, parties, msgs))  # a finished aggregation's responses
    srv.finish(old)
    msgs2 = {p.index: p.mask(q[p.index], round_id=2, batch_id=1) for p in parties}
    reqs = _requests(srv, parties, msgs2, round_id=2)
    answers = {**_answers(parties, reqs), 2: old[2]}
    return lambda: srv.finish(answers), 2, "expected a unmasking response|expected a response"


def s_second_unmasking_request(srv, parties, q, msgs):
    reqs = _requests(srv, parties, msgs)
    parties[2].respond(reqs[2])
    return lambda: parties[2].respond(reqs[2]), SERVER, "already answered"


def s_tampered_request(srv, parties, q, msgs):
    reqs = _requests(srv, parties, msgs)
    return lambda: parties[2].respond(_flip(reqs[2], len(reqs[2]) - 40)), SERVER, "authentication"


def s_server_swaps_a_forwarded_share(srv, parties, q, msgs):
    # the server alters party 4's encrypted share for party 0 and re-tags with its own key:
    # AES-GCM under the 0-4 pair key names party 4's share
    reqs = _requests(srv, parties, msgs)
    # the records end where the dealers' commitments and the vouches (32 bytes each) begin
    forged = _retag(reqs[0], srv._auth[0], len(reqs[0]) - 32 - 2 * 32 * (M - 1) - 5)
    return lambda: parties[0].respond(forged), 4, "party 4's share for party 0"


def s_forged_seed_share_exactly_t(srv, parties, q, msgs):
    answers = _answers(parties, _requests(srv, parties, msgs), who=(0, 1, 3))  # exactly t = 3
    answers[3] = _retag(answers[3], parties[3]._auth, HEADER_BYTES + 32 * 1 + 31)
    return lambda: srv.finish(answers), 3, "party 3's share of party 1's self-mask seed"


def s_forged_seed_share_more_than_t(srv, parties, q, msgs):
    answers = _answers(parties, _requests(srv, parties, msgs))  # all 5 > t
    answers[0] = _retag(answers[0], parties[0]._auth, HEADER_BYTES + 32 * 4 + 31)
    return lambda: srv.finish(answers), 0, "party 0's share of party 4's self-mask seed"


def s_forged_pair_mask_reveal(srv, parties, q, msgs):
    del msgs[4]  # party 4 dropped: survivors reveal their pair masks with it
    answers = _answers(parties, _requests(srv, parties, msgs))
    ns = 4  # survivors' seed shares come first, then one reveal per dropped party
    answers[1] = _retag(answers[1], parties[1]._auth, HEADER_BYTES + 32 * ns + 40)
    return lambda: srv.finish(answers), 1, "party 1's pair mask with dropped party 4"


def s_dealer_shares_wrong_seed(srv, parties, q, msgs):
    # party 2 deals shares of another seed than the one it masked with (and committed to)
    real = shamir.share
    shamir.share = lambda s, **kw: real((s + 1) % shamir.PRIME, **kw)
    try:
        msgs[2] = parties[2].mask(q[2], round_id=1, batch_id=2)
    finally:
        shamir.share = real
    others = {k: parties[k].mask(q[k], round_id=1, batch_id=2) for k in range(M) if k != 2}
    reqs = _requests(srv, parties, {**others, 2: msgs[2]}, batch_id=2)
    answers = _answers(parties, reqs)
    return lambda: srv.finish(answers), 2, "dealt wrongly by party 2"


def s_silent_survivor_with_dropout(srv, parties, q, msgs):
    del msgs[4]
    answers = _answers(parties, _requests(srv, parties, msgs))
    del answers[2]  # 2 holds pair masks with the dropped party 4: it must answer
    return lambda: srv.finish(answers), 2, r"parties \[2\] sent no unmasking response"


def s_dealer_commits_to_a_wrong_share_for_an_honest_responder(srv, parties, q, msgs):
    # party 2 (the dealer) commits to another share for party 0 than the one it sealed for it:
    # party 0 checks the share against the commitment before answering and names party 2
    need = len(msgs[2]) - 32 - 32 * (2 * M) + 32 * 1  # seed commitment, then one per share
    at = need + 32 * 0  # the commitment to party 0's share
    body = bytearray(msgs[2][:-32])
    body[at] ^= 1
    msgs[2] = bytes(body) + _mac(parties[2]._auth, bytes(body))
    reqs = _requests(srv, parties, msgs)
    return lambda: parties[0].respond(reqs[0]), 2, "dealt wrongly by party 2"


SCENARIOS = {
    f.__name__[2:]: f
    for f in (
        s_truncated,
        s_extended,
        s_bit_flip,
        s_replayed_masked_message,
        s_replayed_body_under_fresh_header,
        s_forged_sender_id,
        s_forged_sender_header,
        s_non_bytes_message,
        s_replayed_response,
        s_second_unmasking_request,
        s_tampered_request,
        s_server_swaps_a_forwarded_share,
        s_dealer_commits_to_a_wrong_share_for_an_honest_responder,
        s_forged_seed_share_exactly_t,
        s_forged_seed_share_more_than_t,
        s_forged_pair_mask_reveal,
        s_dealer_shares_wrong_seed,
        s_silent_survivor_with_dropout,
    )
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_secagg_tampering_aborts_naming_the_culprit_never_a_wrong_sum(name):
    srv, parties, q, msgs = _agg()
    attack, culprit, match = SCENARIOS[name](srv, parties, q, msgs)
    with pytest.raises(SecAggAbort, match=match) as exc:
        attack()  # returns a sum only if the tampering went unnoticed
    assert exc.value.party == culprit
    text = str(exc.value)
    if culprit == SERVER:
        assert "server" in text, text
    else:
        assert re.search(rf"(party {culprit}\b|parties \[[^\]]*\b{culprit}\b)", text), text
    assert "\n" not in text  # one line


@pytest.mark.parametrize("drop,answer", [((), None), ((), (0, 3, 4)), ((4,), None), ((0, 3), None)])
def test_secagg_honest_runs_with_and_without_dropouts_give_the_exact_sum(drop, answer):
    """Dropouts (up to M - t) and, without dropouts, any t responders give the exact sum."""
    srv, parties, q, msgs = _agg()
    for k in drop:
        del msgs[k]
    total = srv.finish(_answers(parties, _requests(srv, parties, msgs), who=answer))
    alive = [k for k in range(M) if k not in drop]
    assert np.array_equal(total, q[alive].sum(axis=0))


def test_a_server_sending_different_survivor_lists_learns_nothing_beyond_the_sum():
    """Bonawitz et al.'s attack on dropout recovery: the server tells parties 0, 1, 2 that party 4
    survived (so they would reveal shares of b_4) and party 3 that party 4 dropped (so it would
    reveal its pair mask with 4): together with 4's masked message that is 4's input. With the
    consistency round no party answers, so the server gets neither shares nor pair masks."""
    srv, parties, q, msgs = _agg()
    checks = srv.collect(msgs, round_id=1, batch_id=1, count=N)
    assert set(checks) == set(range(M))
    # the server re-makes party 3's list without party 4 (it holds every auth key)
    head = checks[3][:HEADER_BYTES]
    fake = head + struct.pack(">I4I", 4, 0, 1, 2, 3)
    checks[3] = fake + _mac(srv._auth[3], fake)
    vouches = {v: parties[v].vouch(c) for v, c in checks.items()}
    # party 3 vouched for its 4-party list (3 vouches): the server pads it to the real list's
    # size and re-tags it with 3's auth key, to build everyone's requests as if all agreed
    short = vouches[3][:-32] + bytes(32)
    vouches[3] = short + _mac(srv._auth[3], short)
    reqs = srv.requests(vouches)
    # ... and party 3's request names the list it vouched for (the server re-makes it too)
    body = reqs[3][HEADER_BYTES:-32]
    ns = struct.unpack_from(">I", body)[0]
    head3 = reqs[3][:HEADER_BYTES] + struct.pack(">I4I", 4, 0, 1, 2, 3)
    rest = body[4 + 4 * ns :]
    n_rec = SHARE_RECORD_BYTES * (ns - 1)
    keep = [0, 1, 2]  # the other survivors of the fake list, in the order of the real one
    fwd = b"".join(rest[SHARE_RECORD_BYTES * i :][:SHARE_RECORD_BYTES] for i in keep)
    coms = b"".join(rest[n_rec + 32 * i :][:32] for i in keep)
    tags = b"".join(rest[n_rec + 32 * (ns - 1) + 32 * i :][:32] for i in keep)
    forged3 = head3 + fwd + coms + tags
    reqs[3] = forged3 + _mac(srv._auth[3], forged3)
    revealed = {}
    for v, req in reqs.items():
        with pytest.raises(SecAggAbort, match="did not vouch for the survivor list") as err:
            revealed[v] = parties[v].respond(req)
        assert err.value.party == SERVER and "\n" not in str(err.value)
    assert revealed == {}  # no share of b_4 and no pair mask with 4 left any party


def test_a_second_different_survivor_list_is_refused():
    srv, parties, q, msgs = _agg()
    checks = srv.collect(msgs, round_id=1, batch_id=1, count=N)
    parties[0].vouch(checks[0])
    head = checks[0][:HEADER_BYTES]
    fake = head + struct.pack(">I3I", 3, 0, 1, 2)
    with pytest.raises(SecAggAbort, match="two survivor lists"):
        parties[0].vouch(fake + _mac(srv._auth[0], fake))
