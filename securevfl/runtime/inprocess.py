"""All parties in one process: the default runtime, fast, used by most tests.

Payloads are still serialized and deserialized, so the receiver never shares memory with the
sender and the metered bytes are exactly those a networked run would send.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from securevfl.errors import ConfigError
from securevfl.runtime import serialization
from securevfl.runtime.base import Expects, Runtime
from securevfl.runtime.channel import Meter
from securevfl.runtime.expect import Expect


class InProcessRuntime(Runtime):
    """Every party lives here."""

    def __init__(self, n_parties: int) -> None:
        if n_parties < 1:
            raise ConfigError(f"n_parties must be >= 1, got {n_parties}")
        self.n_parties = n_parties
        self.meter = Meter()

    def here(self, k: int) -> bool:
        return 0 <= k < self.n_parties

    def _check(self, k: int, what: str) -> None:
        if not 0 <= k < self.n_parties:
            raise ConfigError(f"{what} must be a party index in [0, {self.n_parties}), got {k}")

    def _move(self, value: Any, src: int, dst: int, expect: Expects = None) -> Any:
        data = serialization.dumps(value)
        self.meter.message(src=src, dst=dst, nbytes=len(data))
        return self._delivered(serialization.loads(data), src=src, dst=dst, expect=expect)

    def send(self, value: Any, *, src: int, dst: int, expect: Expect | None = None) -> Any:
        self._check(src, "src")
        self._check(dst, "dst")
        if src == dst:
            return value
        self.meter.round()
        return self._move(value, src, dst, expect)

    def broadcast(
        self,
        value: Any,
        *,
        src: int,
        dsts: Iterable[int] | None = None,
        expect: Expect | None = None,
    ) -> Any:
        self._check(src, "src")
        dsts = [d for d in (range(self.n_parties) if dsts is None else dsts) if d != src]
        if not dsts:
            return value
        self.meter.round()
        data = serialization.dumps(value)
        for d in dsts:
            self._check(d, "dst")
            self.meter.message(src=src, dst=d, nbytes=len(data))
        # every receiver gets its own copy; in-process one decoded copy stands for all of them
        out = serialization.loads(data)
        for d in dsts:  # what a receiver is handed is what the delivery check returns
            out = self._delivered(out, src=src, dst=d, expect=expect)
        return out

    def gather(
        self, values: Mapping[int, Any], *, dst: int, expect: Expects = None
    ) -> dict[int, Any]:
        self._check(dst, "dst")
        self.meter.round()
        out = {}
        for k, v in values.items():
            self._check(k, "sender")
            out[k] = v if k == dst else self._move(v, k, dst, expect)
        return out

    def control(self, value: Any, *, src: int) -> Any:
        return value

    def secure_products(
        self,
        request: Any,
        matrices: Mapping[int, Any],
        noises: Mapping[int, Any],
        *,
        stats_at: int = 0,
    ) -> Any:
        # local MPyC party processes, one per party, started through the one launcher
        from securevfl.runtime.secure_products import run_local  # noqa: PLC0415

        return run_local(self, request, dict(matrices), dict(noises))
