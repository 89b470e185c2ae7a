"""What a protocol step accepts from a peer: checked on arrival, before any code uses it.

A step that receives declares an :class:`Expect` (``rt.send(..., expect=Expect(...))``; also
``broadcast`` and ``gather``); the runtime checks every decoded payload against it where it is
delivered (:meth:`securevfl.runtime.base.Runtime._delivered`), in-process and networked alike.
A mismatch raises :class:`~securevfl.errors.ProtocolError` naming the receiver, the sender and
the step (the CLI prints that one line), so a peer's substituted message never reaches a matmul
(a ``ValueError`` deep in a trainer) or a model (NaN gradients), and a forged count never
reaches a record.

Sizes come from the run: the caller states the shape it expects (the minibatch's rows, the
model's widths) and bounds on counts (the run's frame limit, the rows of the run).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from protocols.compress import decode, message_shape
from securevfl.errors import ProtocolError, SecureVFLError

__all__ = ["Expect", "peer_bytes"]

_KINDS = {"f": "float", "i": "int", "u": "unsigned int", "b": "bool"}


@dataclass(frozen=True)
class Expect:
    """A step's rule for what a peer sends it.

    ``kind``: ``"array"`` (a numpy array whose dtype kind is in ``dtype``, e.g. ``"f"`` or
    ``"fiu"``, of ``shape``: ints, None for any length; None for any shape), ``"int"``,
    ``"float"``, ``"list"`` (a list of ``shape``'s length, each item checked by ``items``),
    ``"bytes"`` (``min_len`` to ``max_len`` long, a multiple of ``multiple``: whole
    ciphertexts), ``"packed"`` (a
    ``protocols.compress`` message, at most ``max_len`` long: the shape in its header is checked
    against ``shape`` before it is decoded, then its values by the array rules) or ``"dict"``
    (exactly the keys of ``fields``, each value checked by its rule). ``finite``: no NaN or
    infinity; ``lo``/``hi``: inclusive bounds on every value; ``optional``: None is accepted too;
    ``or_packed``: an ``"array"`` may also come as its compressed message (a cascade client's
    scoring message).
    """

    step: str
    kind: str = "array"
    dtype: str = "f"
    shape: tuple[int | None, ...] | None = None
    finite: bool = True
    lo: float | None = None
    hi: float | None = None
    max_len: int | None = None
    min_len: int | None = None
    multiple: int | None = None
    fields: tuple[tuple[str, Expect], ...] = ()
    items: Expect | None = None
    optional: bool = False
    or_packed: bool = False

    def check(self, value: Any, *, src: int, dst: int) -> Any:
        """``value`` if it meets this rule, else a ProtocolError naming both parties."""
        why = self._violation(value)
        if why is not None:
            raise ProtocolError(_refusal(self.step, src, dst, why))
        return value

    def _violation(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if self.or_packed and type(value) is bytes:
            return self._packed(value)
        check = {
            "array": self._array,
            "int": self._int,
            "float": self._float,
            "bytes": self._bytes,
            "packed": self._packed,
            "dict": self._dict,
            "list": self._list,
        }[self.kind]
        return check(value)

    def _array(self, a: Any) -> str | None:
        if type(a) is not np.ndarray:
            return f"expected an array, got {_what(a)}"
        if a.dtype.kind not in self.dtype:
            kinds = " or ".join(_KINDS.get(c, c) for c in self.dtype)
            return f"expected an array of {kinds}, got dtype {a.dtype}"
        why = self._shape(a.shape)
        if why is not None:
            return why
        if a.dtype.kind in "fc" and self.finite and a.size and not np.isfinite(a).all():
            return f"{int(a.size - np.isfinite(a).sum())} values are NaN or infinite"
        if a.size and (self.lo is not None or self.hi is not None):
            lo, hi = a.min(), a.max()
            if (self.lo is not None and lo < self.lo) or (self.hi is not None and hi > self.hi):
                return f"values from {lo} to {hi}, outside [{self.lo}, {self.hi}]"
        return None

    def _shape(self, shape: tuple[int, ...]) -> str | None:
        if self.shape is not None and (
            len(shape) != len(self.shape)
            or any(want is not None and got != want for got, want in zip(shape, self.shape))
        ):
            want = "(" + ", ".join("any" if d is None else str(d) for d in self.shape) + ")"
            return f"expected shape {want}, got {tuple(shape)}"
        return None

    def _packed(self, v: Any) -> str | None:
        why = self._bytes(v)
        if why is not None:
            return why
        try:  # the header's shape first: decoding allocates what it claims
            why = self._shape(message_shape(v))
            if why is not None:
                return f"a compressed message: {why}"
            a = decode(v)
        except Exception as e:  # noqa: BLE001  (any failure on crafted bytes is the peer's)
            return f"a malformed compressed message ({type(e).__name__}: {e})"
        return self._array(a)

    def _range(self, v: float) -> str | None:
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            return f"{v!r} is outside [{self.lo}, {self.hi}]"
        return None

    def _int(self, v: Any) -> str | None:
        if type(v) is not int and not isinstance(v, np.integer):
            return f"expected an int, got {_what(v)}"
        return self._range(int(v))

    def _float(self, v: Any) -> str | None:
        if type(v) not in (int, float) and not isinstance(v, np.integer | np.floating):
            return f"expected a number, got {_what(v)}"
        if self.finite and not math.isfinite(float(v)):
            return f"{float(v)!r} is not finite"
        return self._range(float(v))

    def _bytes(self, v: Any) -> str | None:
        if type(v) is not bytes:
            return f"expected bytes, got {_what(v)}"
        if self.max_len is not None and len(v) > self.max_len:
            return f"{len(v)} bytes, over the {self.max_len} this step allows"
        if self.min_len is not None and len(v) < self.min_len:
            return f"{len(v)} bytes, under the {self.min_len} this step needs"
        if self.multiple and len(v) % self.multiple:
            return f"{len(v)} bytes, not a multiple of {self.multiple}"
        return None

    def _dict(self, d: Any) -> str | None:
        if type(d) is not dict:
            return f"expected a dict, got {_what(d)}"
        rules = dict(self.fields)
        if set(d) != set(rules):
            odd = ", ".join(sorted(map(repr, set(d) ^ set(rules)))[:3])
            return f"expected the keys {sorted(rules)}; differing: {odd}"
        for k, rule in self.fields:
            why = rule._violation(d[k])
            if why is not None:
                return f"at {k!r}: {why}"
        return None

    def _list(self, v: Any) -> str | None:
        if type(v) is not list:
            return f"expected a list, got {_what(v)}"
        why = self._shape((len(v),))
        if why is not None:
            return f"a list: {why}"
        for i, item in enumerate(v):
            why = self.items._violation(item) if self.items is not None else None
            if why is not None:
                return f"at item {i}: {why}"
        return None


def _refusal(step: str, src: int, dst: int, why: str) -> str:
    return f"party {dst} refused the message of party {src} at step {step!r}: {why}"


@contextmanager
def peer_bytes(step: str, *, src: int, dst: int) -> Iterator[None]:
    """Around a library's deserialization of a peer's bytes that passed their :class:`Expect`
    (a SEAL ciphertext, a Paillier key): what the library raises on crafted bytes becomes the
    same one-line ProtocolError naming both parties and the step."""
    try:
        yield
    except SecureVFLError:
        raise
    except (ValueError, RuntimeError, TypeError, OverflowError) as e:
        why = str(e).splitlines()[0] if str(e) else ""
        raise ProtocolError(
            _refusal(step, src, dst, f"bytes it cannot load ({type(e).__name__}: {why})")
        ) from None


def _what(v: Any) -> str:
    t = type(v)
    if t is np.ndarray:
        return f"an array of dtype {v.dtype} and shape {v.shape}"
    return f"{t.__module__ + '.' if t.__module__ != 'builtins' else ''}{t.__qualname__}"
