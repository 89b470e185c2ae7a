"""results.jsonl: one runner at a time, whole-line appends, a torn last line tolerated.

A bench output directory is locked by the runner that writes to it (``flock`` on ``.lock``,
released by the kernel when the process dies, so a killed runner never leaves a stale lock). A
record is appended with one ``write`` of one full line and flushed to disk, so a crash can leave
at most a torn *last* line: readers skip it, and a resuming runner cuts it off before appending
(else the next record would be glued onto it). Any other unreadable line is corruption and is
reported, never skipped silently.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO, Any

from securevfl.errors import ConfigError, DataError

LOCK_NAME = ".lock"


class OutputLock:
    """Exclusive use of a bench output directory; a second runner is refused with one line."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._f: IO[str] | None = None

    def __enter__(self) -> OutputLock:
        path = self.out / LOCK_NAME
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise ConfigError(
                f"--out {str(self.out)!r} is in use by another bench runner (pid {holder}): "
                "one runner per output directory"
            ) from None
        f.truncate(0)
        f.write(str(os.getpid()))
        f.flush()
        self._f = f
        return self

    def __exit__(self, *exc: object) -> None:
        if self._f is not None:
            self._f.close()  # closing releases the flock
            self._f = None


def read_results(path: Path) -> list[dict[str, Any]]:
    """All records of a results.jsonl (missing file: none); a torn last line is skipped."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except (ValueError, UnicodeDecodeError):
            if i == len(lines):  # no newline after it: a write cut short by a crash
                continue
            raise DataError(
                f"{path} line {i} must be one JSON record, got {line[:60]!r}: the file is "
                "corrupt (move it away to start over)"
            ) from None
    return out


def cut_torn_tail(path: Path) -> None:
    """Drop an unterminated last line (a crash mid-write) so appends start on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line with a single write, flushed to disk."""
    line = (json.dumps(record, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
