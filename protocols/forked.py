"""Party processes forked from a warm server: Python's multiprocessing forkserver.

A party process started as ``python -m MODULE ...`` spends most of a small run importing (torch,
the accountant with scipy, MPyC: 5-10 CPU-s for a DP split-NN party). A launcher that starts
many groups (a benchmark, a test session) or several parties at once pays that once per party.
Here the standard library's forkserver pays it once: on the first start it spawns a fresh server
process (a new interpreter: nothing of the launcher's memory, no data, no keys) that imports
``preload`` and then forks one child per party on request. Each child is a separate OS process
with its own memory from then on; it gets its stdin, stdout and stderr as file descriptors
(sent over the server's Unix socket), its environment and argv, and runs the module as
``python -m`` would (``runpy``, ``__name__ == "__main__"``).

What differs from a fresh interpreter, and why it does not matter for the modules run here:
the child's parent is the server (``SECUREVFL_LAUNCHER_PID`` is set to it, so
``processes.die_with_parent`` watches the server, which exits when the launcher does); settings
read when an interpreter or a library starts (``PYTHON*`` flags, ``sys.path``, BLAS thread
counts) are the server's, which it took from the launcher's environment when it started.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import sys
import traceback
from collections.abc import Callable, Sequence
from multiprocessing import reduction
from typing import Any, TypeVar

PARENT_ENV = "SECUREVFL_LAUNCHER_PID"  # processes.die_with_parent watches this pid


class _Fd:
    """A file descriptor handed to the child (duplicated through the server's socket)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        return (_detach, (reduction.DupFd(self.fd),))


def _detach(dup: Any) -> int:
    return dup.detach()


def _child(module: str, argv: list[str], env: dict[str, str], fds: tuple[int, int, int]) -> None:
    """In the forked child: take the three descriptors as 0, 1, 2, the environment and argv,
    run ``module`` as ``__main__``, exit with its code (never returns)."""
    # the server hands every child the launcher's "alive" pipe (so children may fork siblings):
    # a party that kept it would keep the server from seeing its launcher die, and the server's
    # exit is what ends the party (die_with_parent); parties start no siblings, so close it
    server = multiprocessing.forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
    atexit._clear()  # the server's exit handlers are not this party's
    os.environ.clear()
    os.environ.update(env)
    os.environ[PARENT_ENV] = str(os.getppid())  # the server: it exits with the launcher
    sys.argv = [module, *argv]
    code = 1
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message"), as the interpreter does
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class ForkedProcess:
    """The calls the launcher makes on a party (``poll``, ``kill``, ``wait``, ``pid``,
    ``stdout``) on a forkserver child."""

    def __init__(self, proc: multiprocessing.process.BaseProcess, stdout: Any) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.stdout = stdout

    def poll(self) -> int | None:
        """The exit code (negative: the signal that ended it), or None while it runs."""
        return self._proc.exitcode

    def kill(self) -> None:
        self._proc.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        self._proc.join(timeout)
        return self._proc.exitcode


# variables read when an interpreter, the C library or a numeric library starts: a child whose
# environment differs from the server's in any of them is started as a fresh interpreter instead
_AT_START = ("PYTHON", "MALLOC_", "OPENBLAS_", "OMP_", "MKL_", "LD_", "GOMP_")
_server_env: dict[str, str] | None = None  # the launcher's start-time variables at server start


def _at_start(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_AT_START)}


def can_fork(cmd: Sequence[str], env: dict[str, str]) -> bool:
    """Whether ``cmd`` can be a forkserver child: it runs a module with this interpreter, and
    the server (started now if it is not yet) has the same start-time variables as ``env``."""
    if not (len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m"):
        return False
    server = _at_start(dict(os.environ)) if _server_env is None else _server_env
    return _at_start(env) == server  # a server not yet started starts with os.environ


def server_env() -> dict[str, str] | None:
    """The start-time variables the server started with (None: not started)."""
    return None if _server_env is None else dict(_server_env)


def start_server(preload: Sequence[str]) -> None:
    """Start the forkserver now (if it is not running), importing ``preload``: a process that
    will launch many party groups starts it while its environment is the usual one, so that a
    later launch under changed start-time variables gets a fresh interpreter, not a child of a
    server that started under them."""
    global _server_env
    if "mpyc.runtime" in preload:
        raise ValueError("mpyc.runtime configures itself from argv when imported: not preloaded")
    if _server_env is not None:
        return
    multiprocessing.set_forkserver_preload(list(preload))
    multiprocessing.forkserver.ensure_running()
    _server_env = _at_start(dict(os.environ))


def start(
    cmd: Sequence[str],
    fds: tuple[int, int, int],
    env: dict[str, str],
    preload: Sequence[str],
    stdout: Any = None,
) -> ForkedProcess:
    """Start ``cmd`` (``[python, "-m", MODULE, *args]``) as a child of the forkserver, whose
    first start imports ``preload``. ``fds``: the child's stdin, stdout and stderr."""
    start_server(preload)  # the first start's preload is the server's
    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(
        target=_child,
        args=(cmd[2], list(cmd[3:]), dict(env), tuple(_Fd(fd) for fd in fds)),
        name=f"party {cmd[2]}",
    )
    proc.start()
    return ForkedProcess(proc, stdout)


_T = TypeVar("_T")


def per_process(cache: dict[int, _T], make: Callable[[], _T]) -> _T:
    """``make()``'s value for this process, made once and kept in ``cache``: a forked child
    makes its own instead of using its parent's (a file descriptor, a keystream)."""
    pid = os.getpid()
    if pid not in cache:
        cache[pid] = make()
    return cache[pid]
