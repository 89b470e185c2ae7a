"""A directory a test module's costly fixture fills once per test session.

Under pytest-xdist (``make test``: three workers, ``--dist worksteal``) a module-scoped fixture
runs once in every worker that takes one of the module's tests: the default report's suite ran
three times in one session. Here the first worker builds the directory under the workers'
shared temporary root while holding a lock, and the others wait for it and read the result.
Without xdist it is an ordinary fresh directory.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

WAIT_S = 900.0  # the longest a worker waits for another's build


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``name``'s directory after ``build(directory)`` has run once in this session."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = factory.mktemp(name)
        build(out)
        return out
    out = factory.getbasetemp().parent / name  # one per session, shared by its workers
    with open(f"{out}.lock", "w") as lock:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    msg = f"another worker's build of {name} took over {WAIT_S} s"
                    raise TimeoutError(msg) from None
                time.sleep(0.2)
        try:
            if not (out / ".built").exists():  # a failed build leaves no mark: built afresh
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                build(out)
                (out / ".built").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out
