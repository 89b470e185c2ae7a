"""What a peer's bytes may decode to: an allow-list unpickler, and MPyC's unpickling put behind it.

Every message a party receives is decoded here, never by ``pickle.loads``: payloads of our
runtime, inputs handed to local party processes, and MPyC's own secure-arithmetic messages (MPyC
0.11 unpickles numpy share arrays in ``input``/``output``/``_reshare`` and every ``transfer``;
:func:`guard_mpyc_unpickling` swaps the ``pickle`` that ``mpyc.runtime`` sees for this one).
Only builtin containers and scalars, numpy arrays/scalars/dtypes and (for MPyC's shares) gmpy2
integers pass; anything else raises :class:`WireError` before an object is built.
"""

from __future__ import annotations

import io
import pickle
import types
from collections.abc import Callable
from typing import Any


class WireError(RuntimeError):
    """A peer sent bytes that are not a valid message (wrong type, wrong format, wrong run)."""


_BUILTINS = (
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
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {("builtins", n) for n in _BUILTINS}
    | {
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
)
# MPyC's share arrays are object arrays of Python ints or gmpy2 mpz (from_binary parses bytes)
MPYC_EXTRA: frozenset[tuple[str, str]] = frozenset({("gmpy2.gmpy2", "from_binary")})


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, extra: frozenset[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self._extra = extra

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in ALLOWED or key in self._extra:
            return super().find_class(module, name)
        if module == "numpy.dtypes" and name.endswith("DType"):
            return super().find_class(module, name)
        raise WireError(f"payload type must be numpy/builtin, got {module}.{name}")


def dumps(obj: Any) -> bytes:
    """Serialize a payload to the bytes that are sent (pickle protocol 5)."""
    return pickle.dumps(obj, protocol=5)


def loads(data: bytes, *, extra: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """Decode received bytes with the allow-list; malformed bytes raise :class:`WireError`."""
    try:
        return _Unpickler(bytes(data), extra).load()
    except WireError:
        raise
    except Exception as exc:  # truncated or garbage pickles raise many types; all mean "bad"
        raise WireError(f"malformed payload ({type(exc).__name__}: {exc})") from None


def guard_mpyc_unpickling(on_violation: Callable[[str], None]) -> None:
    """Make ``mpyc.runtime`` decode received messages with the allow-list, not ``pickle.loads``.

    ``on_violation(reason)`` is called before the error is raised: MPyC decodes inside its own
    tasks, where an exception would only be logged while the party waits on, so the caller must
    be told directly (to abort the run).
    """
    import mpyc.runtime as mrt

    def guarded_loads(data: bytes, *args: Any, **kwargs: Any) -> Any:
        try:
            return loads(data, extra=MPYC_EXTRA)
        except WireError as exc:
            on_violation(f"a peer sent an MPyC message that is not allowed: {exc}")
            raise

    shim = types.SimpleNamespace(dumps=pickle.dumps, loads=guarded_loads)
    mrt.pickle = shim  # type: ignore[assignment]  (mpyc.runtime calls pickle.loads via this name)
