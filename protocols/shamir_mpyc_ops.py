"""MPyC secure-array operations behind ``impl="vectorized"`` (protocols.shamir_products), with
the two hot spots done in numpy, and the exact limb product they use."""

from __future__ import annotations

from typing import Any

import numpy as np

from protocols.shamir_shares import shamir_split
from protocols.share_checks import received_field_share


def vector_ops(mpc: Any, secfld: Any, trace: dict[str, Any] | None = None):
    """Two MPyC coroutines over secure field arrays.

    ``fast_input(M, sender, shape)``: like ``mpc.input`` for one array, but the sender splits
    with :func:`shamir_split` (numpy, int64) and ships raw int64 bytes. MPyC 0.11's
    ``np_random_split`` draws every coefficient with ``secrets.randbelow`` into object arrays
    and pickles them, ~2.5 us per entry; n = 40,000 x 40 entries made that the bottleneck.
    ``at_b(A, B)``: secure ``A.T @ B``, MPyC's own ``np_matmul`` algorithm (local product of
    the shares, then one GRR resharing to degree t) with the local product done exactly by BLAS
    on 18-bit limbs (:func:`modmatmul_t`) instead of numpy's object-dtype loop (~10x slower).
    Both use MPyC's program-counter-labelled transport, so they interleave with its own ops.
    """
    from mpyc.asyncoro import mpc_coro  # noqa: PLC0415  (no mpyc import in callers' processes)

    field = secfld.field
    p = int(field.order)

    @mpc_coro
    async def fast_input(M, sender, shape, as_object=False, name=""):
        await mpc.returnType((secfld.array, tuple(shape)))
        me, m = mpc.pid, len(mpc.parties)
        if me == sender:
            rows = shamir_split(np.asarray(M, dtype=np.int64), p, mpc.threshold, m)
            for j in range(m):
                if j != me:
                    mpc._send_message(j, rows[j].tobytes())
            mine = rows[me]
        else:
            msg = mpc._receive_message(sender)  # bytes if already arrived, else a Future
            if not isinstance(msg, bytes | bytearray):
                msg = await msg
            mine = received_field_share(msg, sender=sender, shape=shape, order=p, mpc=mpc)
        # int64 values are only ever read by at_b; anything MPyC itself computes on gets objects
        mine = mine.reshape(shape)
        if trace is not None:
            trace.setdefault("shares", {})[name] = {"sender": sender, "share": mine.copy()}
        return field.array(mine.astype(object) if as_object else mine, check=False)

    @mpc_coro
    async def at_b(A, B, name=""):
        await mpc.returnType((type(A), (A.shape[1], B.shape[1])))
        A, B = await mpc.gather(A, B)  # this party's shares, as finite-field arrays
        C = field.array(modmatmul_t(A.value, B.value, p), check=False)
        if trace is not None:
            trace.setdefault("product_shares", {})[name] = np.asarray(C.value, dtype=object)
        return mpc._reshare(C)  # degree 2t -> t; MPyC 0.11's own resharing step

    return fast_input, at_b


_LIMB = 18  # 2*18 + 17 bits < 53: limb products summed over n <= 2**17 rows stay exact in float64


def _limbs(X: np.ndarray, count: int) -> list[np.ndarray]:
    """Split ints in [0, 2**63) into ``count`` float64 limbs of 18 bits."""
    X = np.asarray(X).astype(np.int64) if np.asarray(X).dtype == object else np.asarray(X)
    mask = (1 << _LIMB) - 1
    return [((X >> (_LIMB * u)) & mask).astype(np.float64) for u in range(count)]


def modmatmul_t(A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """``(A.T @ B) mod p`` exactly (object array), for ints in [0, p), p < 2**63, n < 2**17."""
    if A.shape[0] >= 2**17:
        raise ValueError(f"rows must be < 2**17 for exact limb products, got {A.shape[0]}")
    if p.bit_length() > 63:
        raise ValueError(f"modulus must be < 2**63, got {p.bit_length()} bits")
    count = -(-p.bit_length() // _LIMB)
    la, lb = _limbs(A, count), _limbs(B, count)
    C = np.zeros((A.shape[1], B.shape[1]), dtype=object)
    for u in range(count):
        for v in range(count):
            part = (la[u].T @ lb[v]).astype(np.int64).astype(object)  # exact: < 2**53
            C = C + part * (1 << (_LIMB * (u + v)))
    return C % p
