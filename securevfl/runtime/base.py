"""The runtime interface that SPMD protocol code is written against.

Every party runs the same protocol function. Local work happens only where a party lives
(``rt.local``); every value that crosses a party boundary goes through ``send``/``broadcast``/
``gather``, which serialize it, meter the bytes and hand the receiver a deserialized copy.
A value a party does not hold is ``None`` on that party. A receiving step states what it accepts
(``expect=``, :class:`~securevfl.runtime.expect.Expect`): every delivered payload is checked
against it before the step sees it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from securevfl.runtime.channel import Meter
from securevfl.runtime.expect import Expect
from securevfl.runtime.view import ViewRecorder

# what a receiving step accepts: one rule for every sender, one per sender (a gather whose
# senders send differently shaped messages), or None (unchecked)
Expects = Expect | Mapping[int, Expect] | None


class Runtime(ABC):
    """Where parties live and how payloads move between them."""

    n_parties: int
    meter: Meter
    view: ViewRecorder | None = None  # records one party's view (--record-view); None: off

    def _delivered(self, value: Any, *, src: int, dst: int, expect: Expects = None) -> Any:
        """Every payload handed to a receiver passes here: checked against the step's
        ``expect`` (one rule, or one per sender; a ProtocolError naming ``src``, ``dst`` and
        the step), then the view recorder's tap."""
        if isinstance(expect, Mapping):
            expect = expect[src]
        if expect is not None:
            value = expect.check(value, src=src, dst=dst)
        if self.view is not None:
            self.view.received(src=src, dst=dst, phase=self.meter.phase, payload=value)
        return value

    def mark_batch(self, step: int, rows: Any) -> None:
        """Trainers call this as each minibatch starts (tags the recorded payloads)."""
        if self.view is not None:
            self.view.mark_batch(step, rows, self.meter.phase)

    def keep_local(self, k: int, what: str, value: Any) -> None:
        """Trainers hand here what party ``k`` derived from a reply in the current batch (an
        unmasked gradient, a zeroth-order estimate): it holds it, so its view does too."""
        if self.view is not None and self.view.party == k:
            self.view.keep_local(what, value, self.meter.phase)

    def keep_model(self, k: int, model: Any) -> None:
        """Trainers hand party ``k``'s final local model here (kept only in k's view)."""
        if self.view is not None and self.view.party == k:
            self.view.keep_model(model)

    @abstractmethod
    def here(self, k: int) -> bool:
        """True if party ``k`` lives in this process."""

    @property
    def local_parties(self) -> list[int]:
        return [k for k in range(self.n_parties) if self.here(k)]

    def local(self, k: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` where party ``k`` lives; ``None`` elsewhere."""
        return fn(*args, **kwargs) if self.here(k) else None

    @abstractmethod
    def send(self, value: Any, *, src: int, dst: int, expect: Expect | None = None) -> Any:
        """Move ``value`` (held by ``src``) to ``dst``; returns it at ``dst``, None elsewhere;
        ``expect``: what ``dst`` accepts (checked on arrival)."""

    @abstractmethod
    def broadcast(
        self,
        value: Any,
        *,
        src: int,
        dsts: Iterable[int] | None = None,
        expect: Expect | None = None,
    ) -> Any:
        """Send ``value`` from ``src`` to every party in ``dsts`` (default: all others).

        Returns the value at ``src`` and at every receiver, ``None`` elsewhere.
        """

    @abstractmethod
    def gather(
        self, values: Mapping[int, Any], *, dst: int, expect: Expects = None
    ) -> dict[int, Any] | None:
        """Each sender ``k`` in ``values`` sends ``values[k]`` to ``dst`` (one round).

        ``values[k]`` need only be set where ``k`` lives. Returns ``{k: value}`` at ``dst``.
        """

    @abstractmethod
    def control(self, value: Any, *, src: int) -> Any:
        """Unmetered control-plane broadcast (seeds, fingerprints, meters), not protocol data."""

    def collect(self, value: Any, *, dst: int) -> dict[int, Any] | None:
        """Unmetered control-plane gather of each process's ``value`` (keyed by party)."""
        return {k: value for k in self.local_parties} if self.here(dst) else None

    def secure_products(
        self,
        request: Any,
        matrices: Mapping[int, Any],
        noises: Mapping[int, Any],
        *,
        stats_at: int = 0,
    ) -> Any:
        """Blocks M_aᵀM_b + N opened to ``request.receiver`` only (MPC among all parties);
        ``matrices``/``noises`` hold the inputs of the parties that live here. See
        :mod:`securevfl.runtime.secure_products` (ProductRequest, ProductResult)."""
        raise NotImplementedError(f"{type(self).__name__} offers no secure products")

    def close(self) -> None:  # noqa: B027  (optional hook: in-process has nothing to release)
        """Release resources (network connections)."""

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
