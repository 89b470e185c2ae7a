"""ECDH-PSI (protocols.psi) against a plain set intersection; metered bytes; malformed peers."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import protocols.psi as psi
from protocols.psi import KAT, POINT_BYTES, Crypto, PSIError, psi_star
from securevfl.runtime import InProcessRuntime


def _id_sets(K: int, n: int, overlap: float, seed: int) -> tuple[dict[int, list[bytes]], set]:
    """K sets of n IDs sharing round(overlap * n) IDs, the rest private to each party."""
    rng = np.random.default_rng(seed)
    common = [f"c{i}".encode() for i in range(round(overlap * n))]
    out = {}
    for k in range(K):
        own = [f"p{k}-{i}".encode() for i in range(n - len(common))]
        ids = common + own
        out[k] = [ids[i] for i in rng.permutation(len(ids))]  # each party its own row order
    return out, set(common)


@pytest.mark.parametrize("K", [2, 4])
@pytest.mark.parametrize("overlap", [0.0, 0.01, 0.5, 1.0])
def test_intersection_equals_the_plain_one_in_one_agreed_order(K, overlap):
    ids, common = _id_sets(K, 200, overlap, seed=K)
    rt = InProcessRuntime(K)
    rows = psi_star(rt, ids)
    kept = {k: [ids[k][i] for i in rows[k]] for k in range(K)}
    assert set(kept[0]) == common and len(kept[0]) == len(common)
    for k in range(1, K):
        assert kept[k] == kept[0]  # same IDs in the same order at every party
    # k's own points in (1 round), 0's out (1), re-blinded back (1), kept positions to each k
    c = rt.meter.summary(K)
    assert c["rounds"] == 3 + (K - 1) and c["messages"] == 4 * (K - 1)
    points = 200 * 3 * (K - 1)  # per pair: 0's points out and back, k's points in
    assert (
        points * POINT_BYTES
        <= c["bytes_total"]
        <= points * POINT_BYTES + 4 * len(common) * (K - 1) + 300 * (K - 1)
    )  # packed blobs: 32 bytes a point, a small pickle header per message


def test_uneven_sizes_and_a_subset_party():
    ids = {0: [b"a", b"b", b"c", b"d"], 1: [b"d", b"b"], 2: [b"x", b"b", b"d", b"a", b"y"]}
    rows = psi_star(InProcessRuntime(3), ids)
    kept = [[ids[k][i] for i in rows[k]] for k in range(3)]
    assert sorted(kept[0]) == [b"b", b"d"] and kept[0] == kept[1] == kept[2]


def test_the_wire_carries_no_plain_hash_and_fresh_scalars_each_run():
    """What party 1 receives is neither the IDs nor their unblinded hashes, and differs per run."""
    ids = {0: [b"alice", b"bob"], 1: [b"bob", b"carol"]}
    seen = []

    class Tap(InProcessRuntime):
        def broadcast(self, value, *, src, dsts=None, **kw):
            seen.append(value)
            return super().broadcast(value, src=src, dsts=dsts, **kw)

    for _ in range(2):
        psi_star(Tap(2), ids)
    hashed = psi.hash_ids(ids[0])
    plain = {hashed[o : o + 32] for o in range(0, len(hashed), 32)}
    for blob in seen:
        pts = {blob[o : o + 32] for o in range(0, len(blob), 32)}
        assert len(pts) == 2 and not pts & plain and b"alice" not in blob
    assert seen[0] != seen[1]


def test_invalid_or_truncated_points_from_a_peer_are_refused():
    s = psi.new_scalar()
    ok = psi.hash_ids([b"a", b"b"])
    p = (2**255 - 19).to_bytes(32, "little")  # u = p: not canonical
    for bad in (b"\xff" * 32, p, ok + b"\x00" * 31 + b"\x80"):  # the last: bit 255 set
        with pytest.raises(PSIError, match="not a canonical X25519 u-coordinate"):
            Crypto().reblind(bad, s)
    for small in (b"\x00" * 32, b"\x01" + b"\x00" * 31):  # u = 0 and u = 1: small order
        with pytest.raises(PSIError, match="small-order point"):
            Crypto().reblind(ok + small, s)
    with pytest.raises(PSIError, match="32-byte points, got 33"):
        Crypto().reblind(b"\x00" * 33, s)
    with pytest.raises(PSIError, match="expected 3 re-blinded points, got 2"):
        psi.check_blob(ok, 3)


def test_duplicate_ids_are_refused_before_anything_is_sent():
    rt = InProcessRuntime(2)
    with pytest.raises(ValueError, match="party 0's IDs must be distinct"):
        psi_star(rt, {0: [b"a", b"a"], 1: [b"a"]})
    assert rt.meter.summary(2)["bytes_total"] == 0


def test_worker_threads_compute_the_same_points(monkeypatch):
    monkeypatch.setattr(psi, "CHUNK", 16)  # several chunks from few IDs
    ids = [f"id{i}".encode() for i in range(40)]
    s = psi.new_scalar()
    done = []
    one = Crypto(workers=1).hash_blind(ids, s)
    with Crypto(workers=2, progress=done.append) as crypto:
        two = crypto.hash_blind(ids, s)
        again = crypto.reblind(two, s)  # the same thread pool serves every call of a run
        assert crypto._pool is not None
    assert crypto._pool is None  # workers stopped on leaving the block
    assert one == two and len(one) == 40 * POINT_BYTES and sum(done) == 80
    assert again == Crypto().reblind(one, s)
    # blinding commutes: b*(a*H) == a*(b*H), the property the comparison rests on
    t = psi.new_scalar()
    assert Crypto().reblind(one, t) == Crypto().reblind(Crypto().hash_blind(ids, t), s)


def test_hash_to_group_is_sha256_of_domain_and_id_with_the_top_bit_cleared():
    import hashlib

    ids = [f"C{i:09d}".encode() for i in range(300)]
    h = psi.hash_ids(ids)
    for k, i in enumerate(ids):
        d = bytearray(hashlib.sha256(psi.DOMAIN + i).digest())
        d[31] &= 0x7F
        assert h[32 * k : 32 * k + 32] == bytes(d)
    assert len(set(h[o : o + 32] for o in range(0, len(h), 32))) == 300


def test_each_backend_meets_rfc7748_and_they_agree_point_for_point():
    """OpenSSL's X25519 and (where this CPU and install have it) Intel crypto_mb give the same
    bytes: the RFC 7748 vector, and 1,001 hashed IDs (not a multiple of 8: padded lanes)."""
    scalar, u, expect = KAT
    assert psi._openssl_mult(scalar, u) == expect
    assert psi.backend()[1](scalar, u) == expect
    pts = psi.hash_ids([f"C{i:09d}".encode() for i in range(1001)])
    s = psi.new_scalar()
    ref = psi._openssl_mult(s, pts)
    assert psi.backend()[1](s, pts) == ref and len(ref) == len(pts)
    if psi.backend()[0] != "crypto_mb":
        pytest.skip("crypto_mb not loaded here (no ipp-crypto install or no AVX-512 IFMA)")


def test_openssl_fallback_runs_the_whole_protocol():
    """SECUREVFL_CRYPTO_MB=off forces OpenSSL: same intersection, fresh process (one backend
    is chosen per process)."""
    code = (
        "from protocols.psi import backend, psi_star\n"
        "from securevfl.runtime import InProcessRuntime\n"
        "ids = {0: [b'a', b'b', b'c'], 1: [b'c', b'x', b'a']}\n"
        "rows = psi_star(InProcessRuntime(2), ids)\n"
        "print(backend()[0], sorted(ids[0][i] for i in rows[0]))\n"
    )
    env = {**os.environ, "SECUREVFL_CRYPTO_MB": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "openssl [b'a', b'c']"


def test_align_raises_a_networked_frame_limit_to_psis_largest_message_never_lowers_it():
    """Party 0 receives n_x re-blinded points with party k's n_k own: 32 (n_x + n_k) bytes."""
    from securevfl.data.alignment import _limit_frames
    from securevfl.runtime.frame_limits import SLACK_BYTES, SLACK_FACTOR

    class Net:
        frame_limit = 1 << 20

        def limit_frames(self, nbytes):
            self.frame_limit = nbytes

    rt = Net()
    _limit_frames(rt, 1_000_000, {0: 1_000_000, 1: 300_000, 2: 700_000})
    assert rt.frame_limit == SLACK_FACTOR * 32 * 1_700_000 + SLACK_BYTES
    _limit_frames(rt, 10, None)  # a data party knows n_x only; a smaller bound keeps the limit
    assert rt.frame_limit == SLACK_FACTOR * 32 * 1_700_000 + SLACK_BYTES
    rt2 = Net()
    _limit_frames(rt2, 100_000, None)
    assert rt2.frame_limit == SLACK_FACTOR * 32 * 100_000 + SLACK_BYTES


def test_psi_bench_json_line_is_exact_and_names_the_backend(capsys):
    from bench.psi_bench import main

    assert main(["--json", "--sizes", "300"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["exact"] is True and line["detail"]["kept"] == 150
    assert line["bytes"] > 3 * 300 * POINT_BYTES and line["seconds"] > 0
    assert line["detail"]["x25519_backend"] in line["version"]
    assert main(["--json", "--sizes", "10,20"]) == 2
    assert "--json runs one size" in capsys.readouterr().err
    # the same rows as Parquet files (read through Arrow): the same intersection and bytes
    assert main(["--json", "--sizes", "300", "--format", "parquet"]) == 0
    pq_line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert pq_line["exact"] is True and pq_line["detail"]["format"] == "parquet"
    assert pq_line["bytes"] == line["bytes"] and line["detail"]["format"] == "csv"


def test_match_points_equals_the_whole_point_intersection_even_when_prefixes_collide():
    from protocols.psi import PSIError, match_points

    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (300, POINT_BYTES), dtype=np.uint8)
    y = np.concatenate([x[:120], rng.integers(0, 256, (200, POINT_BYTES), np.uint8)])

    def pairs(ix, iy):
        return sorted(zip(ix.tolist(), iy.tolist()))

    def plain(x, y):
        return sorted((i, j) for i in range(len(x)) for j in range(len(y)) if (x[i] == y[j]).all())

    assert plain(x, y) == [(i, i) for i in range(120)]
    assert pairs(*match_points(x.tobytes(), y.tobytes())) == plain(x, y)  # prefix path
    y[130, :8] = x[200, :8]  # a decoy: y's point shares x's prefix but is another point
    assert pairs(*match_points(x.tobytes(), y.tobytes())) == plain(x, y)
    x[250, :8] = x[260, :8]  # two points of one set share a prefix: the whole-point path
    assert pairs(*match_points(x.tobytes(), y.tobytes())) == plain(x, y)
    assert pairs(*match_points(x.tobytes(), b"")) == []
    with pytest.raises(PSIError, match="repeats a point"):
        match_points(np.concatenate([x, x[:1]]).tobytes(), y.tobytes())


def test_hash_to_u_is_sha256_of_the_domain_and_id_with_bit_255_cleared():
    import hashlib

    ids = [b"", b"C000000001", "é-17".encode(), bytes(range(200))]
    want = bytearray(b"".join(hashlib.sha256(psi.DOMAIN + i).digest() for i in ids))
    for o in range(31, len(want), 32):
        want[o] &= 0x7F
    assert psi.hash_ids(ids) == bytes(want)
