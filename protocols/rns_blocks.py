"""Row-block machinery of the rns secure product (:mod:`protocols.shamir_rns`): dealing a
block of rows into Shamir shares (seeded and explicit), issuing its messages, and a node's
running local product over the blocks (why the sum of per-block products of shares is a share of
the product: see :mod:`protocols.shamir_rns`, step 3)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from protocols import rns

DEAL_ROWS = 8192  # dealing and seed expansion run in row chunks that stay in cache
BLOCK_ROWS = 8 * DEAL_ROWS  # explicit shares travel in blocks of this many rows (pipelining;
# and MPyC frames a message with a 4-byte length, so one message must stay below 4 GiB)


def deal(
    M: np.ndarray,
    primes: Sequence[int],
    seeded: dict[int, np.ndarray],
    targets: Sequence[int],
) -> dict[int, np.ndarray]:
    """Shares f(x_j), j in ``targets``, of the degree-t polynomial through f(0) = M and the
    pseudo-random shares ``seeded = {party k: f(x_k)}`` (t of them).

    ``M``: signed ints as float64 (|M| < p/2, shape S); ``seeded[k]``: centred residues
    (r, *S). Returns centred residues (r, *S) per target party (float64).
    """
    ks = sorted(seeded)
    xs = [0, *[k + 1 for k in ks]]
    out = {j: np.empty((len(primes), *M.shape)) for j in targets}
    tmp = np.empty(M.shape)
    for i, p in enumerate(primes):
        for j in targets:
            lam = [c - p if c > p // 2 else c for c in rns.lagrange(xs, j + 1, p)]
            acc = out[j][i]
            np.multiply(M, float(lam[0]), out=acc)
            for c, k in zip(lam[1:], ks):
                acc += np.multiply(seeded[k][i], float(c), out=tmp)  # |terms| <= 2**40: exact
            rns.reduce(acc, p, tmp)
    return out


@dataclass
class Block:
    """One row block as this party sees it: its own dealt share (if it deals and is a node) and
    the pending messages carrying its explicit shares from the other dealers."""

    start: int
    rows: int
    own: dict[int, np.ndarray]
    pending: dict[int, Any]


def post_block(me, s, rows, matrix, dealers, nodes, seeded, streams, shapes, primes, send):
    """Deal (at a dealer) and issue every message of rows [s, s + rows): every party issues
    every message, in the same order (MPyC's labels advance in lockstep)."""
    own, pending = {}, {}
    for i in dealers:
        explicit = [j for j in nodes if j != i and j not in seeded[i]]
        if me == i:
            targets = [*explicit, i] if i in nodes else explicit
            dealt = deal_rows(matrix[s : s + rows], primes, streams[i], targets)
            if i in nodes:
                own[i] = dealt.pop(i)
            for j in explicit:
                send("input sharing", rns.pack(dealt[j]), i, j)
        else:
            for j in explicit:
                fut = send("input sharing", None, i, j)
                if me == j:
                    pending[i] = fut
    return Block(s, rows, own, pending)


class Accumulator:
    """A node's running H_j = Σ_blocks f_a(x_j)[block]ᵀ f_b(x_j)[block] mod p (then + Σ Z_i):
    the sum over row blocks of the products of shares is the share of the sum (same degree 2t,
    same evaluation point), so H_j is exactly the unchunked local product."""

    def __init__(self, is_node, pairs, shapes, primes, phases, t0):
        self.is_node, self.pairs, self.shapes, self.primes = is_node, pairs, shapes, primes
        self.phases, self.t0 = phases, t0
        self.out_shapes = [(shapes[p.a][1], shapes[p.b][1]) for p in pairs]
        width = sum(a * b for a, b in self.out_shapes)
        self.H = np.zeros((len(primes), width)) if is_node else None
        self.expanders: dict[int, rns.ResidueStream] = {}  # dealer -> its seed's stream here
        self.product_s = 0.0

    async def add(self, block: Block, seed_msgs: dict[int, Any]) -> None:
        if not self.is_node:
            return
        r = len(self.primes)
        shares = dict(block.own)
        for i, fut in seed_msgs.items():
            if i not in self.expanders:
                self.expanders[i] = rns.ResidueStream((await fut)[0])
            shares[i] = expand_rows(self.expanders[i], self.primes, (block.rows, self.shapes[i][1]))
        for i, fut in block.pending.items():
            shares[i] = rns.unpack((await fut)[0], r, (block.rows, self.shapes[i][1]))
        t1 = time.perf_counter()
        off = 0
        for p, (a, b) in zip(self.pairs, self.out_shapes):
            prod = rns.matmul_t_mod(shares[p.a], shares[p.b], self.primes)
            self.H[:, off : off + a * b] += prod.reshape(r, -1)
            off += a * b
        for i, q in enumerate(self.primes):  # |H| stays <= p: a sum of two centred residues
            rns.reduce(self.H[i], q)
        self.product_s += time.perf_counter() - t1

    async def finish(self, zs: dict[int, Any], width: int) -> np.ndarray | None:
        """Add Σ_i Z_i(x_j) (the re-randomisation) once; None at other parties."""
        if not self.is_node:
            self.phases.seconds["input sharing"] = time.perf_counter() - self.t0
            return None
        r = len(self.primes)
        for z in zs.values():
            if not isinstance(z, np.ndarray):
                z = rns.unpack((await z)[0], r, (1, width))
            self.H += np.asarray(z, dtype=np.float64).reshape(r, width)
        for i, q in enumerate(self.primes):
            rns.reduce(self.H[i], q)
        self.phases.seconds["local product"] = self.product_s
        self.phases.seconds["input sharing"] = time.perf_counter() - self.t0 - self.product_s
        return self.H


def deal_rows(
    rows: np.ndarray,
    primes: Sequence[int],
    streams: dict[int, rns.ResidueStream],
    targets: Sequence[int],
) -> dict[int, np.ndarray]:
    """The dealer's shares of ``rows`` for ``targets`` (float32 residues (r, rows, c)), in
    :data:`DEAL_ROWS` chunks; the seeded shares are drawn from ``streams`` chunk by chunk,
    exactly as :func:`expand_rows` draws them."""
    n, c = rows.shape
    out = {j: np.empty((len(primes), n, c), dtype=np.float32) for j in targets}
    for s in range(0, n, DEAL_ROWS):
        Mc = np.asarray(rows[s : s + DEAL_ROWS], dtype=np.float64)
        seeded = {k: st.centred(primes, Mc.shape) for k, st in streams.items()}
        for j, sh in deal(Mc, primes, seeded, targets).items():
            out[j][:, s : s + DEAL_ROWS] = sh
    return out


def expand_rows(
    stream: rns.ResidueStream, primes: Sequence[int], shape: tuple[int, int]
) -> np.ndarray:
    """The next ``shape`` rows of a seeded share (float32 residues (r, rows, c)), drawn in the
    dealer's chunk order (:func:`deal_rows` on the same block)."""
    n, c = shape
    out = np.empty((len(primes), n, c), dtype=np.float32)
    for s in range(0, n, DEAL_ROWS):
        out[:, s : s + DEAL_ROWS] = stream.centred(primes, (min(DEAL_ROWS, n - s), c))
    return out
