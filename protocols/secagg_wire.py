"""Secure aggregation's messages: header layout, sizes, errors, parameters, the checked opening.

Split from ``protocols.secagg`` (whose docstring describes the protocol); import the public names
from there.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, hmac

from protocols import shamir
from protocols.bitpack import MAX_BITS

SERVER = 0xFFFFFFFF  # the server's id in headers (parties are 0..M-1)
MASKED, REQUEST, RESPONSE, CHECK, VOUCH = 1, 2, 3, 4, 5
_KINDS = {
    MASKED: "masked values",
    REQUEST: "unmasking request",
    RESPONSE: "unmasking response",
    CHECK: "survivor list",
    VOUCH: "vouch for the survivor list",
}
_HEADER = struct.Struct(">B16sIIQQQI")  # kind, session, sender, receiver, round, batch, off, count
HEADER_BYTES = _HEADER.size
TAG_BYTES = 32
_NONCE = 12
SHARE_RECORD_BYTES = _NONCE + shamir.SHARE_BYTES + 16  # nonce | AES-GCM(share) | GCM tag
NO_OFFSET = (1 << 64) - 1  # header offset of a batch keyed on its own (round, batch) ids


class SecAggError(RuntimeError):
    """Secure aggregation could not complete; never a wrong sum."""


class SecAggAbort(SecAggError):
    """The round aborts because of the named party (missing, malformed or unauthentic message).

    ``party`` is the first party named (``SERVER`` for the server), ``parties`` all of them.
    """

    def __init__(self, message: str, party: int | None = None, parties: Sequence[int] = ()):
        super().__init__(message)
        self.party = party
        self.parties = tuple(parties) or ((party,) if party is not None else ())


def modulus_bits(bound: int) -> int:
    """Smallest r with 2^r > bound, so every sum in [0, bound] is recovered exactly mod 2^r.

    The paper writes ceil(log2(bM)); for bM a power of two that misses the top value bM itself
    (all parties at q = b), hence ``bound.bit_length()`` = ceil(log2(bM + 1)).
    """
    if int(bound) < 1:
        raise ValueError(f"bound must be >= 1, got {bound}")
    r = int(bound).bit_length()
    if r > MAX_BITS:
        raise ValueError(f"bound must be < 2^{MAX_BITS}, got {bound}")
    return r


def default_threshold(n_parties: int) -> int:
    """floor(M/2) + 1 shares: a majority, so two disjoint survivor sets cannot both unmask."""
    return n_parties // 2 + 1


def _check_params(n_parties: int, bits: int, threshold: int | None) -> int:
    if n_parties < 2:
        raise ValueError(f"n_parties must be >= 2 for secure aggregation, got {n_parties}")
    if not 1 <= bits <= MAX_BITS:
        raise ValueError(f"bits must be in [1, {MAX_BITS}], got {bits}")
    t = default_threshold(n_parties) if threshold is None else int(threshold)
    # t >= 2: the server must never unmask a "sum" of a single party's input
    if not 2 <= t <= n_parties:
        raise ValueError(f"threshold must be in [2, {n_parties}], got {threshold}")
    return t


@dataclass(frozen=True)
class _Header:
    kind: int
    session: bytes
    sender: int
    receiver: int
    round_id: int
    batch_id: int
    offset: int
    count: int


def _open(
    msg: Any, key: bytes, want: _Header, size: int | None, where: str, party: int, who: str
) -> bytes:
    """The body of an authentic message matching ``want`` (and ``size`` bytes long in all), or
    SecAggAbort naming ``party``. Checks cheap facts first so the error says what is wrong."""
    if not isinstance(msg, bytes | bytearray):
        raise SecAggAbort(
            f"{where}: {who} sent a value of type {type(msg).__name__}, not bytes", party
        )
    msg = bytes(msg)
    if len(msg) < HEADER_BYTES + TAG_BYTES:
        raise SecAggAbort(f"{where}: {who}'s message is truncated ({len(msg)} bytes)", party)
    got = _Header(*_HEADER.unpack_from(msg))
    if got != want:
        raise SecAggAbort(
            f"{where}: {who}'s message is a {_KINDS.get(got.kind, f'kind {got.kind}')} for "
            f"session/sender/receiver/round/batch/offset/count {got.session.hex()[:8]}/"
            f"{got.sender}/{got.receiver}/{got.round_id}/{got.batch_id}/{got.offset}/{got.count}, "
            f"expected a {_KINDS[want.kind]} for {want.session.hex()[:8]}/{want.sender}/"
            f"{want.receiver}/{want.round_id}/{want.batch_id}/{want.offset}/{want.count}",
            party,
        )
    if size is not None and len(msg) != size:
        what = "truncated" if len(msg) < size else "extended"
        raise SecAggAbort(
            f"{where}: {who}'s message is {what} ({len(msg)} bytes, expected {size})", party
        )
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(msg[:-TAG_BYTES])
    try:
        h.verify(msg[-TAG_BYTES:])
    except InvalidSignature:
        raise SecAggAbort(
            f"{where}: {who}'s message fails authentication (forged, altered, or a body "
            "replayed under another header)",
            party,
        ) from None
    return msg[HEADER_BYTES:-TAG_BYTES]


def _params(n_parties: int, bits: int, threshold: int) -> bytes:
    # bound into every key: parties or a server with other parameters fail authentication
    return struct.pack(">III", n_parties, bits, threshold)


def _where(round_id: int, batch_id: int) -> str:
    return f"secure aggregation round {round_id} batch {batch_id} aborted"
