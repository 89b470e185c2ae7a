"""Cross-party matrix products M_aᵀM_b under Shamir secret sharing (MPyC), opened to one party.

Each data party ``i`` holds an integer matrix ``M_i`` (n x c_i): its real-valued block encoded
in fixed point, ``round(x * 2**f)`` with ``|x| <= 1``. For every requested pair ``(a, b, p)`` the
parties compute ``M_aᵀ M_b + N_ab`` where ``N_ab`` is a noise matrix secret-shared by party ``p``
(already encoded at scale ``2**(2f)``), and open the sum to the ``receiver`` only. Nobody, not
even ``a``, ``b`` or ``p``, sees the exact product.

Three implementations (``impl``), run by every party through :func:`secure_phase`:

- ``rns`` (fm-vfl's default): our own protocol on MPyC's transport, Shamir sharing over several
  21-bit prime fields with BLAS products, seeded input shares and the degree-2t product opened
  straight to the receiver; any n (the number of primes grows with n). See
  :mod:`protocols.shamir_rns`, which documents who sends what and why it is private; the
  tests check it against the plaintext product and against ``vectorized``.
- ``vectorized``: each block is ONE secure matrix product of MPyC secure arrays
  (``mpc.SecFld(P).array``; MPyC's np_matmul algorithm, one resharing per block, see
  :func:`protocols.shamir_mpyc_ops.vector_ops` for the two hot spots done in numpy);
- ``naive``: the seed paper's approach, one ``mpc.in_prod`` of two length-n lists of secure
  field elements per coefficient (the benchmark peer).

For ``vectorized`` and ``naive``, why a prime field with the fixed-point encoding done in the
clear: the product of two encoded values carries 2f fractional bits and is never truncated
inside the MPC (the receiver divides by ``2**(2f)`` after opening), so no secure truncation
runs and the opened value is exact integer arithmetic mod P. It is the true integer as long as
``|M_aᵀM_b + N| < P/2``, which
:func:`choose_frac_bits` guarantees for n <= ``MAX_ROWS`` rows and noise below a public bound,
and :func:`check_inputs` / :func:`encode_noise` enforce every premise of (raising otherwise).

The party program run in each process is :mod:`protocols.mpyc_party`;
:func:`protocols.shamir_launch.run_block_products` spawns it for m = K + 1 >= 3 parties
(threshold t >= 1: with 2 MPyC parties t = 0 and a share is the secret) and bounds every wait
by a timeout.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from protocols.shamir_mpyc_ops import vector_ops
from protocols.shamir_rns import PartyPhases, rns_block_products
from protocols.share_checks import guard_recombination

IMPLS = ("rns", "vectorized", "naive")
LEGACY_IMPLS = ("vectorized", "naive")  # MPyC's own arithmetic, in a field sized for MAX_ROWS
MAX_FRAC_BITS = 16
MAX_ROWS = 100_000  # the design range: n up to this many rows never overflows
# The prime field of the shares: next_prime(2**56). Small enough that shares fit int64 (fast
# vectorised sharing and exact BLAS products on 18-bit limbs), large enough that an opened
# block, |M_aᵀM_b + N| <= (n + noise_bound) * 4**f, stays below P/2 for n <= 100,000 with
# f = 16 fractional bits (2 * (1e5 + 1.6e7) * 4**16 < 2**56); for a larger noise bound f
# shrinks (:func:`choose_frac_bits`).
FIELD_PRIME = 72057594037928017


class ShamirProtocolError(RuntimeError):
    """The secure phase could not complete (a party crashed, a timeout, an overflow risk)."""


class ShamirTimeoutError(ShamirProtocolError, TimeoutError):
    """A party did not finish the secure phase within the timeout."""


@dataclass(frozen=True)
class Pair:
    """One block M_aᵀM_b, noised by party ``noise_party``."""

    a: int
    b: int
    noise_party: int


def choose_frac_bits(n_max: int, noise_bound: float, *, max_frac_bits: int = MAX_FRAC_BITS) -> int:
    """Largest f <= max_frac_bits with ``2 * (n_max + noise_bound) * 4**f < FIELD_PRIME``."""
    for f in range(max_frac_bits, 3, -1):
        if 2 * (n_max + math.ceil(noise_bound)) * 4**f < FIELD_PRIME:
            return f
    raise ValueError(
        f"noise_bound {noise_bound:.3g} with n_max {n_max} leaves < 4 fractional "
        f"bits in the {FIELD_PRIME.bit_length()}-bit field"
    )


def encode_fixed(x: np.ndarray, frac_bits: int) -> np.ndarray:
    """``round(x * 2**f)`` as int64; entries must lie in [-1, 1] (the encoding's range)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size and (not np.isfinite(x).all() or np.abs(x).max() > 1.0):
        raise ValueError(
            f"fixed-point inputs must be finite and in [-1, 1], got max |x| = "
            f"{float(np.abs(x).max())}"
        )
    return np.rint(x * float(2**frac_bits)).astype(np.int64)


def encode_noise(noise: np.ndarray, frac_bits: int, noise_bound: float) -> np.ndarray:
    """Noise at the product's scale ``2**(2f)`` as int64; raises if it exceeds the public bound."""
    noise = np.asarray(noise, dtype=np.float64)
    if noise.size and not np.abs(noise).max() <= noise_bound:
        raise ShamirProtocolError(
            f"noise magnitude {float(np.abs(noise).max()):.4g} exceeds the "
            f"public bound {noise_bound:.4g} the field was sized for"
        )
    return np.rint(noise * float(4**frac_bits)).astype(np.int64)


def check_inputs(matrices: dict[int, np.ndarray], frac_bits: int, n_max: int) -> int:
    """Validate encoded matrices (same rows, entries in [-2**f, 2**f], rows <= n_max); return n."""
    rows = {M.shape[0] for M in matrices.values()}
    if len(rows) != 1:
        raise ValueError(f"all party matrices must have the same number of rows, got {rows}")
    n = rows.pop()
    if n > n_max:
        raise ValueError(f"rows must be <= {n_max} (the range the field was sized for), got {n}")
    for i, M in matrices.items():
        if M.size and np.abs(M).max() > 2**frac_bits:
            raise ValueError(
                f"party {i}: encoded entries must lie in [-2**{frac_bits}, "
                f"2**{frac_bits}], got {int(np.abs(M).max())}"
            )
    return n


# --------------------------------------------------------------------------- SPMD MPC program


async def block_products(
    mpc: Any,
    *,
    me: int,
    shapes: dict[int, tuple[int, int]],
    pairs: Sequence[Pair],
    matrix: np.ndarray | None,
    noises: dict[int, np.ndarray],
    receiver: int,
    impl: str = "vectorized",
    trace: dict[str, Any] | None = None,
) -> dict[int, np.ndarray] | None:
    """Every MPyC party runs this; returns ``{pair index: M_aᵀM_b + N}`` (ints) at ``receiver``.

    ``matrix`` is this party's encoded matrix (None if it has none), ``noises[j]`` its encoded
    noise for pair ``j`` (only for pairs with ``noise_party == me``). If ``trace`` is a dict,
    the vectorised path records this party's shares in it (for the demo).
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {list(IMPLS)}, got {impl!r}")
    if len(mpc.parties) < 3 or mpc.threshold < 1:
        raise ShamirProtocolError(
            f"Shamir sharing needs >= 3 parties and threshold >= 1, got "
            f"{len(mpc.parties)} parties, t = {mpc.threshold}"
        )
    guard_recombination(mpc)  # MPyC's own steps check each share before they recombine it
    secfld = mpc.SecFld(order=FIELD_PRIME, signed=True)  # opened values come out as signed ints
    involved = sorted({p.a for p in pairs} | {p.b for p in pairs})
    futures = []
    if impl == "vectorized":
        fast_input, at_b = vector_ops(mpc, secfld, trace)
        sec = {
            i: fast_input(matrix if me == i else None, i, shapes[i], False, f"M_{i}")
            for i in involved
        }
        for j, p in enumerate(pairs):
            shape = (shapes[p.a][1], shapes[p.b][1])
            noise = fast_input(noises.get(j), p.noise_party, shape, True, f"N_{p.a}{p.b}")
            # ONE secure product (one resharing) per block
            block = at_b(sec[p.a], sec[p.b], f"{p.a}{p.b}")
            futures.append(mpc.output(block + noise, receivers=[receiver]))
    else:
        # naive: the seed's per-coefficient scalar products over lists of secure field elements
        cols: dict[int, list[list[Any]]] = {}
        for i in involved:
            n, c = shapes[i]
            flat = (
                [secfld(int(v)) for v in np.asarray(matrix).T.reshape(-1)]
                if me == i
                else [secfld(None)] * (n * c)
            )
            flat = mpc.input(flat, senders=[i])[0]
            # wait for the shares first: in_prod over still-pending secure objects costs MPyC
            # two asyncio callbacks per element and per coefficient (~40 s at n = 1000, d = 20+20)
            await mpc.gather(flat)
            cols[i] = [flat[k * n : (k + 1) * n] for k in range(c)]
        for j, p in enumerate(pairs):
            ca, cb = shapes[p.a][1], shapes[p.b][1]
            nz = (
                [secfld(int(v)) for v in np.asarray(noises[j]).reshape(-1)]
                if me == p.noise_party
                else [secfld(None)] * (ca * cb)
            )
            noise = mpc.input(nz, senders=[p.noise_party])[0]
            coeffs = [
                mpc.in_prod(cols[p.a][r], cols[p.b][s]) + noise[r * cb + s]
                for r in range(ca)
                for s in range(cb)
            ]
            futures.append(mpc.output(coeffs, receivers=[receiver]))
    out = [await f for f in futures]
    if me != receiver:
        return None
    return {
        j: np.asarray(
            [int(v) for v in np.asarray(o, dtype=object).reshape(-1)], dtype=np.int64
        ).reshape(shapes[p.a][1], shapes[p.b][1])
        for j, (o, p) in enumerate(zip(out, pairs, strict=True))
    }


async def secure_phase(
    mpc: Any,
    *,
    job: dict[str, Any],
    matrix: np.ndarray | None,
    noises: dict[int, np.ndarray],
    trace: dict[str, Any] | None = None,
) -> tuple[dict[int, np.ndarray] | None, dict[str, Any]]:
    """This party's part of a job (``shapes``, ``pairs``, ``receiver``, ``impl``, and ``primes``
    for impl ``rns``); returns (opened blocks at the receiver, this party's report: secure and
    CPU seconds, seconds per phase, and ``sent``: the payload bytes of every message it sent as
    ``(phase, dst, bytes)``)."""
    shapes = {int(k): tuple(v) for k, v in job["shapes"].items()}
    pairs = [Pair(*p) for p in job["pairs"]]
    me, impl = mpc.pid, job["impl"]
    t0, c0 = time.perf_counter(), time.process_time()
    if impl == "rns":
        phases = PartyPhases()
        res = await rns_block_products(
            mpc,
            shapes=shapes,
            pairs=pairs,
            matrix=matrix,
            noises=noises,
            receiver=job["receiver"],
            primes=tuple(job["primes"]),
            phases=phases,
            **({"block_rows": int(job["block_rows"])} if "block_rows" in job else {}),
        )
        secs, sent = phases.seconds, phases.sent
    else:
        before = _nbytes_sent(mpc)
        res = await block_products(
            mpc,
            me=me,
            shapes=shapes,
            pairs=pairs,
            matrix=matrix,
            noises=noises,
            receiver=job["receiver"],
            impl=impl,
            trace=trace,
        )
        after = _nbytes_sent(mpc)  # MPyC's own messages: what its transport wrote per peer
        sent = [("secure", j, after[j] - before[j]) for j in after]
        secs = {"secure": time.perf_counter() - t0}
    report = {
        "secure_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,  # this process's CPU seconds: less load-sensitive
        "phases_s": secs,
        "sent": sent,
    }
    return res, report


def _nbytes_sent(mpc: Any) -> dict[int, int]:
    return {p.pid: p.protocol.nbytes_sent for p in mpc.parties if p.pid != mpc.pid and p.protocol}
