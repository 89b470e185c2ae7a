"""The one launcher of local party processes: free loopback ports, starting a group of
processes (inputs over stdin, stderr in unnamed temporary files, stdout collected), and waiting
for the group.

Used by every launcher that starts one OS process per party (MPyC's secure products, the
networked runtime's local runs in securevfl): the first party that fails, or the deadline, stops
the whole group, so no process is left waiting for a dead peer.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from protocols import forked


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that are free right now (all sockets held until all are found)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


PARENT_ENV = forked.PARENT_ENV  # the pid of the process that started the party


def die_with_parent() -> None:
    """Called first thing in a party process that :func:`spawn` started: get SIGKILL when the
    launcher dies (Linux prctl), so a killed launcher leaves no party running with its inputs.

    Done in the child, not in a ``preexec_fn`` (unsafe in a launcher with threads); a launcher
    that died before this call is caught by comparing the parent's pid.
    """
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the parties' own timeouts still end them
    if os.getppid() != int(parent):
        os._exit(3)  # the launcher is already gone


def spawn(
    cmd: Sequence[str],
    *,
    stdin_data: bytes,
    stderr: IO[str],
    stdout: int | IO[bytes] = subprocess.DEVNULL,
    env: dict[str, str] | None = None,
    preload: Sequence[str] = (),
) -> Any:
    """Start a party process and hand it ``stdin_data`` over a pipe (never a file on disk).

    The data is written by a thread, so a large input never blocks the launcher, and a child
    that dies before reading it is reported by :func:`wait_all`, not by a broken pipe here.
    With ``preload`` (modules), a ``python -m MODULE`` command is forked from the launcher's
    warm server (:mod:`protocols.forked`), which imports them once; returned: an object with
    Popen's ``poll``, ``kill``, ``wait``, ``pid`` and ``stdout``.
    """
    env = dict(os.environ if env is None else env, **{PARENT_ENV: str(os.getpid())})
    if preload and forked.can_fork(cmd, env):
        return _spawn_forked(cmd, stdin_data, stderr, stdout, env, preload)
    proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, env=env)
    _feed(proc.stdin, stdin_data)
    return proc


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write ``data`` to a child's stdin from a thread, then close it."""

    def feed() -> None:
        try:
            pipe.write(data)
            pipe.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    threading.Thread(target=feed, daemon=True).start()


def _spawn_forked(
    cmd: Sequence[str],
    stdin_data: bytes,
    stderr: IO[str],
    stdout: int | IO[bytes],
    env: dict[str, str],
    preload: Sequence[str],
) -> forked.ForkedProcess:
    """:func:`spawn` through the forkserver: the child's three descriptors made here."""
    in_r, in_w = os.pipe()
    out_r = None
    if stdout == subprocess.PIPE:
        out_r, out_w = os.pipe()
    elif stdout == subprocess.DEVNULL:
        out_w = os.open(os.devnull, os.O_WRONLY)
    else:
        out_w = stdout.fileno()
    try:
        proc = forked.start(
            cmd,
            (in_r, out_w, stderr.fileno()),
            env,
            preload,
            stdout=None if out_r is None else os.fdopen(out_r, "rb"),
        )
    finally:
        os.close(in_r)  # the child has its own copies now
        if stdout in (subprocess.PIPE, subprocess.DEVNULL):
            os.close(out_w)
    _feed(os.fdopen(in_w, "wb"), stdin_data)
    return proc


def wait_all(
    procs: list[tuple[subprocess.Popen, IO[str]]],
    timeout: float,
    *,
    on_failure: Callable[[int, str], Exception],
    on_timeout: Callable[[], Exception],
    poll_s: float = 0.01,
) -> None:
    """Wait for every process (each with its stderr file); kill the rest on failure or deadline.

    ``on_failure(i, last_stderr_line)`` and ``on_timeout()`` build the exception raised.
    """
    deadline = time.monotonic() + timeout
    try:
        while True:
            codes = [p.poll() for p, _ in procs]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                i = bad[0]
                procs[i][1].seek(0)
                lines = [ln for ln in procs[i][1].read().splitlines() if ln.strip()]
                raise on_failure(i, lines[-1] if lines else f"exit code {codes[i]}")
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > deadline:
                raise on_timeout()
            time.sleep(poll_s)
    finally:
        for p, err in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()


class PartyProcess:
    """A started party: its process, its stderr (an unnamed temporary file: nothing is left on
    disk whatever happens) and, if captured, a thread collecting its stdout."""

    def __init__(
        self,
        cmd: Sequence[str],
        stdin_data: bytes,
        *,
        env: dict[str, str] | None,
        capture: bool,
        preload: Sequence[str] = (),
    ) -> None:
        self.err: Any = tempfile.TemporaryFile("w+")
        out = subprocess.PIPE if capture else subprocess.DEVNULL
        self.proc = spawn(
            cmd, stdin_data=stdin_data, stderr=self.err, stdout=out, env=env, preload=preload
        )
        self._out: list[bytes] = []
        self._reader = None
        if capture:
            self._reader = threading.Thread(
                target=lambda: self._out.append(self.proc.stdout.read())
            )
            self._reader.daemon = True
            self._reader.start()

    def stdout(self) -> bytes:
        """What the process wrote on stdout (after it exited)."""
        if self._reader is not None:
            self._reader.join(10.0)
        return self._out[0] if self._out else b""


def wait_group(
    parties: Sequence[PartyProcess],
    timeout: float,
    *,
    on_failure: Callable[[int, str], Exception],
    on_timeout: Callable[[], Exception],
    poll_s: float = 0.01,
) -> list[bytes]:
    """:func:`wait_all` for started parties; returns each one's stdout."""
    wait_all(
        [(p.proc, p.err) for p in parties],
        timeout,
        on_failure=on_failure,
        on_timeout=on_timeout,
        poll_s=poll_s,
    )
    return [p.stdout() for p in parties]


def run_group(
    cmds: Sequence[Sequence[str]],
    stdins: Sequence[bytes],
    timeout: float,
    *,
    on_failure: Callable[[int, str], Exception],
    on_timeout: Callable[[], Exception],
    env: dict[str, str] | None = None,
    capture: bool = True,
    poll_s: float = 0.01,
    preload: Sequence[str] = (),
) -> list[bytes]:
    """Start one process per command (its stdin data over a pipe), wait for all of them (the
    first failure or the deadline stops the rest), return each one's stdout. ``preload``: see
    :func:`spawn` (the parties forked from a warm server that imported these modules once)."""
    parties = [
        PartyProcess(c, d, env=env, capture=capture, preload=preload) for c, d in zip(cmds, stdins)
    ]
    return wait_group(parties, timeout, on_failure=on_failure, on_timeout=on_timeout, poll_s=poll_s)
