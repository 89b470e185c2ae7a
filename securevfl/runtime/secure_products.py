"""The runtime capability for secure matrix products: ``rt.secure_products(request, ...)``.

A method asks for cross-party blocks M_aᵀM_b + N_ab (real matrices in [-1, 1], real noise),
opened to one receiver only, and gets the decoded blocks there, whatever runtime it runs on:

- in-process: the runtime starts one MPyC party process per party through the one launcher of
  local process groups (:mod:`protocols.shamir_launch` over :mod:`protocols.processes`), each
  handed only its own inputs;
- networked: every party process already runs MPyC; the runtime runs the same SPMD protocol
  (:func:`protocols.shamir_products.secure_phase`) on its own MPyC connections.

Either way every message of the protocol is metered through ``rt.meter.message`` (phase
``mpc``), with its payload bytes as they crossed the channel, and the per-phase seconds and bytes
come back in :class:`ProductResult`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, ProtocolError

PHASE = "mpc"  # the meter phase every secure-product message is counted in


@dataclass(frozen=True)
class ProductRequest:
    """A public job: which blocks, whose noise, shapes, receiver, fixed-point precision."""

    pairs: tuple[tuple[int, int, int], ...]  # (a, b, noise party)
    shapes: dict[int, tuple[int, int]]  # party -> (rows, columns) of its matrix
    receiver: int
    frac_bits: int
    noise_bound: float  # public bound on |noise| the field is sized for
    impl: str = "rns"
    timeout: float = 120.0


@dataclass
class ProductResult:
    """Decoded blocks at the receiver (None elsewhere) and what each party measured."""

    blocks: dict[int, np.ndarray] | None
    secure_s: dict[int, float] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)
    peak_rss_mb: dict[int, float] = field(default_factory=dict)
    phases_s: dict[int, dict[str, float]] = field(default_factory=dict)
    phases_bytes: dict[str, int] = field(default_factory=dict)
    wall_s: float | None = None
    entered: dict[int, float] = field(default_factory=dict)  # when each party began (Unix s)

    def stats(self) -> dict[str, Any]:
        """The record's ``extra.mpc`` entry: per party its secure and CPU seconds, peak memory
        and seconds per phase; ``entry_spread_s``: how far apart the parties began it (the
        first one's phases include waiting for the last)."""
        out: dict[str, Any] = {
            "secure_s": self.secure_s,
            "cpu_s": self.cpu_s,
            "peak_rss_mb": self.peak_rss_mb,
            "phases_s": {
                k: {p: round(float(v), 4) for p, v in ph.items()} for k, ph in self.phases_s.items()
            },
        }
        if self.wall_s is not None:
            out["wall_s"] = self.wall_s
        if self.entered:
            first, last = min(self.entered.values()), max(self.entered.values())
            out["entry_spread_s"] = round(last - first, 4)
        return out

    def slowest_phases(self) -> dict[str, float]:
        """Per phase, the slowest party's seconds (the record's ``extra.phases_s``)."""
        out: dict[str, float] = {}
        for ph in self.phases_s.values():
            for k, v in ph.items():
                out[k] = max(out.get(k, 0.0), float(v))
        return out


def _sp():
    from protocols import shamir_launch, shamir_products  # noqa: PLC0415  (mpyc only on use)

    return shamir_products, shamir_launch


def _encode(request: ProductRequest, matrices: dict[int, np.ndarray], noises: dict[int, Any]):
    sp, _ = _sp()
    enc = {
        k: M.whole() if isinstance(M, StreamedInput) else sp.encode_fixed(M, request.frac_bits)
        for k, M in matrices.items()
    }
    enc_noise = {
        j: sp.encode_noise(N, request.frac_bits, request.noise_bound) for j, N in noises.items()
    }
    return enc, enc_noise


class StreamedInput:
    """A party's product input read block by block: ``M[s:e]`` gives rows s..e-1 already
    fixed-point encoded (int64), in consecutive slices as the rns protocol reads them, so the
    encoded n x c copy is never held; ``shape`` is the public (rows, columns); ``whole()`` gives
    every row (the in-process runtime hands its MPyC processes whole matrices)."""

    shape: tuple[int, int]

    def __getitem__(self, rows: slice) -> np.ndarray:
        raise NotImplementedError

    def whole(self) -> np.ndarray:
        return self[0 : self.shape[0]]


class BlockEncoding(StreamedInput):
    """A party's real matrix, fixed-point encoded only as the streamed protocol reads its row
    blocks (``enc[s:e]``), so the encoded n x c int64 copy is never held; its range is checked
    up front, block by block, so a bad entry fails before any message is sent."""

    def __init__(self, M: np.ndarray, frac_bits: int, check_rows: int = 65536) -> None:
        sp, _ = _sp()
        self.M, self.frac_bits, self.shape = M, frac_bits, M.shape
        for s in range(0, M.shape[0], check_rows):
            sp.encode_fixed(M[s : s + check_rows], frac_bits)  # raises ValueError out of range

    def __getitem__(self, rows: slice) -> np.ndarray:
        sp, _ = _sp()
        return sp.encode_fixed(self.M[rows], self.frac_bits)


def _meter(meter: Any, sent: dict[int, Sequence[tuple[str, int, int]]], rounds: int) -> None:
    with meter.in_phase(PHASE):
        for _ in range(rounds):
            meter.round()
        for src, msgs in sent.items():
            for _, dst, nbytes in msgs:
                meter.message(src=int(src), dst=int(dst), nbytes=int(nbytes))


def _phase_bytes(sent: dict[int, Sequence[tuple[str, int, int]]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for msgs in sent.values():
        for phase, _, nb in msgs:
            out[phase] = out.get(phase, 0) + int(nb)
    return out


def _rounds(request: ProductRequest) -> int:
    # rns: input sharing, then opening; MPyC's own arithmetic was never counted in rounds
    return 2 if request.impl == "rns" else 0


def run_local(
    rt: Any,
    request: ProductRequest,
    matrices: dict[int, np.ndarray],
    noises: dict[int, np.ndarray],
) -> ProductResult:
    """In-process runtime: start the MPyC party processes (all inputs live here)."""
    sp, sl = _sp()
    enc, _ = _encode(request, matrices, {})
    plan = [sp.Pair(*p) for p in request.pairs]
    try:
        opened, st = sl.run_block_products(
            enc,
            noises,
            plan,
            n_parties=rt.n_parties,
            receiver=request.receiver,
            frac_bits=request.frac_bits,
            noise_bound=request.noise_bound,
            impl=request.impl,
            timeout=request.timeout,
        )
    except sp.ShamirProtocolError as exc:
        raise ProtocolError(f"secure products failed: {exc}") from None
    except ValueError as exc:  # a premise of the field sizing or of the inputs
        raise ConfigError(f"secure products: {exc}") from None
    _meter(rt.meter, st.sent, _rounds(request))
    return ProductResult(
        blocks=sl.decode_products(opened, request.frac_bits),
        secure_s=dict(st.secure_s),
        cpu_s=dict(st.cpu_s),
        peak_rss_mb=dict(st.peak_rss_mb),
        phases_s=dict(st.phases_s),
        phases_bytes=_phase_bytes(st.sent),
        wall_s=st.wall_s,
    )


def run_networked(
    rt: Any,
    request: ProductRequest,
    matrices: dict[int, np.ndarray],
    noises: dict[int, np.ndarray],
    *,
    stats_at: int,
) -> ProductResult:
    """Networked runtime: this process is party ``rt.index`` and runs its part on ``rt.mpc``;
    the per-party statistics are collected (control plane) at party ``stats_at``."""
    sp, sl = _sp()
    from protocols.mpyc_party import peak_rss_kb  # noqa: PLC0415

    entered = time.time()  # wall clock: the parties' entries are compared across processes
    me = rt.index
    _, enc_noise = _encode(request, {}, noises)
    n = next(iter(request.shapes.values()))[0]
    mine = matrices.get(me)
    if mine is not None and tuple(mine.shape) != tuple(request.shapes[me]):
        raise ProtocolError(
            f"party {me}'s matrix must have the public shape {request.shapes[me]}, got {mine.shape}"
        )
    if isinstance(mine, StreamedInput):  # streamed from the party's engine, already encoded
        mine = mine if request.impl == "rns" else mine.whole()
    elif mine is not None and request.impl == "rns":  # streamed: encoded block by block
        mine = BlockEncoding(mine, request.frac_bits)
    elif mine is not None:
        mine = sp.encode_fixed(mine, request.frac_bits)
    try:
        job = sl.job_for(
            request.shapes,
            [sp.Pair(*p) for p in request.pairs],
            receiver=request.receiver,
            impl=request.impl,
            frac_bits=request.frac_bits,
            noise_bound=request.noise_bound,
            n_max=max(n, sp.MAX_ROWS) if request.impl == "rns" else sp.MAX_ROWS,
        )
    except ValueError as exc:  # a premise of the field sizing
        raise ConfigError(f"secure products: {exc}") from None
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    try:
        # one BLAS thread, as the in-process runtime's MPyC processes have (shamir_launch): its
        # products are many small ones, and OpenBLAS's extra threads spin between them; at 100k
        # training rows (fm-vfl --processes, 2 cores at load ~17) the data parties' secure phase
        # took 0.9 CPU-s each (local product 5.3 s) with them and 0.13 (0.4 s) without
        with threadpool_limits(limits=1, user_api="blas"):
            opened, rep = rt._run(
                sp.secure_phase(rt.mpc, job=job, matrix=mine, noises=enc_noise),
                "the secure products",
            )
    except sp.ShamirProtocolError as exc:
        raise ProtocolError(f"secure products failed: {exc}") from None
    _meter(rt.meter, {me: rep["sent"]}, _rounds(request))
    mine = {
        "secure_s": rep["secure_s"],
        "cpu_s": rep["cpu_s"],
        "peak_rss_mb": peak_rss_kb() / 1024.0,
        "phases_s": rep["phases_s"],
        "phases_bytes": _phase_bytes({me: rep["sent"]}),
        "entered": entered,
    }
    got = rt.collect(mine, dst=stats_at) or {}
    total: dict[str, int] = {}
    for s in got.values():
        for k, v in s["phases_bytes"].items():
            total[k] = total.get(k, 0) + int(v)
    return ProductResult(
        blocks=sl.decode_products(opened, request.frac_bits) if opened is not None else None,
        secure_s={k: s["secure_s"] for k, s in got.items()},
        cpu_s={k: s["cpu_s"] for k, s in got.items()},
        peak_rss_mb={k: s["peak_rss_mb"] for k, s in got.items()},
        phases_s={k: s["phases_s"] for k, s in got.items()},
        phases_bytes=total,
        entered={k: s["entered"] for k, s in got.items()},
    )
