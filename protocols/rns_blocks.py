"""Row-block machinery of the rns secure product (:mod:`protocols.shamir_rns`): dealing a
block of rows into Shamir shares (seeded and explicit), issuing its messages, and a node's
running local product over the blocks (why the sum of per-block products of shares is a share of
the product: see :mod:`protocols.shamir_rns`, step 3).

Scaled shares (:func:`deal_rows`): the dealer of M with pseudo-random shares s_k = f(x_k) at the
t seeded nodes k gives every other node j the share f(x_j) MULTIPLIED by a public integer D_j,
the common denominator of its Lagrange coefficients through 0 and the x_k, so that
D_j f(x_j) = n_0 M + Σ_k n_k s_k with small integers n (x = 1, 2, 3, t = 1: 2M + s or M + 2s, D =
3). This costs two float32 passes per residue instead of float64 field multiplications. Node j's
local product is then D_aj D_bj (f_aᵀf_b)(x_j); it multiplies its accumulated block by the
inverse of D_aj D_bj mod p once, before the re-randomisation, so what it opens is exactly the
unscaled H_j. What a party sees changes only by a public invertible factor (D_j f(x_j) is a
bijection of f(x_j) mod p), so privacy is as before."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from protocols import rns
from protocols.share_checks import received_residues, received_seed

DEAL_ROWS = 8192  # dealing and seed expansion run in row chunks that stay in cache
KEPT_MAX = 3 * 2**20  # a dealer's own share, left unreduced: |v| <= 1.5 p < 3 * 2**20
# explicit shares travel in blocks of this many rows (pipelining; and MPyC frames a message with a
# 4-byte length, so one message must stay below 4 GiB). One dealing chunk: a block's shares (2 MB
# for 21 columns and 3 primes) stay in cache from dealing to sending and multiplying; 100k rows,
# 3 parties: 0.28 s and 0.26 CPU-s in all against 0.49 s and 0.41 CPU-s with 65,536-row blocks
BLOCK_ROWS = DEAL_ROWS


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


def dealing_coefficients(
    seeded: Sequence[int], targets: Sequence[int]
) -> dict[int, tuple[int, tuple[int, ...]]]:
    """For each target party j: ``(D_j, (n_0, n_k for k in sorted(seeded)))``, integers with
    D_j f(x_j) = n_0 f(0) + Σ_k n_k f(x_k) for every polynomial f of degree <= len(seeded)
    (Lagrange through 0 and the seeded points, x = party + 1; D_j > 0 the lcm of denominators)."""
    xs = [0, *[k + 1 for k in sorted(seeded)]]
    out = {}
    for j in targets:
        lams = []
        for a, xa in enumerate(xs):
            lam = Fraction(1)
            for b, xb in enumerate(xs):
                if b != a:
                    lam *= Fraction(j + 1 - xb, xa - xb)
            lams.append(lam)
        d = math.lcm(*(lam.denominator for lam in lams))
        out[j] = (d, tuple(int(lam * d) for lam in lams))
    return out


def share_scale(node: int, seeded: Sequence[int]) -> int:
    """The public factor D by which ``node`` holds its share of a dealer whose seeded nodes are
    ``seeded`` (1 for a seeded node: its share is the stream's output itself)."""
    return 1 if node in seeded else dealing_coefficients(seeded, [node])[node][0]


def combine_dtype(coeffs: dict[int, tuple[int, tuple[int, ...]]], mmax: float, primes) -> type:
    """float32 where every combination ``n_0 M + Σ n_k s_k`` stays within 1.5 p in magnitude
    (then float32 holds it and :func:`combine` reduces it exactly, see there), else float64
    (exact below 2**51 with :func:`rns.reduce`)."""
    h = (max(primes) - 1) / 2
    bound = max(abs(n[0]) * mmax + sum(abs(c) for c in n[1:]) * h for _, n in coeffs.values())
    if bound <= 1.5 * min(primes):
        return np.float32
    if bound < 2.0**51:
        return np.float64
    raise ValueError(f"share combinations must stay below 2**51, got a bound of {bound:.3g}")


def combine(
    Mn: np.ndarray,
    seeded: Sequence[np.ndarray],
    nums: Sequence[int],
    p: int,
    acc,
    tmp,
    reduce: bool = True,
) -> np.ndarray:
    """``acc = Mn + Σ_k nums[k] seeded[k]`` (``Mn`` = n_0 M, made once per chunk for every
    prime) reduced to the centred residue mod p, in place (``acc``, ``tmp``: arrays of M's shape
    and dtype). In float32, exact for |v| <= 1.5 p (the caller checks it,
    :func:`combine_dtype`): v and q p are integers below 2**24; fl(v * fl(1/p)) is within
    2**-23 * 1.5 < 1/(2p) of v/p, and v/p, p odd, is never closer than 1/(2p) to a
    half-integer, so rint gives the nearest q and v - q p is the centred residue in [-p/2, p/2].
    ``reduce=False`` leaves the float32 sum as it is (|v| <= 1.5 p, exact: a share that stays
    with the dealer, whose product is reduced after the multiplication)."""
    if not nums:
        np.copyto(acc, Mn)
    elif nums[0] == 1:  # the first term written with the sum: one pass fewer
        np.add(Mn, seeded[0], out=acc)
    else:
        np.multiply(seeded[0], nums[0], out=acc)
        acc += Mn
    for c, sk in zip(nums[1:], seeded[1:]):
        if c == 1:
            acc += sk
        else:
            acc += np.multiply(sk, c, out=tmp)
    if acc.dtype == np.float32 and not reduce:
        return acc
    if acc.dtype == np.float64:
        return rns.reduce(acc, p, tmp)
    np.multiply(acc, np.float32(1.0 / p), out=tmp)
    np.rint(tmp, out=tmp)
    tmp *= np.float32(p)
    acc -= tmp
    return acc


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
            keep = i if i in nodes else None
            dealt = deal_rows(matrix[s : s + rows], primes, streams[i], targets, keep)
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

    def __init__(self, is_node, pairs, shapes, primes, phases, t0, scales=None):
        self.is_node, self.pairs, self.shapes, self.primes = is_node, pairs, shapes, primes
        self.scales = scales or {}  # dealer -> the public factor D of this node's shares
        self.phases, self.t0 = phases, t0
        self.out_shapes = [(shapes[p.a][1], shapes[p.b][1]) for p in pairs]
        width = sum(a * b for a, b in self.out_shapes)
        self.H = np.zeros((len(primes), width)) if is_node else None
        self.expanders: dict[int, rns.ResidueStream] = {}  # dealer -> its seed's stream here
        self.buffers: dict[int, np.ndarray] = {}  # dealer -> one chunk of its seeded share
        self.product_s = 0.0

    async def add(self, block: Block, seed_msgs: dict[int, Any]) -> None:
        """Multiply one row block in, :data:`DEAL_ROWS` rows at a time; seeded shares are
        expanded chunk by chunk into buffers reused across chunks and blocks (float64: the
        product converts nothing), in the dealer's draw order."""
        if not self.is_node:
            return
        r = len(self.primes)
        full = dict(block.own)
        for i, fut in block.pending.items():
            full[i] = received_residues(
                (await fut)[0], sender=i, step="input sharing", r=r,
                shape=(block.rows, self.shapes[i][1]),
            )  # fmt: skip
        for i, fut in seed_msgs.items():
            if i not in self.expanders:
                seed = received_seed((await fut)[0], sender=i, size=rns.ResidueStream.SEED_BYTES)
                self.expanders[i] = rns.ResidueStream(seed)
                self.buffers[i] = np.empty((r, DEAL_ROWS, self.shapes[i][1]))
        t1 = time.perf_counter()
        expand_s = 0.0
        for s in range(0, block.rows, DEAL_ROWS):
            rows = min(DEAL_ROWS, block.rows - s)
            shares = {i: v[:, s : s + rows] for i, v in full.items()}
            te = time.perf_counter()
            for i, stream in self.expanders.items():
                buf = self.buffers[i][:, :rows]
                for k, q in enumerate(self.primes):
                    stream.fill_centred(q, buf[k])  # buf[k]: contiguous (rows, c)
                shares[i] = buf
            expand_s += time.perf_counter() - te
            off = 0
            for p, (a, b) in zip(self.pairs, self.out_shapes):
                bounds = [KEPT_MAX if i in block.own else 2**20 for i in (p.a, p.b)]
                prod = rns.matmul_t_mod(shares[p.a], shares[p.b], self.primes, *bounds)
                self.H[:, off : off + a * b] += prod.reshape(r, -1)
                off += a * b
            for i, q in enumerate(self.primes):  # |H| stays <= p: a sum of two centred residues
                rns.reduce(self.H[i], q)
        self.product_s += time.perf_counter() - t1 - expand_s  # expansion: input sharing

    async def finish(self, zs: dict[int, Any], width: int) -> np.ndarray | None:
        """Add Σ_i Z_i(x_j) (the re-randomisation) once; None at other parties."""
        if not self.is_node:
            self.phases.seconds["input sharing"] = time.perf_counter() - self.t0
            return None
        r = len(self.primes)
        off = 0
        for p, (a, b) in zip(self.pairs, self.out_shapes):
            d = self.scales.get(p.a, 1) * self.scales.get(p.b, 1)
            if d != 1:  # unscale: H_j of the scaled shares is D_a D_b times the share of f_aᵀf_b
                seg = self.H[:, off : off + a * b]
                for i, q in enumerate(self.primes):
                    inv = pow(d, -1, q)
                    seg[i] *= float(inv - q if inv > q // 2 else inv)  # |.| <= 2**40: exact
                    rns.reduce(seg[i], q)
            off += a * b
        for i, z in zs.items():
            if not isinstance(z, np.ndarray):
                got = (await z)[0]
                z = received_residues(got, sender=i, step="re-randomisation", r=r, shape=(1, width))
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
    keep: int | None = None,
) -> dict[int, np.ndarray]:
    """The dealer's SCALED shares D_j f(x_j) of ``rows`` for ``targets`` (float32 residues
    (r, rows, c), see the module docstring), in :data:`DEAL_ROWS` chunks; the seeded shares are
    drawn from ``streams`` chunk by chunk, exactly as :func:`expand_rows` draws them. The share
    of target ``keep`` (the dealer's own, never sent) may be left unreduced, |v| <=
    :data:`KEPT_MAX` (the same class mod p)."""
    n, c = rows.shape
    ks = sorted(streams)
    coeffs = dealing_coefficients(ks, targets)
    mmax = float(np.abs(rows).max()) if rows.size else 0.0
    dtype = combine_dtype(coeffs, mmax, primes)
    out = {j: np.empty((len(primes), n, c), dtype=np.float32) for j in targets}
    for s in range(0, n, DEAL_ROWS):
        Mc = np.asarray(rows[s : s + DEAL_ROWS], dtype=dtype)
        seeded = {k: streams[k].centred(primes, Mc.shape, dtype) for k in ks}
        tmp = np.empty(Mc.shape, dtype=dtype)
        work = tmp.copy() if dtype != np.float32 else None
        Mn = {n[0]: Mc * n[0] if n[0] != 1 else Mc for _, n in coeffs.values()}
        for i, p in enumerate(primes):
            for j in targets:
                dst = out[j][i, s : s + DEAL_ROWS]
                acc = dst if work is None else work
                nums = coeffs[j][1]
                sk = [seeded[k][i] for k in ks]
                combine(Mn[nums[0]], sk, nums[1:], p, acc, tmp, reduce=j != keep)
                if work is not None:
                    dst[...] = work
    return out


def expand_rows(
    stream: rns.ResidueStream,
    primes: Sequence[int],
    shape: tuple[int, int],
    dtype: type = np.float32,
) -> np.ndarray:
    """The next ``shape`` rows of a seeded share (residues (r, rows, c), float32, or float64 for
    a share used only here: the product then converts nothing), drawn in the dealer's chunk
    order (:func:`deal_rows` on the same block)."""
    n, c = shape
    out = np.empty((len(primes), n, c), dtype=dtype)
    for s in range(0, n, DEAL_ROWS):
        for i, p in enumerate(primes):
            stream.fill_centred(p, out[i, s : s + DEAL_ROWS])
    return out
