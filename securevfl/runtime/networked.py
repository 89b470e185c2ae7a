"""One OS process per party, over MPyC's runtime.

MPyC connects the parties (``-P host:port`` for each; TLS with a certificate directory) and
carries our payloads as pre-serialized bytes on its labelled messages (:mod:`protocols.mpyc_net`);
they are decoded only by the bounded typed format of :mod:`protocols.wire`, MPyC's own messages
too (:func:`protocols.wire.guard_mpyc_unpickling`), so no peer reaches ``pickle.loads``. Every
frame a peer sends is at most the run's frame limit: 1 MiB until the run's sizes are known (the
handshake), then the largest message the run's protocol can legitimately send plus slack
(:mod:`securevfl.runtime.frame_limits`, set by :meth:`NetworkedRuntime.limit_frames`;
``SECUREVFL_MAX_FRAME_MB`` overrides it): a larger frame is refused from its 12-byte header,
before it is buffered, naming the peer. What a peer may make this party hold in all is bounded
too (:func:`protocols.mpyc_net.held_budgets`; before the handshake only its own bytes). The
first round is the run handshake: a peer with another run spec, a foreign run on the same ports
or a peer without the run's key makes every party stop. Protocol code is unchanged from the
in-process runtime. Each process meters the messages it sends; the label holder merges the
meters at the end. Every wait has a timeout, so a dead party makes the others fail with
:class:`PartyTimeoutError` naming whom they waited for, never hang.

``import mpyc.runtime`` parses ``sys.argv``; we therefore start MPyC with an argv of our own and
only in a process that is a party (never in pytest's own process).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from protocols import mpyc_net
from protocols.wire import WireError, guard_mpyc_unpickling
from securevfl.errors import ConfigError, PartyTimeoutError, ProtocolError
from securevfl.runtime import serialization
from securevfl.runtime.base import Expects, Runtime
from securevfl.runtime.channel import Meter
from securevfl.runtime.expect import Expect
from securevfl.runtime.frame_limits import HANDSHAKE_FRAME, MAX_FRAME


def start_mpyc(index: int, addresses: Sequence[str], *, threshold: int | None = None):
    """Import MPyC as party ``index`` of ``addresses`` (``host:port`` each); not yet connected."""
    argv = [sys.argv[0], "-I", str(index), "--no-log"]
    for a in addresses:
        argv += ["-P", a]
    if threshold is not None:
        argv += ["-T", str(threshold)]
    saved = sys.argv
    sys.argv = argv
    try:
        from mpyc.runtime import mpc  # noqa: PLC0415  (parses sys.argv on first import)
    finally:
        sys.argv = saved
    logging.getLogger().setLevel(logging.WARNING)
    return mpc


def _is_connected(protocol: Any) -> bool:
    """MPyC keeps a peer's connection protocol, or None / a pending Future before it connects."""
    return protocol is not None and not isinstance(protocol, asyncio.Future)


DRAIN_POLL_S = 0.0005  # how often a sender looks whether its write buffers are empty


class NetworkedRuntime(Runtime):
    """This process is party ``index``; the others are reached through MPyC."""

    def __init__(
        self,
        index: int,
        addresses: Sequence[str],
        *,
        digest: bytes,
        timeout: float = 120.0,
        cert_dir: str | None = None,
        key: bytes = b"",
        digest_parts: dict[str, bytes] | None = None,
        max_frame: int | None = None,
    ) -> None:
        """``digest``: hash of this party's run spec, which every peer must share; ``cert_dir``:
        TLS certificates (MPyC's layout); ``key``: the run's shared secret, if a launcher made one;
        ``digest_parts``: the digest's named parts (per option), so a mismatch names the option;
        ``max_frame``: bytes per frame accepted from a peer until :meth:`limit_frames` (default:
        SECUREVFL_MAX_FRAME_MB, else :data:`~securevfl.runtime.frame_limits.HANDSHAKE_FRAME`).
        """
        if len(addresses) < 2:
            raise ConfigError(f"a networked run needs >= 2 party addresses, got {len(addresses)}")
        if not 0 <= index < len(addresses):
            raise ConfigError(f"index must be in [0, {len(addresses)}), got {index}")
        self.n_parties = len(addresses)
        self.index = index
        self.timeout = timeout
        # this party's TLS identity files (certificate, key): its run record holds them
        self.identity = mpyc_net.cert_paths(cert_dir, index)[1:] if cert_dir else None
        self.meter = Meter()
        self._dead: asyncio.Future | None = None
        self._closing = False
        self.mpc = start_mpyc(index, addresses)
        self.mpc._securevfl_on_lost = self._on_peer_lost
        self.mpc._loop.set_exception_handler(self._on_loop_error)
        try:
            if max_frame is None and not os.environ.get("SECUREVFL_MAX_FRAME_MB", "").strip():
                max_frame = HANDSHAKE_FRAME  # the run's own sizes come with its data
            guard_mpyc_unpickling(self._abort, max_bytes=max_frame)
        except WireError as exc:
            raise ConfigError(str(exc)) from None
        self._connected = False
        self._run(mpyc_net.secure_start(self.mpc, cert_dir=cert_dir), "connecting to all parties")
        self._connected = True
        self._run(
            mpyc_net.handshake(self.mpc, digest, key=key, parts=digest_parts), "the run handshake"
        )

    def limit_frames(self, nbytes: int) -> None:
        """From now on refuse any frame a peer announces over ``nbytes`` (the run's limit,
        :func:`securevfl.runtime.frame_limits.frame_limit`)."""
        if not 0 < nbytes <= MAX_FRAME:
            raise ConfigError(f"a frame limit must be in (0, {MAX_FRAME}] bytes, got {nbytes}")
        self.mpc._securevfl_max_frame = int(nbytes)

    @property
    def frame_limit(self) -> int:
        """The frame limit in force (bytes)."""
        return int(mpyc_net.max_frame(self.mpc))

    def _abort(self, reason: str) -> None:
        """Stop every wait now: a peer sent something we refuse to decode."""
        if self._dead is None:
            self._dead = self.mpc._loop.create_future()
        if not self._dead.done():
            self._dead.set_result(reason)

    def _on_peer_lost(self, peer: int, exc: BaseException | None) -> None:
        """A peer's connection closed: outside the final shutdown, that peer is gone."""
        if not self._closing:
            cause = f" ({type(exc).__name__})" if exc is not None else ""
            self._abort(f"party {peer} disconnected{cause}")

    def here(self, k: int) -> bool:
        return k == self.index

    def _on_loop_error(self, loop: Any, context: dict[str, Any]) -> None:
        """A peer's connection died: remember who, so waits fail now with a clear error.

        MPyC raises the socket error inside a transport callback, where asyncio would only log
        it (with a traceback) while this party goes on waiting for the dead peer's messages.
        """
        exc = context.get("exception")
        if not isinstance(exc, (ConnectionError, OSError, EOFError)):
            return  # e.g. futures of a cancelled wait completing late: a consequence, not a cause
        transport = getattr(getattr(context.get("handle"), "_callback", None), "__self__", None)
        transport = context.get("transport", transport)
        peer = None
        for party in self.mpc.parties:  # which peer's connection was this transport?
            if party.pid != self.index and getattr(party.protocol, "transport", None) is transport:
                peer = party.pid
        who = f"party {peer}" if peer is not None else "a peer"
        reason = f"{who} disconnected ({type(exc).__name__})"
        if self._dead is not None and not self._dead.done():
            self._dead.set_result(reason)

    def _run(self, aw: Any, what: str) -> Any:
        t0 = time.monotonic()

        async def guarded() -> Any:
            task = asyncio.ensure_future(aw)
            if self._dead is None:
                self._dead = asyncio.get_running_loop().create_future()
            done, _ = await asyncio.wait(
                {task, self._dead}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                return task.result()
            task.cancel()
            if self._dead in done:
                raise ProtocolError(
                    f"party {self.index} stopped while {what}: {self._dead.result()}"
                )
            # clients refused while waiting (a wrong id or certificate) explain many timeouts
            refused = getattr(self.mpc, "_securevfl_refused", [])
            raise PartyTimeoutError(
                f"party {self.index} waited more than {self.timeout:g} s for {what}"
                + self._unconnected()
                + self._silent_since(t0)
                + ("; refused " + "; ".join(refused[-2:]) if refused else "")
            )

        try:
            return self.mpc.run(guarded())
        except ProtocolError:
            raise
        except WireError as exc:
            raise ProtocolError(f"party {self.index} stopped while {what}: {exc}") from None
        except (ConnectionError, OSError) as exc:
            raise ProtocolError(
                f"party {self.index} lost a connection while {what}: {exc}"
            ) from None

    def _unconnected(self) -> str:
        """While connecting: which peers never connected (whom to look for)."""
        if self._connected:
            return ""
        missing = [
            f"party {p.pid} at {p.host}:{p.port}"
            for p in self.mpc.parties
            if p.pid != self.index and not _is_connected(p.protocol)
        ]
        return f" (not connected: {', '.join(missing)})" if missing else ""

    def _silent_since(self, t0: float) -> str:
        """After connecting: the peers that sent nothing during a wait that timed out."""
        if not self._connected:
            return ""
        seen = getattr(self.mpc, "_securevfl_last_seen", {})
        quiet = [k for k in range(self.n_parties) if k != self.index and seen.get(k, 0.0) < t0]
        if not quiet:
            return ""
        return f" (nothing received from {'party' if len(quiet) == 1 else 'parties'} " + (
            ", ".join(map(str, quiet)) + " during the wait)"
        )

    def _check_peer(self, k: int, what: str) -> None:
        if self._dead is not None and self._dead.done():
            # the first cause wins: a peer whose frame was refused between two waits has also
            # been disconnected by that refusal, which says less than the refusal itself
            raise ProtocolError(f"party {self.index} stopped while {what}: {self._dead.result()}")
        if k != self.index and self.mpc.parties[k].protocol is None:
            raise ProtocolError(f"party {k} has disconnected (seen by party {self.index})")

    def _decode(self, data: bytes, src: int) -> Any:
        """A peer's payload, or a one-line ProtocolError naming the peer that sent it."""
        try:
            return serialization.loads(data)
        except ProtocolError as exc:
            raise ProtocolError(
                f"party {self.index} refused a message from party {src}: {exc}"
            ) from None

    def _transfer(
        self, data: bytes | None, senders: list[int], receivers: list[int], what: str
    ) -> list[bytes]:
        for k in set(senders) | set(receivers):
            self._check_peer(k, what)
        got = self._run(mpyc_net.exchange(self.mpc, data, senders, receivers), what)
        if data is not None:
            self._drain(receivers, what)
        return got

    def _drain(self, peers: list[int], what: str) -> None:
        """Return only once this party's bytes to ``peers`` have left its write buffers.

        asyncio writes what the socket takes at once and the rest only while the event loop
        runs, i.e. during this party's next wait: a party that sent 32 MB and then computed for
        ten seconds held most of it back, and its peer idled that long (PSI at 1M IDs). The loop
        keeps reading while it waits here, so two parties draining toward each other proceed.
        """
        transports = [self.mpc.parties[k].protocol for k in peers if k != self.index]
        transports = [getattr(p, "transport", None) for p in transports]
        pending = [t for t in transports if t is not None]
        if not any(t.get_write_buffer_size() for t in pending):
            return

        async def drained() -> None:
            while any(t.get_write_buffer_size() for t in pending if not t.is_closing()):
                await asyncio.sleep(DRAIN_POLL_S)

        self._run(drained(), what)

    # Every party calls exchange for every primitive, involved or not: MPyC labels messages
    # by a program counter that must advance in lockstep on all parties (SPMD).

    def send(self, value: Any, *, src: int, dst: int, expect: Expect | None = None) -> Any:
        if src == dst:
            return value if self.here(src) else None
        self.meter.round()
        data = None
        if self.here(src):
            data = serialization.dumps(value)
            self.meter.message(src=src, dst=dst, nbytes=len(data))
        got = self._transfer(data, [src], [dst], f"a message from party {src} to party {dst}")
        if not self.here(dst):
            return None
        return self._delivered(self._decode(got[0], src), src=src, dst=dst, expect=expect)

    def broadcast(
        self,
        value: Any,
        *,
        src: int,
        dsts: Iterable[int] | None = None,
        expect: Expect | None = None,
    ) -> Any:
        dsts = [d for d in (range(self.n_parties) if dsts is None else dsts) if d != src]
        if not dsts:
            return value if self.here(src) else None
        self.meter.round()
        data = None
        if self.here(src):
            data = serialization.dumps(value)
            for d in dsts:
                self.meter.message(src=src, dst=d, nbytes=len(data))
        got = self._transfer(data, [src], dsts, f"a broadcast from party {src}")
        if self.here(src):
            return value
        if self.index not in dsts:
            return None
        return self._delivered(self._decode(got[0], src), src=src, dst=self.index, expect=expect)

    def gather(
        self, values: Mapping[int, Any], *, dst: int, expect: Expects = None
    ) -> dict[int, Any] | None:
        self.meter.round()
        senders = [k for k in sorted(values) if k != dst]
        data = None
        if self.index in senders:
            data = serialization.dumps(values[self.index])
            self.meter.message(src=self.index, dst=dst, nbytes=len(data))
        got = (
            self._transfer(data, senders, [dst], f"messages from parties {senders} to {dst}")
            if senders
            else []
        )
        if not self.here(dst):
            return None
        out = {k: values[k] for k in values if k == dst}
        for k, v in zip(senders, got):
            out[k] = self._delivered(self._decode(v, k), src=k, dst=dst, expect=expect)
        return out

    def control(self, value: Any, *, src: int) -> Any:
        # unmetered control plane: every party receives the value from src
        data = serialization.dumps(value) if self.here(src) else None
        everyone = list(range(self.n_parties))
        got = self._transfer(data, [src], everyone, f"control data from party {src}")
        return value if self.here(src) else self._decode(got[0], src)

    def collect(self, value: Any, *, dst: int) -> dict[int, Any] | None:
        everyone = list(range(self.n_parties))
        data = serialization.dumps(value)
        got = self._transfer(data, everyone, [dst], f"control data for party {dst}")
        if not self.here(dst):
            return None
        return {k: value if k == dst else self._decode(b, k) for k, b in enumerate(got)}

    def secure_products(
        self,
        request: Any,
        matrices: Mapping[int, Any],
        noises: Mapping[int, Any],
        *,
        stats_at: int = 0,
    ) -> Any:
        # the parties already run MPyC: the same protocol on this runtime's own connections
        from securevfl.runtime.secure_products import run_networked  # noqa: PLC0415

        return run_networked(self, request, dict(matrices), dict(noises), stats_at=stats_at)

    def close(self, *, graceful: bool = True) -> None:
        """Shut MPyC down with the peers (``graceful``), or, after a failure, just hang up:
        the cooperative shutdown would wait on (and decode from) the peer that failed us."""
        self._closing = True  # peers closing their sockets from here on is the normal end
        if graceful:
            try:
                self._run(self.mpc.shutdown(), "shutting down")
                return
            except (ProtocolError, RuntimeError):
                pass
        for party in self.mpc.parties:
            transport = getattr(party.protocol, "transport", None)
            if party.pid != self.index and transport is not None:
                transport.abort()
