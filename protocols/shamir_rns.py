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
   explicitly (float32 residues, in blocks of rows sent as they are dealt), each multiplied by a
   public integer D_j so that it is a small-integer combination of M_a and the seeded shares
   (float32 arithmetic; node j divides its product by the D's once, see
   :mod:`protocols.rns_blocks`). So a seed replaces t of the shares (t = 1: the receiver gets
   only seeds and the input traffic is halved).
2. Re-randomisation. Every node i, and every noise party, deals a random degree-2t sharing of
   Z_i (Z_i = its noise N for the pairs it noises, else 0) to the other nodes (output-sized).
3. Local product, streamed with step 1 over row blocks B_1, ..., B_L (``block_rows`` each):
   node j multiplies its shares of block B_l, H_j += f_a(x_j)[B_l]ᵀ f_b(x_j)[B_l] mod each p
   (one exact float64 product per prime and 8192-row chunk), then drops them; the dealers deal
   block l + 1 before block l is multiplied, so a party holds its own columns and two blocks of
   shares, never the n rows of shares (10M rows: 12 GiB per party before). Once every block is
   in, H_j += Σ_i Z_i(x_j). Messages are not acknowledged: a dealer that awaits explicit shares
   from the other dealers (K = 2 with the server as receiver: each dealer from the other) cannot
   run more than a block ahead of them; blocks a slower node has not consumed yet wait in its
   receive buffer.
4. Opening. Every node sends H_j to the receiver, which interpolates h(0) = Σ λ_j H_j mod p
   (degree 2t through 2t + 1 points) and recovers the signed integers by CRT.

Why streaming changes nothing in what is computed or seen: row blocks partition the sum,
M_aᵀM_b = Σ_l M_a[B_l]ᵀ M_b[B_l], and at each node Σ_l f_a(x_j)[B_l]ᵀ f_b(x_j)[B_l] is the value
at x_j of Σ_l f_a[B_l]ᵀ f_b[B_l] = f_aᵀ f_b: a sum of degree-2t polynomials with constant term
M_aᵀM_b, i.e. the same H_j as the unchunked product, so the accumulated shares are shares of the
sum. The re-randomisation Z is added once to that sum and the opening happens once, after the
last block: the receiver sees exactly the same 2t + 1 values as before (per-block products are
never opened or sent), and every message carries the same shares as before, only cut into
blocks (the same bytes; the tests check equality with the unchunked run and the plaintext).

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
from protocols.rns_blocks import (  # noqa: F401  (deal, *_ROWS: part of this module's API)
    BLOCK_ROWS,
    DEAL_ROWS,
    Accumulator,
    deal,
    deal_rows,
    expand_rows,
    post_block,
    share_scale,
)
from protocols.share_checks import received_residues

PHASES = ("input sharing", "local product", "opening")
SEED_BYTES = 32


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
    scales = {i: share_scale(me, seeded[i]) for i in dealers} if me in nodes else {}
    acc = Accumulator(me in nodes, pairs, shapes, primes, phases, t0, scales)
    prev = None
    for s in [*range(0, n, block_rows), None]:
        cur = None
        if s is not None:
            cur = post_block(
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
            Hs[j] = received_residues((await fut)[0], sender=j, step="opening", r=r, shape=(width,))
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


def warm_up() -> None:
    """Run every local step once on a tiny job (no messages), so that a fresh party process
    pays numpy's and OpenSSL's first-call costs before its secure phase, not inside it."""
    primes = rns.PRIMES[:3]
    M = np.ones((4, 2), dtype=np.int64)
    dealt = deal_rows(M, primes, {1: rns.ResidueStream(bytes(SEED_BYTES))}, [0, 2])
    rns.unpack(rns.pack(dealt[0]), 3, (4, 2))
    seeded = expand_rows(rns.ResidueStream(bytes(SEED_BYTES)), primes, (4, 2))
    rns.matmul_t_mod(dealt[0], seeded, primes)
    z = random_sharing(rns.to_residues(np.zeros((1, 2), np.int64), primes), primes, 2, [0, 1, 2])
    rns.from_residues(rns.centre(z[0], primes), primes)
