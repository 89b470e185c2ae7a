"""The bytes that cross a party boundary.

Payloads are pickled (protocol 5) and unpickled with an allow-list, so a malicious peer cannot make
a party execute arbitrary code: only builtin containers/scalars and numpy arrays/scalars pass.
Torch tensors must be converted to numpy before they are sent.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from securevfl.errors import ProtocolError

_ALLOWED = {
    ("builtins", n)
    for n in (
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "bytearray",
        "complex",
        "slice",
        "int",
        "float",
        "bool",
        "str",
        "bytes",
    )
}
_ALLOWED |= {
    ("collections", "OrderedDict"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        raise ProtocolError(f"payload type must be numpy/builtin, got {module}.{name}")


def dumps(obj: Any) -> bytes:
    """Serialize a payload to the bytes that are sent."""
    return pickle.dumps(obj, protocol=5)


def loads(data: bytes) -> Any:
    """Deserialize received bytes with the allow-list unpickler."""
    return _SafeUnpickler(io.BytesIO(data)).load()
