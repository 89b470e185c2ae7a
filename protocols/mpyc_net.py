"""Connecting MPyC parties safely, carrying raw bytes, and agreeing on the run.

MPyC 0.11's own ``Runtime.start`` listens on every interface (``create_server(port=...)``),
accepts any client that sends a 2-byte party id (with ``--ssl`` it checks the certificate chain,
not that the certificate belongs to the party id claimed), and reads its certificates from
``./.config``. :func:`secure_start` replaces it:

- it listens only on the host given for this party (``127.0.0.1`` stays on loopback);
- with a certificate directory (``mpyc_ca.crt``, ``party_<i>.crt``/``.key``, MPyC's layout and
  names) every connection is TLS, both sides present certificates, and a client's certificate
  must name the party id it claims (``CN = MPyC party <i>``, as the server's is checked by name);
- a client must claim a lower party id than ours (only those connect to us), once.

:func:`exchange` moves pre-serialized ``bytes`` on MPyC's program-counter-labelled messages
(no pickling on either side). :func:`handshake` is the first round of every run: each party
sends ``MAGIC | digest of its run spec | nonce``; then each sends every peer an HMAC over all
hellos (keyed by the run's secret where a launcher handed one out). A peer with another run spec
is named; a peer that saw other parties (a foreign run on the same ports) or does not hold the
key fails the second round. Both raise :class:`~protocols.wire.WireError`.

What a peer may make this party hold (frames it sent that no step has asked for yet, plus the
frame being received) is bounded, per peer and per run (:func:`held_budgets`):

- until the handshake has authenticated the peers (:func:`authenticated`), a peer may make it
  hold the handshake's own bytes (:data:`PREAUTH_BYTES`) plus one socket read; beyond that this
  party stops reading that connection (TCP backpressure: the sender's writes stall, nothing is
  buffered here) until the handshake consumes what is held. A local process without the run's
  certificate or key therefore cannot make a party grow before it is refused;
- after it, :func:`held_budgets` of the frame limit in force: a peer that makes this party hold
  more is refused, named, and every wait stops (a flood of frames with labels no step uses).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import ssl
import struct
import time
from asyncio import Future
from collections.abc import Mapping, Sequence
from typing import Any

from protocols.wire import DEFAULT_MAX_FRAME, WireError

MAGIC = b"SVFL\x01"
BIG_FRAME = 1 << 20  # frames from this size on are collected as chunks and joined once
DIGEST_LEN = 32
NONCE_LEN = 16
HELLO_LEN = len(MAGIC) + DIGEST_LEN + NONCE_LEN
MAX_PARTS_BYTES = 1 << 16  # the named parts of a digest: option names and short hashes
FRAME_OVERHEAD = 12 + 128  # MPyC's frame header, and the dict entry and bytes object holding it
PEER_FRAMES = 8  # frames of the limit's size a peer may have waiting, after the handshake...
PEER_FLOOR = 32 << 20  # ... at least this many bytes (small runs), ...
PEER_CAP = 256 << 20  # ... at most this many unless two frames need more
RUN_CAP = 384 << 20  # all peers together, unless two frames need more


def cert_paths(cert_dir: str, pid: int) -> tuple[str, str, str]:
    """(CA certificate, party certificate, party key) in MPyC's ``.config`` layout."""
    return (
        os.path.join(cert_dir, "mpyc_ca.crt"),
        os.path.join(cert_dir, f"party_{pid}.crt"),
        os.path.join(cert_dir, f"party_{pid}.key"),
    )


def tls_context(cert_dir: str, pid: int, *, server: bool) -> ssl.SSLContext:
    """Mutual-TLS context for party ``pid`` (peers must present a certificate of our CA)."""
    ca, crt, key = cert_paths(cert_dir, pid)
    for path in (ca, crt, key):
        if not os.path.isfile(path):
            raise WireError(f"TLS needs {path} (make a set with `securevfl certs`), not found")
    purpose = ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH
    ctx = ssl.create_default_context(purpose, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(crt, keyfile=key)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def party_name(pid: int) -> str:
    """The certificate name of party ``pid`` (MPyC's convention)."""
    return f"MPyC party {pid}"


def _exchanger_class():
    from mpyc.asyncoro import MessageExchanger

    class CheckedExchanger(MessageExchanger):
        """MPyC's connection protocol, refusing clients that claim an id they may not have.

        A large frame (a block of shares, tens of MB) is collected as a list of the chunks the
        socket delivers and joined once: MPyC appends every chunk to one growing ``bytearray``
        (copied again at each reallocation) and copies the payload out at the end."""

        __slots__ = ("_big_pc", "_big_need", "_big_parts", "_big_have", "_paused")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.buffers = _HeldFrames()  # MPyC's frames by label, counting the bytes held
            self._big_pc: int | None = None  # the frame being collected, its missing bytes
            self._big_need = 0
            self._big_parts: list[bytes] = []
            self._big_have = 0
            self._paused = False

        def held(self) -> int:
            """Bytes from this peer held here: frames no step asked for yet, and partial ones."""
            return self.buffers.nbytes + len(self.bytes) + self._big_have

        def receive(self, pc: int) -> Any:
            got = super().receive(pc)  # a step takes a held frame: read again if we had stopped
            if self._paused and self.transport is not None and not self.transport.is_closing():
                if self.held() <= PREAUTH_BYTES:
                    self._paused = False
                    self.transport.resume_reading()
            return got

        def _over_budget(self, incoming: int) -> bool:
            """Before ``incoming`` more bytes are taken in: before the handshake, stop reading
            once the handshake's bytes are held; after it, refuse a peer over its budget."""
            rt, held = self.runtime, self.held() + incoming
            rt._securevfl_held_peak = max(getattr(rt, "_securevfl_held_peak", 0), held)
            if not getattr(rt, "_securevfl_authenticated", False):
                self._pause_if_over(held)  # this chunk is taken; the next waits
                return False
            peer_budget, run_budget = held_budgets(max_frame(rt), len(rt.parties))
            total = incoming + sum(
                p.protocol.held()
                for p in rt.parties
                if p.pid != rt.pid and hasattr(getattr(p, "protocol", None), "held")
            )
            if held <= peer_budget and total <= run_budget:
                return False
            over = (
                f"{held} bytes, over the {peer_budget} bytes held per peer"
                if held > peer_budget
                else f"{held} bytes while all peers' frames came to {total}, over the "
                f"{run_budget} bytes held per run"
            )
            self._refuse_peer(
                f"party {self.peer_pid} sent frames no step has asked for yet: {over} (budgets "
                "derived from the frame limit this run allows)"
            )
            return True

        def _pause_if_over(self, held: int) -> None:
            """Before the handshake: stop reading a peer that holds more than its bytes."""
            rt = self.runtime
            rt._securevfl_held_peak = max(getattr(rt, "_securevfl_held_peak", 0), held)
            if held > PREAUTH_BYTES and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()
                self.runtime._securevfl_refused.append(
                    f"party {self.peer_pid} sent {held} bytes before the handshake "
                    f"authenticated it (the handshake needs at most {PREAUTH_BYTES}): "
                    "stopped reading it"
                )

        def _refuse_peer(self, why: str) -> None:
            self.runtime._securevfl_refused.append(why)
            hook = getattr(self.runtime, "_securevfl_on_violation", None)
            if hook is not None:
                hook(why)
            self.bytes = bytearray()
            self.buffers.clear()
            self._big_parts, self._big_have, self._big_pc = [], 0, None
            self.transport.abort()

        def data_received(self, data: bytes) -> None:
            if self.peer_pid is not None:  # when each peer was last heard from (names a silent one)
                self.runtime._securevfl_last_seen[self.peer_pid] = time.monotonic()
                if self._over_budget(len(data)):
                    return
                if self._big_pc is not None:
                    data = self._collect(data)
                    if not data:
                        return
                if self._oversize(data):
                    return
            if self.peer_pid is None and len(self.bytes) + len(data) >= 2:
                head = bytes(self.bytes[:2]) + bytes(data[: max(0, 2 - len(self.bytes))])
                why = self._refuse(int.from_bytes(head[:2], "little"))
                if why:
                    self.runtime._securevfl_refused.append(why)
                    self.transport.close()
                    return
            super().data_received(data)
            if self.peer_pid is not None and not getattr(
                self.runtime, "_securevfl_authenticated", False
            ):  # the first chunk of a client (its id came with it) was not counted before
                self._pause_if_over(self.held())
            if self.peer_pid is not None and self.transport is not None:
                if self._oversize(b""):  # a header left in MPyC's buffer (the first chunk)
                    return
                self._start_big()

        def _start_big(self) -> None:
            """Take over a large frame whose header (already checked) is in MPyC's buffer."""
            buf = self.bytes
            if len(buf) < 12:
                return
            pc, size = struct.unpack_from("<qI", buf)
            if size < BIG_FRAME or len(buf) >= 12 + size:
                return
            self._big_pc, self._big_need = pc, size - (len(buf) - 12)
            self._big_parts = [bytes(buf[12:])]
            self._big_have = len(self._big_parts[0])
            self.bytes = bytearray()

        def _collect(self, data: bytes) -> bytes:
            """Add ``data`` to the large frame; once complete, deliver it as MPyC would and
            return what follows it (the start of the next frames)."""
            if len(data) < self._big_need:
                self._big_parts.append(data)
                self._big_need -= len(data)
                self._big_have += len(data)
                return b""
            k = self._big_need
            self._big_parts.append(data[:k])
            payload, pc = b"".join(self._big_parts), self._big_pc
            self._big_pc, self._big_need, self._big_parts, self._big_have = None, 0, [], 0
            if pc in self.buffers:  # MPyC's delivery: a waiting future, or kept for later
                self.buffers.pop(pc).set_result(payload)
            else:
                self.buffers[pc] = payload
            return data[k:]

        def send(self, pc: int, payload: bytes | memoryview) -> None:
            """MPyC's frame (pc, payload size, payload) as two writes: MPyC's own ``send``
            copies every payload into one ``struct.pack``-ed string first (a share block of
            tens of MB); the bytes on the wire are the same."""
            if isinstance(payload, memoryview) and payload.format != "B":
                payload = payload.cast("B")  # its length in bytes
            size = len(payload)
            self.transport.write(struct.pack("<qI", pc, size))
            self.transport.write(payload)
            self.nbytes_sent += 12 + size

        def _oversize(self, data: bytes) -> bool:
            """Walk the frame headers in MPyC's partial buffer + ``data`` (frames start at its
            offset 0): a frame announcing more than the limit aborts before it is buffered."""
            limit = max_frame(self.runtime)
            have, pos = len(self.bytes) + len(data), 0
            while have - pos >= 12:
                head = _slice2(self.bytes, data, pos, 12)
                size = int.from_bytes(head[8:12], "little")
                if size > limit:
                    self._refuse_peer(
                        f"party {self.peer_pid} sent a frame of {size} bytes, over the limit of "
                        f"{limit} bytes per frame this run allows (SECUREVFL_MAX_FRAME_MB "
                        "overrides it)"
                    )
                    return True
                pos += 12 + size
            return False

        def _refuse(self, pid: int) -> str | None:
            rt = self.runtime
            if not 0 <= pid < rt.pid:
                return (
                    f"a client claimed party id {pid} (party {rt.pid} accepts only 0..{rt.pid - 1})"
                )
            if rt.parties[pid].protocol is not None:
                return f"a second client claimed party id {pid}"
            cert = self.transport.get_extra_info("peercert")
            if self.transport.get_extra_info("sslcontext") is not None:
                names = {
                    v
                    for rdn in (cert or {}).get("subject", ())
                    for k, v in rdn
                    if k == "commonName"
                }
                if party_name(pid) not in names:
                    return f"a client claimed party id {pid} with a certificate for {sorted(names)}"
            return None

        def connection_lost(self, exc: Exception | None) -> None:
            if self.peer_pid is None:
                return  # refused before it was a party: nothing to unregister
            # A peer that dies (even SIGKILLed: the kernel sends FIN) closes its sockets "cleanly";
            # MPyC only unregisters it and lets the survivors wait for its messages until their
            # timeout. Tell the runtime at once instead (``on_peer_lost``), and never raise here:
            # an exception in a transport callback only reaches asyncio's logger.
            hook = getattr(self.runtime, "_securevfl_on_lost", None)
            if hook is not None:
                hook(self.peer_pid, exc)
            try:
                super().connection_lost(None)
            except asyncio.InvalidStateError:
                pass  # the last peer left mid-run: MPyC re-resolves its finished start future

    return CheckedExchanger


class _HeldFrames(dict):
    """MPyC's ``buffers`` (label -> a received frame, or a Future a step waits on) that keeps
    the bytes of the frames it holds in ``nbytes``, each charged :data:`FRAME_OVERHEAD` more."""

    __slots__ = ("nbytes",)

    def __init__(self) -> None:
        super().__init__()
        self.nbytes = 0

    @staticmethod
    def _cost(v: Any) -> int:
        return len(v) + FRAME_OVERHEAD if isinstance(v, bytes | bytearray) else 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.nbytes += self._cost(value) - self._cost(dict.get(self, key))  # a repeated label
        super().__setitem__(key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        value = super().pop(key, *default)
        self.nbytes -= self._cost(value)
        return value

    def clear(self) -> None:
        super().clear()
        self.nbytes = 0


# the handshake's frames from one peer: the hello, the named parts (only on a mismatch) and a run
# check, each with its header
PREAUTH_BYTES = 3 * FRAME_OVERHEAD + HELLO_LEN + MAX_PARTS_BYTES + DIGEST_LEN


def held_budgets(frame_limit: int, n_parties: int) -> tuple[int, int]:
    """(bytes one peer, bytes all peers together) may make this party hold after the handshake:
    :data:`PEER_FRAMES` frames of the limit, between :data:`PEER_FLOOR` and :data:`PEER_CAP`
    per peer and :data:`RUN_CAP` per run, never below two frames (one waiting, one arriving)."""
    two = 2 * (frame_limit + FRAME_OVERHEAD)
    peer = max(two, min(PEER_FRAMES * frame_limit, PEER_CAP), PEER_FLOOR)
    run = max(two, min(peer * max(1, n_parties - 1), RUN_CAP))
    return peer, run


def authenticated(mpc: Any) -> None:
    """The handshake has authenticated every peer: from now on the post-handshake budgets apply
    and connections paused for holding the handshake's bytes are read again."""
    mpc._securevfl_authenticated = True
    for party in mpc.parties:
        proto = party.protocol
        if getattr(proto, "_paused", False) and not proto.transport.is_closing():
            proto._paused = False
            proto.transport.resume_reading()


async def secure_start(mpc: Any, *, cert_dir: str | None = None) -> None:
    """Connect to every party (replaces ``mpc.start()``); TLS when ``cert_dir`` is given."""
    m, me, loop = len(mpc.parties), mpc.pid, mpc._loop
    mpc._securevfl_refused = []
    mpc._securevfl_last_seen = {}
    if m == 1:
        mpc.start_time = time.time()
        return
    exchanger = _exchanger_class()
    for peer in mpc.parties:
        peer.protocol = Future(loop=loop) if peer.pid == me else None
    server = None
    if me:
        ctx = tls_context(cert_dir, me, server=True) if cert_dir else None
        host = mpc.parties[me].host
        server = await loop.create_server(
            lambda: exchanger(mpc), host=host, port=mpc.parties[me].port, ssl=ctx
        )
    try:
        for peer in mpc.parties[me + 1 :]:
            ctx = tls_context(cert_dir, me, server=False) if cert_dir else None
            while True:
                try:
                    await loop.create_connection(
                        lambda peer=peer: exchanger(mpc, peer.pid),
                        peer.host,
                        peer.port,
                        ssl=ctx,
                        server_hostname=party_name(peer.pid) if ctx else None,
                    )
                    break
                except ssl.SSLCertVerificationError as exc:
                    raise WireError(
                        f"party {peer.pid} at {peer.host}:{peer.port} failed TLS verification: "
                        f"{exc.verify_message}"
                    ) from None
                except ssl.SSLError as exc:
                    # the peer listens but the TLS handshake failed (e.g. it refused our
                    # certificate first): retrying cannot help
                    raise WireError(
                        f"party {peer.pid} at {peer.host}:{peer.port} failed TLS verification: "
                        f"handshake refused ({exc.reason or exc})"
                    ) from None
                except OSError:
                    await asyncio.sleep(0.1)  # not listening yet: retry until the caller's timeout
        await mpc.parties[me].protocol
    finally:
        if server is not None:
            server.close()
    mpc.start_time = time.time()


_EXCHANGE: Any = None


def exchange(mpc: Any, data: bytes | None, senders: Sequence[int], receivers: Sequence[int]):
    """Send ``data`` (this party's bytes, if it is a sender) to ``receivers``; every party calls
    this in lockstep. Returns an awaitable of the list of bytes from ``senders`` at a receiver
    (``[]`` elsewhere). Nothing is pickled."""
    global _EXCHANGE
    if _EXCHANGE is None:
        from mpyc.asyncoro import mpc_coro

        async def _exchange(mpc, data, senders, receivers) -> Future:
            me = mpc.pid
            if me in senders:
                for r in receivers:
                    if r != me:
                        mpc._send_message(r, data)
            if me not in receivers:
                return []
            got = [data if s == me else mpc._receive_message(s) for s in senders]
            return [bytes(b) for b in await mpc.gather(got)]

        _EXCHANGE = mpc_coro(_exchange)
    return _EXCHANGE(mpc, data, list(senders), list(receivers))


def _mac(key: bytes, src: int, dst: int, hellos: list[bytes]) -> bytes:
    msg = b"securevfl-run|%d>%d|" % (src, dst) + b"".join(hellos)
    return hmac.new(key or b"securevfl-no-key", msg, hashlib.sha256).digest()


def _pack_parts(parts: Mapping[str, bytes] | None) -> bytes:
    """``name=hex`` lines (ASCII), or b"" when the caller names no parts."""
    lines = [f"{name}={value.hex()}" for name, value in sorted((parts or {}).items())]
    return "\n".join(lines).encode("ascii", "replace")[:MAX_PARTS_BYTES]


def _unpack_parts(blob: bytes) -> dict[str, str]:
    """A peer's parts; anything that is not ``name=hex`` lines yields what parses (never code)."""
    out: dict[str, str] = {}
    for line in blob[:MAX_PARTS_BYTES].decode("ascii", "replace").splitlines():
        name, sep, value = line.partition("=")
        if sep:
            out[name] = value
    return out


def _differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


async def handshake(
    mpc: Any, digest: bytes, *, key: bytes = b"", parts: Mapping[str, bytes] | None = None
) -> None:
    """Agree on the run with every peer, or raise :class:`WireError` naming who differs.

    ``parts``: the digest's named components (e.g. one short hash per run option). They are
    exchanged only when the digests differ, so that the error names what differs (the option)
    rather than two hashes; they reveal nothing the parties would not be told anyway."""
    if len(digest) != DIGEST_LEN:
        raise ValueError(f"digest must be {DIGEST_LEN} bytes, got {len(digest)}")
    m, me = len(mpc.parties), mpc.pid
    everyone = list(range(m))
    hello = MAGIC + digest + os.urandom(NONCE_LEN)
    hellos = await exchange(mpc, hello, everyone, everyone)
    for j, h in enumerate(hellos):
        if len(h) != HELLO_LEN or not h.startswith(MAGIC):
            raise WireError(
                f"party {j} sent a malformed first message ({len(h)} bytes, not a "
                f"securevfl {HELLO_LEN}-byte hello): not a party of this run"
            )
    digests = [h[len(MAGIC) : len(MAGIC) + DIGEST_LEN] for h in hellos]
    if len(set(digests)) > 1:
        # everyone sees every digest, so every party prints the same verdict
        counts = {d: digests.count(d) for d in digests}
        top = max(counts.values())
        majority = [d for d in counts if counts[d] == top]
        ref = digests[0] if len(majority) > 1 or digests[0] in majority else majority[0]
        odd = [j for j in everyone if digests[j] != ref]
        same = [j for j in everyone if digests[j] == ref]
        # every party sees the mismatch, so every party takes this extra round in lockstep
        blobs = await exchange(mpc, _pack_parts(parts), everyone, everyone)
        names = _differing(_unpack_parts(blobs[odd[0]]), _unpack_parts(blobs[same[0]]))
        what = (
            f"in {', '.join(names)}"
            if names
            else f"(hash {digests[odd[0]].hex()[:12]} vs {ref.hex()[:12]})"
        )
        raise WireError(
            f"run spec of {_parties(odd)} differs from that of {_parties(same)} {what}: start "
            "every party with the same run arguments and --run-id"
        )
    macs = await _exchange_macs(mpc, key, hellos)
    for j, got in macs.items():
        if not hmac.compare_digest(got, _mac(key, j, me, hellos)):
            raise WireError(
                f"party {j} failed the run check (it saw other parties, e.g. a foreign run "
                "on the same ports, or does not hold this run's key)"
            )
    authenticated(mpc)  # peers may now be held up to the run's budgets


async def _exchange_macs(mpc: Any, key: bytes, hellos: list[bytes]) -> dict[int, bytes]:
    """Second round: party i sends peer j ``HMAC(key, i>j | all hellos)``; one message each."""
    m, me = len(mpc.parties), mpc.pid
    pending = []
    for src in range(m):  # all messages issued first (lockstep labels), so they travel at once
        for dst in range(m):
            if src != dst:
                data = _mac(key, src, dst, hellos) if me == src else None
                pending.append((src, dst, exchange(mpc, data, [src], [dst])))
    out: dict[int, bytes] = {}
    for src, dst, fut in pending:
        got = await fut
        if me == dst:
            if len(got[0]) != DIGEST_LEN:
                raise WireError(f"party {src} sent a malformed run check ({len(got[0])} bytes)")
            out[src] = got[0]
    return out


def _slice2(a: bytes | bytearray, b: bytes, pos: int, n: int) -> bytes:
    """Bytes ``pos .. pos + n`` of ``a + b``, without concatenating them."""
    if pos >= len(a):
        return bytes(b[pos - len(a) : pos - len(a) + n])
    return bytes(a[pos : pos + n]) + bytes(b[: max(0, pos + n - len(a))])


def max_frame(rt: Any) -> int:
    """The largest frame this party accepts (:func:`protocols.wire.guard_mpyc_unpickling` sets
    it)."""
    return getattr(rt, "_securevfl_max_frame", DEFAULT_MAX_FRAME)


def _parties(ids: list[int]) -> str:
    return ("party " if len(ids) == 1 else "parties ") + ", ".join(map(str, ids))
