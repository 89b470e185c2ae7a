"""secureboost on ``--engine dask`` (issue 46, issue 44 item 3): the tasks compute the numbers the
in-process path computes (ciphertexts for the same randomness exponents, packed bin sums), the
randomness computed ahead serves one tree once, and a run gives the in-process trees. One small
cluster for the module, 512-bit keys, breast with 2 trees of depth 2."""

from __future__ import annotations

import gmpy2
import numpy as np
import pytest

import securevfl
from protocols import paillier_he as ph
from securevfl.engine import DaskEngine
from securevfl.errors import ProtocolError
from securevfl.methods import secureboost_protocol as sp
from securevfl.methods import secureboost_sums as hs
from securevfl.methods.secureboost_dask import BoostOffload, _draw
from securevfl.run_options import build_spec


@pytest.fixture(scope="module")
def engine():
    e = DaskEngine(workers=2)
    yield e
    e.close()


@pytest.fixture(scope="module")
def keys():
    """The label holder's key (CRT encryptor) and a data party's view of it."""
    pub, priv = ph.generate_keypair(512)
    h = ph.djn_base(pub)
    owner = sp.Crypto(pub, priv, ph.OwnerFixedBaseEncryptor(pub, priv, h))
    return owner, sp.Crypto(pub, None, ph.FixedBaseEncryptor(pub, h))


def test_tasks_encrypt_to_the_in_process_ciphertexts(engine, keys):
    owner, _ = keys
    off = BoostOffload(engine.client, owner, block_rows=7)  # blocks that do not divide the rows
    rng = np.random.default_rng(0)
    ms = sp.plaintexts(rng.uniform(-1, 1, 20), rng.uniform(0, 0.25, 20), owner.n)
    exps = [int(rng.integers(1, 2**62)) << 190 | i for i in range(20)]  # below 2^256
    data = off.encrypt(ms, off.draw(20, exps))
    want = [owner.fast._encrypt_with(m, a) for m, a in zip(ms, exps, strict=True)]
    assert ph.from_bytes(owner.pub, data) == want
    # full randomness (r^n): the in-process raw encryption's numbers for the same r
    full = BoostOffload(engine.client, sp.Crypto(owner.pub, owner.priv))
    rs = [int(rng.integers(2, 2**62)) for _ in ms]
    n, n2 = gmpy2.mpz(owner.n), owner.n2
    got = ph.from_bytes(owner.pub, full.encrypt(ms, full.draw(20, rs)))
    assert got == [(1 + m * n) % n2 * gmpy2.powmod(r, n, n2) % n2 for m, r in zip(ms, rs)]


def test_randomness_computed_ahead_is_fresh_and_serves_once(engine, keys):
    owner, _ = keys
    off = BoostOffload(engine.client, owner)
    ms = [5] * 6
    off.schedule(6, 2)  # two trees' randomness, computed ahead from now on
    assert len(off.ahead) == 2
    first = ph.from_bytes(owner.pub, off.encrypt(ms))
    second = ph.from_bytes(owner.pub, off.encrypt(ms))
    third = ph.from_bytes(owner.pub, off.encrypt(ms))  # the schedule spent: drawn anew
    assert not off.ahead and off.to_draw == (6, 0)
    assert len(set(first + second + third)) == 18  # 18 encryptions of 5, 18 ciphertexts
    exps = _draw(off.key, 200)  # n_bits/2 = 256 random bits each, none repeated
    assert max(a.bit_length() for a in exps) == 256 and len(set(exps)) == 200
    assert all(owner.priv.raw_decrypt(int(c)) == 5 for c in first + second + third)
    pool = off.draw(6)
    off.encrypt(ms, pool)
    with pytest.raises(ProtocolError, match="once"):
        off.encrypt(ms, pool)
    with pytest.raises(ProtocolError, match="once"):
        off.encrypt(ms[:3], off.draw(6))  # a pool of another size


def test_bin_sum_tasks_pack_the_in_process_products(engine, keys):
    owner, partner = keys
    rng = np.random.default_rng(1)
    rows, F, nb, nodes = 60, 5, 4, 3
    cts = [partner.encrypt(int(v)) for v in rng.integers(0, 2**20, rows)]
    bins = rng.integers(0, nb, size=(rows, F))
    node_of = rng.integers(-1, nodes, size=rows)  # -1: a row in no open node
    want = hs.pack_cells(partner.n2, hs.products(partner.n2, cts, bins, node_of, nodes, nb), 2, 128)
    off = BoostOffload(engine.client, partner)
    assert off.key is None  # a data party has no key to draw randomness with
    held = off.hold(ph.to_bytes(partner.pub, cts))  # the wire's bytes, read on the workers
    assert off.packed_products(held, bins, node_of, nodes, nb, 2) == want
    # the whole reply, DP noise included: the same noise draws land in the same slots
    for sd in (None, 0.5):
        args = (bins, node_of, nodes, nb)
        here = sp.bin_sums(partner, cts, *args, _noise(sd))
        there = sp.bin_sums(partner, held, *args, _noise(sd), off)
        opened = [sp.open_sums(owner, d, nodes, F, nb) for d in (here, there)]
        np.testing.assert_array_equal(opened[0], opened[1])
        assert here != there  # each reply re-randomised afresh


def _noise(sd: float | None):
    """The DP variant's noise argument from a fresh generator of seed 7 (None: no noise)."""
    return None if sd is None else (np.random.default_rng(7), sd, sd / 4)


def test_the_dask_engine_grows_the_in_process_trees(engine):
    given = {
        "method": "secureboost",
        "dataset": "breast",
        "seed": 3,
        "trees": 2,
        "depth": 2,
        "paillier_bits": 512,
    }
    a = securevfl.run_experiment(build_spec(given))
    spec = build_spec(
        {**given, "engine": "dask", "dask_scheduler": engine.client.scheduler.address}
    )
    b = securevfl.run_experiment(spec)
    assert a["model_fingerprint"] == b["model_fingerprint"]
    assert a["metrics"] == b["metrics"]
    assert b["extra"]["splits_by_party"]["1"] > 0  # the partner's bin sums chose splits
    assert b["extra"]["engine"]["0"]["engine"] == "dask" and "engine" not in a["extra"]
