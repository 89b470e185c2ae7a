"""The bytes that cross a party boundary.

Payloads are pickled (protocol 5) and decoded with the allow-list unpickler of
:mod:`protocols.wire`, so a malicious peer cannot make a party execute code: only builtin
containers/scalars and numpy arrays/scalars pass. Torch tensors must be converted to numpy
before they are sent.
"""

from __future__ import annotations

from typing import Any

from protocols import wire
from securevfl.errors import ProtocolError


def dumps(obj: Any) -> bytes:
    """Serialize a payload to the bytes that are sent."""
    return wire.dumps(obj)


def loads(data: bytes) -> Any:
    """Deserialize received bytes with the allow-list unpickler (ProtocolError if refused)."""
    try:
        return wire.loads(data)
    except wire.WireError as exc:
        raise ProtocolError(str(exc)) from None
