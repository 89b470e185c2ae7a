"""Fast cross-party products M_aᵀM_b + N opened to one party: Shamir sharing over residue
fields, pseudo-random input shares, degree-2t opening. Runs on MPyC's transport.

Setting: m >= 3 MPyC parties, threshold t = MPyC's (honest majority, m >= 2t + 1), semi-honest.
Data party ``a`` holds an integer matrix M_a (n x c_a, fixed-point encoded, |entries| <= 2**f);
for each pair (a, b) the noise party holds N_ab (c_a x c_b, at scale 4**f). The ``receiver``
learns exactly M_aᵀM_b + N_ab for every pair and nothing else; every other party learns nothing.
Arithmetic is Shamir sharing modulo P = p_1...p_r (21-bit primes, residue by residue, see
:mod:`protocols.rns`), with MPyC's evaluation points x_j = j + 1; r is chosen so that
|M_aᵀM_b + N| < P/2 (:func:`primes_for_job`), hence the opened residues are the exact integer.

Who sends what (``nodes``: the receiver and 2t other parties; the degree-2t product has 2t + 1
shares, so only nodes compute and open):

1. Input sharing. Each dealer a picks a degree-t polynomial f with f(0) = M_a whose values at t
   nodes S_a (the receiver first) are pseudo-random: a sends each k in S_a a fresh 32-byte seed
   and k expands it with AES-256-CTR into its share f(x_k) (:class:`protocols.rns.ResidueStream`);
   the other nodes' shares follow by Lagrange interpolation through 0 and S_a and are sent
   explicitly (float32 residues, in blocks of rows sent as they are dealt). So a seed replaces
   t of the shares (t = 1: the receiver gets only seeds and the input traffic is halved).
2. Re-randomisation. Every node i, and every noise party, deals a random degree-2t sharing of
   Z_i (Z_i = its noise N for the pairs it noises, else 0) to the other nodes (output-sized).
3. Local product. Node j computes H_j = f_a(x_j)ᵀ f_b(x_j) + Σ_i Z_i(x_j) mod each p: one exact
   float64 matrix product per prime and 4096-row chunk.
4. Opening. Every node sends H_j to the receiver, which interpolates h(0) = Σ λ_j H_j mod p
   (degree 2t through 2t + 1 points) and recovers the signed integers by CRT.

Why it is private against t corrupt parties (one, for m = 3): (i) a corrupt party's input shares
are t values of degree-t polynomials with t uniform coefficients (its seed-derived shares are
AES-CTR output, pseudo-random), so they are uniform and independent of M_a (the tests check
this on two different inputs); (ii) the receiver sees 2t + 1 values of h = f_aᵀf_b + Σ Z_i: with
one honest contributor, Σ Z_i is a uniform degree-2t polynomial with the given constant term, so
h's coefficients beyond h(0) are uniform given the corrupt parties' own values (the opening of a
re-randomised product in BGW / Gennaro-Rabin-Rabin), and only h(0) = M_aᵀM_b + N is revealed.
Nothing is opened to anyone but the receiver. As MPyC's own protocol, it assumes private
authenticated channels (TLS between hosts).

Every party runs :func:`rns_block_products` in lockstep (MPyC labels each message by a program
counter); it returns each party's per-phase seconds and the payload bytes of every message it
sent, so the caller meters exactly what crossed the channel.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocols import rns
from protocols.mpyc_net import exchange

PHASES = ("input sharing", "local product", "opening")
SEED_BYTES = 32
DEAL_ROWS = 8192  # dealing and seed expansion run in row chunks that stay in cache
BLOCK_ROWS = 8 * DEAL_ROWS  # explicit shares travel in blocks of this many rows (pipelining;
# and MPyC frames a message with a 4-byte length, so one message must stay below 4 GiB)


@dataclass
class PartyPhases:
    """What one party measured: seconds per phase and payload bytes it sent per phase/peer."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    sent: list[tuple[str, int, int]] = field(default_factory=list)  # (phase, dst, bytes)

    def bytes_by_phase(self) -> dict[str, int]:
        out = dict.fromkeys(PHASES, 0)
        for phase, _, nb in self.sent:
            out[phase] += nb
        return out


def primes_for_job(n: int, frac_bits: int, noise_bound: float) -> tuple[int, ...]:
    """Primes for |M_aᵀM_b + N| <= (n + noise_bound) * 4**f, any n (memory is the limit)."""
    return rns.primes_for((int(n) + int(np.ceil(noise_bound))) * 4**frac_bits)


def opening_nodes(m: int, t: int, receiver: int) -> list[int]:
    """The receiver and the 2t lowest other parties: the 2t + 1 points of the product."""
    if m < 2 * t + 1 or t < 1:
        raise ValueError(f"need t >= 1 and m >= 2t + 1 parties, got m = {m}, t = {t}")
    return sorted([receiver, *[j for j in range(m) if j != receiver][: 2 * t]])


def seed_receivers(dealer: int, nodes: Sequence[int], t: int, receiver: int) -> list[int]:
    """The t nodes whose share of ``dealer``'s input is pseudo-random (receiver first)."""
    order = [receiver, *[j for j in nodes if j != receiver]]
    return [j for j in order if j != dealer][:t]


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


def random_sharing(
    const: np.ndarray, primes: Sequence[int], degree: int, targets: Sequence[int]
) -> dict[int, np.ndarray]:
    """Shares at x_j (j in ``targets``) of a uniformly random polynomial of ``degree`` with
    constant term ``const`` (residues (r, ...)); coefficients from the OS CSPRNG."""
    stream = rns.ResidueStream(os.urandom(SEED_BYTES))
    count = int(np.prod(const.shape[1:]))
    coeffs = [
        np.stack([stream.uniform(p, count).astype(np.int64) for p in primes]).reshape(const.shape)
        for _ in range(degree)
    ]
    out = {}
    for j in targets:
        x = j + 1
        acc = np.zeros_like(const)
        for c in reversed([const, *coeffs]):  # Horner, residue by residue
            acc = (acc * x + c) % np.asarray(primes, dtype=np.int64).reshape(-1, 1, 1)
        out[j] = acc
    return out


async def rns_block_products(
    mpc: Any,
    *,
    shapes: dict[int, tuple[int, int]],
    pairs: Sequence[Any],
    matrix: np.ndarray | None,
    noises: dict[int, np.ndarray],
    receiver: int,
    primes: Sequence[int],
    phases: PartyPhases,
    block_rows: int = BLOCK_ROWS,
) -> dict[int, np.ndarray] | None:
    """Every party runs this (see the module docstring); returns ``{pair index: M_aᵀM_b + N}``
    (int64) at ``receiver``, None elsewhere. ``pairs[j]`` has ``a``, ``b``,
    ``noise_party``; ``matrix`` is this party's encoded matrix, ``noises[j]`` its encoded noise
    for the pairs it noises; ``block_rows``: the rows of one streamed block (any positive
    number; the result does not depend on it). Fills ``phases`` with this party's timings and
    sent bytes."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    me, m, t = mpc.pid, len(mpc.parties), mpc.threshold
    nodes = opening_nodes(m, t, receiver)
    r = len(primes)
    dealers = sorted({p.a for p in pairs} | {p.b for p in pairs})
    seeded = {i: seed_receivers(i, nodes, t, receiver) for i in dealers}
    t0 = time.perf_counter()

    def send(phase: str, data: bytes | None, src: int, dst: int):
        if me == src:
            phases.sent.append((phase, dst, len(data)))
        return exchange(mpc, data, [src], [dst])

    # 1. input sharing, part one: the seeds to S_a (their holders expand them block by block)
    seeds = {i: {k: os.urandom(SEED_BYTES) for k in seeded[i]} if me == i else {} for i in dealers}
    seed_msgs: dict[int, Any] = {}  # dealer -> the pending seed message of this party
    for i in dealers:
        for k in seeded[i]:
            fut = send("input sharing", seeds[i].get(k), i, k)
            if me == k:
                seed_msgs[i] = fut
    await asyncio.sleep(0)  # let the seed messages go out now
    # 2. re-randomisation: a degree-2t sharing of Z_i (noise or zero) from every contributor;
    #    output-sized, so it is sent before the row blocks
    out_shapes = [(shapes[p.a][1], shapes[p.b][1]) for p in pairs]
    width = sum(a * b for a, b in out_shapes)
    contributors = sorted(set(nodes) | {p.noise_party for p in pairs})
    zs: dict[int, Any] = {}
    for i in contributors:
        dealt = {}
        if me == i:
            const = np.concatenate(
                [
                    np.asarray(noises[j], dtype=np.int64).reshape(-1)
                    if p.noise_party == me
                    else np.zeros(a * b, dtype=np.int64)
                    for j, (p, (a, b)) in enumerate(zip(pairs, out_shapes))
                ]
            )
            dealt = random_sharing(rns.to_residues(const, primes)[:, None, :], primes, 2 * t, nodes)
            dealt = {j: rns.centre(z, primes) for j, z in dealt.items()}
        for j in nodes:
            if j == i:
                if me == i:
                    zs[i] = dealt[me]
            else:
                fut = send("input sharing", rns.pack(dealt[j]) if me == i else None, i, j)
                if me == j:
                    zs[i] = fut
    # 1 and 3, streamed over row blocks: block s is dealt and sent, then block s - 1 (whose
    # shares are in by now) is multiplied into H and dropped; a party holds O(2 blocks) of shares
    n = shapes[dealers[0]][0]
    streams = {i: {k: rns.ResidueStream(sd) for k, sd in seeds[i].items()} for i in dealers}
    acc = _Accumulator(me in nodes, pairs, shapes, primes, phases, t0)
    prev = None
    for s in [*range(0, n, block_rows), None]:
        cur = None
        if s is not None:
            cur = _post_block(
                me,
                s,
                min(block_rows, n - s),
                matrix,
                dealers,
                nodes,
                seeded,
                streams,
                shapes,
                primes,
                send,
            )
            await asyncio.sleep(0)  # the block goes out while the previous one is multiplied
        if prev is not None:
            await acc.add(prev, seed_msgs)
        prev = cur
    H = await acc.finish(zs, width)
    t2 = time.perf_counter()
    # 4. opening to the receiver only
    got = {}
    for j in nodes:
        if j != receiver:
            # every party issues every message (MPyC's labels advance in lockstep)
            got[j] = send("opening", rns.pack(H) if me == j else None, j, receiver)
    result = None
    if me == receiver:
        Hs = {receiver: H}
        for j, fut in got.items():
            Hs[j] = rns.unpack((await fut)[0], r, (width,))
        opened = np.empty((r, width), dtype=np.int64)
        xs = [j + 1 for j in nodes]
        for i, p in enumerate(primes):
            lam = rns.lagrange(xs, 0, p)
            acc_p = np.zeros(width, dtype=np.int64)
            for c, j in zip(lam, nodes):
                acc_p = (acc_p + c * (np.asarray(Hs[j][i]).astype(np.int64) % p)) % p
            opened[i] = acc_p
        flat = rns.from_residues(opened, primes).astype(np.int64)  # |v| < 2**63: job_for
        result, off = {}, 0
        for j, (a, b) in enumerate(out_shapes):
            result[j] = flat[off : off + a * b].reshape(a, b)
            off += a * b
    phases.seconds["opening"] = time.perf_counter() - t2
    return result


@dataclass
class _Block:
    """One row block as this party sees it: its own dealt share (if it deals and is a node) and
    the pending messages carrying its explicit shares from the other dealers."""

    start: int
    rows: int
    own: dict[int, np.ndarray]
    pending: dict[int, Any]


def _post_block(me, s, rows, matrix, dealers, nodes, seeded, streams, shapes, primes, send):
    """Deal (at a dealer) and issue every message of rows [s, s + rows): every party issues
    every message, in the same order (MPyC's labels advance in lockstep)."""
    own, pending = {}, {}
    for i in dealers:
        explicit = [j for j in nodes if j != i and j not in seeded[i]]
        if me == i:
            targets = [*explicit, i] if i in nodes else explicit
            dealt = _deal_rows(matrix[s : s + rows], primes, streams[i], targets)
            if i in nodes:
                own[i] = dealt.pop(i)
            for j in explicit:
                send("input sharing", rns.pack(dealt[j]), i, j)
        else:
            for j in explicit:
                fut = send("input sharing", None, i, j)
                if me == j:
                    pending[i] = fut
    return _Block(s, rows, own, pending)


class _Accumulator:
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

    async def add(self, block: _Block, seed_msgs: dict[int, Any]) -> None:
        if not self.is_node:
            return
        r = len(self.primes)
        shares = dict(block.own)
        for i, fut in seed_msgs.items():
            if i not in self.expanders:
                self.expanders[i] = rns.ResidueStream((await fut)[0])
            shares[i] = _expand_rows(
                self.expanders[i], self.primes, (block.rows, self.shapes[i][1])
            )
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
        for i, z in list(zs.items()):
            if not isinstance(z, np.ndarray):
                z = rns.unpack((await z)[0], r, (1, width))
            self.H += np.asarray(z, dtype=np.float64).reshape(r, width)
        for i, q in enumerate(self.primes):
            rns.reduce(self.H[i], q)
        self.phases.seconds["local product"] = self.product_s
        self.phases.seconds["input sharing"] = time.perf_counter() - self.t0 - self.product_s
        return self.H


def _deal_rows(
    rows: np.ndarray,
    primes: Sequence[int],
    streams: dict[int, rns.ResidueStream],
    targets: Sequence[int],
) -> dict[int, np.ndarray]:
    """The dealer's shares of ``rows`` for ``targets`` (float32 residues (r, rows, c)), in
    :data:`DEAL_ROWS` chunks; the seeded shares are drawn from ``streams`` chunk by chunk,
    exactly as :func:`_expand_rows` draws them."""
    n, c = rows.shape
    out = {j: np.empty((len(primes), n, c), dtype=np.float32) for j in targets}
    for s in range(0, n, DEAL_ROWS):
        Mc = np.asarray(rows[s : s + DEAL_ROWS], dtype=np.float64)
        seeded = {k: st.centred(primes, Mc.shape) for k, st in streams.items()}
        for j, sh in deal(Mc, primes, seeded, targets).items():
            out[j][:, s : s + DEAL_ROWS] = sh
    return out


def _expand_rows(
    stream: rns.ResidueStream, primes: Sequence[int], shape: tuple[int, int]
) -> np.ndarray:
    """The next ``shape`` rows of a seeded share (float32 residues (r, rows, c)), drawn in the
    dealer's chunk order (:func:`_deal_rows` on the same block)."""
    n, c = shape
    out = np.empty((len(primes), n, c), dtype=np.float32)
    for s in range(0, n, DEAL_ROWS):
        out[:, s : s + DEAL_ROWS] = stream.centred(primes, (min(DEAL_ROWS, n - s), c))
    return out


def warm_up() -> None:
    """Run every local step once on a tiny job (no messages), so that a fresh party process
    pays numpy's and OpenSSL's first-call costs before its secure phase, not inside it."""
    primes = rns.PRIMES[:3]
    M = np.ones((4, 2), dtype=np.int64)
    dealt = _deal_rows(M, primes, {1: rns.ResidueStream(bytes(SEED_BYTES))}, [0, 2])
    rns.unpack(rns.pack(dealt[0]), 3, (4, 2))
    seeded = _expand_rows(rns.ResidueStream(bytes(SEED_BYTES)), primes, (4, 2))
    rns.matmul_t_mod(dealt[0], seeded, primes)
    z = random_sharing(rns.to_residues(np.zeros((1, 2), np.int64), primes), primes, 2, [0, 1, 2])
    rns.from_residues(rns.centre(z[0], primes), primes)
