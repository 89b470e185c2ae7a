"""The bytes that cross a party boundary.

Payloads are encoded with the typed wire format of :mod:`protocols.wire` (never pickle): a
decoder that calls no constructor a peer names and checks every size against the bytes received,
so a malicious peer can neither make a party execute code nor allocate more than a small multiple
of what it sent. Only builtin containers/scalars and numpy arrays/scalars pass; torch tensors must
be converted to numpy before they are sent.
"""

from __future__ import annotations

from typing import Any

from protocols import wire
from securevfl.errors import ProtocolError


def dumps(obj: Any) -> bytes:
    """Serialize a payload to the bytes that are sent."""
    return wire.dumps(obj)


def loads(data: bytes) -> Any:
    """Decode received bytes with the bounded typed decoder (ProtocolError if refused)."""
    try:
        return wire.loads(data)
    except wire.WireError as exc:
        raise ProtocolError(str(exc)) from None
