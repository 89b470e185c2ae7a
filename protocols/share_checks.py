"""Shares a peer sends in the secure products, checked before any arithmetic uses them.

MPyC 0.11 and our RNS protocol trust their peers: a share of the wrong length reached numpy's
``reshape`` (a ``ValueError`` traceback, or inside one of MPyC's tasks only a log line while the
party waited until its timeout); a share of the wrong type or outside the field reached the
Lagrange recombination; an RNS residue that is NaN, fractional or above the bound the exact
float64 products assume (|v| <= 2^20) gave a silently wrong block. Every share is checked here on
arrival against what the protocol step expects (length from the public job's shapes, integer
values, the field's range), and a violation stops the party with one line naming the peer.

Two paths: our own coroutines (the RNS protocol, ``fast_input``) call the ``received_*``
functions; MPyC's own output and resharing steps recombine through ``thresha.np_recombine`` /
``thresha.recombine``, which :func:`guard_recombination` wraps: every point carries its party's
evaluation point x = id + 1, so the sender of a bad share is known there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from protocols.wire import WireError

RESIDUE_BOUND = 1 << 20  # |centred residue| the RNS products' float64 exactness assumes


class ShareError(WireError):
    """A peer's share is not what the protocol step expects."""


def refuse(why: str, mpc: Any = None) -> NoReturn:
    """Stop on a bad share: inside MPyC's tasks an exception is only logged, so the party's
    violation hook (``guard_mpyc_unpickling``'s ``on_violation``) is told first."""
    hook = getattr(mpc, "_securevfl_on_violation", None)
    if hook is not None:
        hook(why)
    raise ShareError(why)


def received_residues(
    data: Any, *, sender: int, step: str, r: int, shape: tuple[int, ...], bound: int = RESIDUE_BOUND
) -> np.ndarray:
    """An RNS share (``rns.pack``: float32 centred residues) of ``r`` residues of ``shape``."""
    count = r * int(np.prod(shape))
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) != 4 * count:
        got = f"{len(data)} bytes" if isinstance(data, bytes | bytearray) else type(data).__name__
        refuse(f"party {sender} sent a share at step {step!r} of {got}, expected {4 * count}")
    a = np.frombuffer(data, dtype="<f4").reshape(r, *shape)
    ok = np.isfinite(a).all() and (np.abs(a) <= bound).all() and (a == np.rint(a)).all()
    if count and not ok:
        refuse(
            f"party {sender} sent a share at step {step!r} whose residues are not integers "
            f"within +-{bound}"
        )
    return a


def received_seed(data: Any, *, sender: int, size: int) -> bytes:
    """A dealer's share seed of ``size`` bytes."""
    if not isinstance(data, bytes | bytearray) or len(data) != size:
        refuse(f"party {sender} sent a share seed that is not {size} bytes")
    return bytes(data)


def received_field_share(
    data: Any, *, sender: int, shape: Sequence[int], order: int, mpc: Any = None
) -> np.ndarray:
    """A share ``fast_input`` ships: raw int64 field elements in [0, order) of ``shape``."""
    count = int(np.prod(shape))
    if not isinstance(data, bytes | bytearray) or len(data) != 8 * count:
        refuse(f"party {sender} sent an input share that is not {8 * count} bytes", mpc)
    a = np.frombuffer(data, dtype=np.int64)
    if count and (a.min() < 0 or a.max() >= order):
        refuse(f"party {sender} sent an input share outside the field [0, {order})", mpc)
    return a.reshape(tuple(shape))


def _share_problem(share: Any, want: tuple[int, ...] | None, order: int) -> str | None:
    if isinstance(share, list | tuple):  # MPyC's scalar path: a list of ints
        share = np.array(share, dtype=object) if share else np.zeros(0, dtype=np.int64)
    if type(share) is not np.ndarray:
        return f"not an array of field elements but {type(share).__name__}"
    if share.dtype.kind not in "iuO":
        return f"of dtype {share.dtype}, not field elements"
    if share.dtype.kind == "O" and not all(type(v) is int for v in share.flat):
        return "holding values that are not integers"
    if want is not None and share.shape != want:
        return f"of shape {share.shape}, expected {want}"
    if share.size and (share.min() < 0 or share.max() >= order):
        return f"with values outside the field [0, {order})"
    return None


def _check_points(mpc: Any, field: Any, points: Sequence[Any]) -> None:
    """Every share of a recombination: integers of the field, of one shape (the own share's,
    else the shape most shares have), each bad one named by its sender."""
    me, order = getattr(mpc, "pid", None), int(field.order)
    shapes = {x: np.shape(s) for x, s in points}
    own = next((shapes[x] for x, _ in points if x == (me or 0) + 1), None)
    want = own if own is not None else Counter(shapes.values()).most_common(1)[0][0]
    for x, share in points:
        why = _share_problem(share, tuple(want), order)
        if why is not None:
            refuse(f"party {int(x) - 1} sent an MPyC share {why}", mpc)


def guard_recombination(mpc: Any) -> None:
    """Make MPyC's output and resharing steps check every share before they recombine it
    (idempotent; process-wide, as each MPyC party is its own process)."""
    from mpyc import thresha  # noqa: PLC0415  (no mpyc import in callers' processes)

    if getattr(thresha, "_securevfl_guarded", False):
        return
    np_recombine, recombine = thresha.np_recombine, thresha.recombine

    def checked_np_recombine(field: Any, points: Any, *args: Any, **kwargs: Any) -> Any:
        _check_points(mpc, field, points)
        return np_recombine(field, points, *args, **kwargs)

    def checked_recombine(field: Any, points: Any, *args: Any, **kwargs: Any) -> Any:
        _check_points(mpc, field, points)
        return recombine(field, points, *args, **kwargs)

    thresha.np_recombine, thresha.recombine = checked_np_recombine, checked_recombine
    thresha._securevfl_guarded = True
