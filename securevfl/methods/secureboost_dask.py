"""SecureBoost's heavy arithmetic on a party's own Dask cluster (``--engine dask``).

The label holder's per-row encryption runs as tasks over row blocks, the data party's bin
sums as tasks over column groups and then over groups of packed replies. What the protocol
sends is unchanged: every ciphertext is the number the in-process path computes for the same
randomness exponent (``randomness_block`` calls the same encryptor; ``column_cells`` and
``pack_cells`` of ``secureboost_sums`` are the in-process functions), so the decrypted sums and
the trees are the same.

Randomness: the exponents are drawn in the party process from the OS CSPRNG, one per
ciphertext, and sent to the tasks; the workers compute h_s^a (DJN, by CRT with the label
holder's p and q) or r^n, which do not depend on the gradients. So every tree's randomness is
scheduled at key generation (``schedule``; at most ``AHEAD_VALUES`` ahead) and computed in the
background, in blocks of ``BLOCK_ROWS`` at a lower CPU priority (``BACKGROUND_NICE``): the
key holder's workers fill the cores the partners leave idle, and a tree's encryption is one
product per row, run first (``RandomnessPool``); a pool serves one tree and is then spent (no
randomness serves two ciphertexts). Workers build the CRT tables once per key
(``_encryptor``: a cache in the worker process keyed by n and h_s). What crosses to the workers
(the label holder's key, the party's bins, ciphertexts) stays inside the party's own cluster.
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np

from protocols import paillier_he as ph
from securevfl.engine import WAIT_S, wait_all
from securevfl.errors import ProtocolError
from securevfl.methods import secureboost_protocol as sp
from securevfl.methods import secureboost_sums as hs

_WORKER_CACHE: dict[Any, Any] = {}  # per worker: the key's encryptor, the tree's ciphertexts
BLOCK_ROWS = 1024  # rows per randomness task (~0.4 s at 2048 bits): the path's products interleave
AHEAD_VALUES = 1 << 19  # randomness values computed ahead at most (256 MiB at 2048 bits)
BACKGROUND_NICE = 5  # how much lower the randomness tasks' CPU priority is (os nice steps)


@dataclass
class RandomnessPool:
    """One tree's randomness on the cluster: a future per row block (``rows`` in all)."""

    rows: int
    blocks: list[Any]
    spent: bool = False


class BoostOffload:
    """A party's SecureBoost arithmetic as tasks on its engine's Dask client."""

    def __init__(
        self,
        client: Any,
        crypto: sp.Crypto,
        block_rows: int = BLOCK_ROWS,
        timeout: float = WAIT_S,
    ) -> None:
        self.timeout = float(timeout)  # each task's result is waited for at most this long
        self.client, self.c, self.block_rows = client, crypto, block_rows
        pub, priv, h = crypto.pub, crypto.priv, getattr(crypto.fast, "h_s", None)
        self.key = None  # the label holder's: (n, p, q, h_s), what a worker needs
        if priv is not None:
            self.key = (int(pub.n), int(priv.p), int(priv.q), None if h is None else int(h))
        self.ahead: deque[RandomnessPool] = deque()  # the trees' randomness, in tree order
        self.to_draw = (0, 0)  # (rows, trees) of the schedule not yet submitted
        self.workers = max(1, len(client.scheduler_info().get("workers", {})))

    # -- the label holder --------------------------------------------------------------------
    def draw(self, rows: int, exponents: list[int] | None = None) -> RandomnessPool:
        """Start computing ``rows`` fresh randomness values on the cluster (returns at once),
        as background tasks; ``exponents``: given by a test comparing paths, else drawn here."""
        if self.key is None:
            raise ProtocolError("only the key holder draws encryption randomness")
        if exponents is None:
            exponents = _draw(self.key, rows)
        if len(exponents) != rows:
            raise ProtocolError(f"{rows} exponents must be given, got {len(exponents)}")
        step = self.block_rows
        blocks = [
            self.client.submit(randomness_block, self.key, exponents[i : i + step], pure=False)
            for i in range(0, rows, step)
        ]
        return RandomnessPool(rows, blocks)

    def schedule(self, rows: int, trees: int) -> None:
        """Compute the randomness of ``trees`` trees of ``rows`` rows ahead, from now on: as
        many trees as ``AHEAD_VALUES`` allows are submitted at once, one more as each is spent,
        so the key holder's workers never wait for a tree to start (see ``BACKGROUND_NICE``)."""
        self.to_draw = (rows, trees)
        self._top_up()

    def _top_up(self) -> None:
        rows, trees = self.to_draw
        while trees and (not self.ahead or (len(self.ahead) + 1) * rows <= AHEAD_VALUES):
            self.ahead.append(self.draw(rows))
            trees -= 1
        self.to_draw = (rows, trees)

    def encrypt(self, ms: list[int], pool: RandomnessPool | None = None) -> bytes:
        """The ciphertexts of ``ms`` (bytes on the wire), one product each with the randomness
        of ``pool`` (default: the next tree's of the schedule, else drawn now); the pool is then
        spent. The products run before any background randomness (they are on the path)."""
        if pool is None:
            pool = self.ahead.popleft() if self.ahead else self.draw(len(ms))
            self._top_up()
        if pool.spent or pool.rows != len(ms):
            raise ProtocolError("a randomness pool serves one tree's rows, once")
        pool.spent = True
        step, n = self.block_rows, self.key[0]
        parts = [
            self.client.submit(
                encrypt_block, n, r, ms[i * step : (i + 1) * step], pure=False, priority=10
            )
            for i, r in enumerate(pool.blocks)
        ]
        return b"".join(wait_all(parts, self.timeout, "a block of ciphertexts"))

    # -- a data party ------------------------------------------------------------------------
    def hold(self, data: bytes) -> tuple[str, Any]:
        """The tree's ciphertexts as they arrived (bytes), on every worker once; each worker
        reads them into numbers once (``_ciphertexts``, which checks each lies in (0, n^2)).
        A handle for ``products``: shipping bytes costs far less than pickling numbers."""
        name = f"boost-cts-{uuid.uuid4().hex}"
        return name, self.client.scatter({name: data}, broadcast=True)[name]

    def products(
        self, cts: Any, bins: np.ndarray, node_of_row: np.ndarray, n_nodes: int, n_bins: int
    ) -> list:
        """``hs.products`` as tasks over column groups (the first also totals the nodes),
        joined here."""
        n2, n, (name, data) = self.c.n2, self.c.n, cts
        cts = (n, name, data)
        live = np.nonzero(node_of_row >= 0)[0]
        nodes = node_of_row[live].astype(np.int64)
        F = bins.shape[1]
        per = 2 * max(1, -(-F // (16 * self.workers)))  # groups of whole column pairs
        groups = [
            self.client.submit(
                _columns,
                cts,
                bins[live, s : s + per],
                live,
                nodes,
                n_nodes,
                n_bins,
                s == 0,
                pure=False,
            )
            for s in range(0, max(F, 1), per)
        ]
        done = wait_all(
            groups, self.timeout, "a group's bin sums"
        )  # the first also totals the nodes
        cols = [c for g, _ in done for c in g]
        return hs.join_columns(n2, cols, done[0][1], n_nodes, n_bins)

    def pack(self, acc: list, cap: int) -> list[gmpy2.mpz]:
        """``hs.pack_cells`` as tasks over groups of whole packed ciphertexts."""
        n2 = self.c.n2
        step = cap * -(-len(acc) // (cap * 2 * self.workers))
        packs = [
            self.client.submit(hs.pack_cells, n2, acc[i : i + step], cap, sp.PAIR_BITS, pure=False)
            for i in range(0, len(acc), step)
        ]
        return [ct for p in wait_all(packs, self.timeout, "packed bin sums") for ct in p]

    def packed_products(
        self,
        cts: Any,
        bins: np.ndarray,
        node_of_row: np.ndarray,
        n_nodes: int,
        n_bins: int,
        cap: int,
    ) -> list[gmpy2.mpz]:
        """``hs.pack_cells`` of ``hs.products``, as tasks."""
        return self.pack(self.products(cts, bins, node_of_row, n_nodes, n_bins), cap)


def _draw(key: tuple, count: int) -> list[int]:
    """``count`` fresh exponents from the OS CSPRNG: n_bits/2 random bits each (DJN; one read
    of the OS source for all, cut into whole exponents), or r uniform in [1, n) (full r^n)."""
    n, h = key[0], key[3]
    if h is None:
        return [secrets.randbelow(n - 1) + 1 for _ in range(count)]
    bits = -(-n.bit_length() // 2)
    width, mask = -(-bits // 8), (1 << bits) - 1
    pool = os.urandom(width * count)
    return [
        int.from_bytes(pool[i : i + width], "big") & mask for i in range(0, width * count, width)
    ]


def _encryptor(key: tuple) -> Any:
    """This worker's encryptor for ``key`` (the CRT tables, built once per key)."""
    hit = _WORKER_CACHE.get(key)
    if hit is None:
        n, p, q, h = key
        pub = ph.paillier.PaillierPublicKey(n)
        hit = ph.OwnerFixedBaseEncryptor(pub, ph.paillier.PaillierPrivateKey(pub, p, q), h)
        for old in [k for k in _WORKER_CACHE if isinstance(k, tuple) and k[0] != "cts"]:
            del _WORKER_CACHE[old]  # one key at a time: a worker holds one key's tables
        _WORKER_CACHE[key] = hit
    return hit


def randomness_block(key: tuple, exponents: list[int]) -> list[gmpy2.mpz]:
    """Worker: h_s^a mod n^2 for each exponent a (DJN), or a^n mod n^2 (full randomness), in
    the background (``_background``)."""
    _background()
    if key[3] is None:
        n = gmpy2.mpz(key[0])
        return [gmpy2.powmod(gmpy2.mpz(a), n, n * n) for a in exponents]
    return _encryptor(key).randomness_many(exponents)


def _background() -> None:
    """Lower this worker thread's CPU priority by ``BACKGROUND_NICE`` (once; Linux: the nice
    value is per thread): the randomness ahead then takes the cores the other parties' work
    leaves idle instead of sharing them with it."""
    tid = threading.get_native_id()
    if _WORKER_CACHE.get("nice") == tid:
        return
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + BACKGROUND_NICE))
    except (AttributeError, OSError):  # no per-thread priorities here: run at the same one
        pass
    _WORKER_CACHE["nice"] = tid


def encrypt_block(n: int, rand: list[gmpy2.mpz], ms: list[int]) -> bytes:
    """Worker: the ciphertexts ``(1 + m n) r mod n^2``, fixed-width bytes."""
    if len(rand) != len(ms):
        raise ProtocolError("one randomness value per plaintext")
    nz = gmpy2.mpz(n)
    width = ((nz * nz).bit_length() + 7) // 8
    return b"".join(
        int(ph.with_randomness(nz, m, r)).to_bytes(width, "big")
        for m, r in zip(ms, rand, strict=True)
    )


def _ciphertexts(held: tuple) -> tuple[gmpy2.mpz, list[gmpy2.mpz]]:
    """Worker: n^2 and the tree's ciphertexts of ``held`` = (n, name, bytes), read once per
    worker and tree (a cache of the last tree's)."""
    n, name, data = held
    hit = _WORKER_CACHE.get(("cts", name))
    if hit is None:
        pub = ph.paillier.PaillierPublicKey(n)
        hit = (gmpy2.mpz(pub.nsquare), ph.from_bytes(pub, data))
        for old in [k for k in _WORKER_CACHE if isinstance(k, tuple) and k[0] == "cts"]:
            del _WORKER_CACHE[old]
        _WORKER_CACHE[("cts", name)] = hit
    return hit


def _columns(held, bins, live, nodes, n_nodes, n_bins, totals: bool) -> tuple:
    """Worker: ``hs.block_cells`` of the columns of ``bins`` (the live rows' bins), with the
    node totals where ``totals``."""
    n2, cts = _ciphertexts(held)
    return hs.block_cells(n2, cts, bins, live, nodes, n_nodes, n_bins, totals)
