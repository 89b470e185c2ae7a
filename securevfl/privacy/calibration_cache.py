"""An on-disk cache for calibrations: a pure function of public parameters, saved as JSON.

A calibration (e.g. PBM-VFL's beta for a target epsilon) analyses a mechanism many times to
find one noise setting; its inputs are all public (epsilon, delta, sizes, epochs...). The cache
keeps its answer in ``$SECUREVFL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/securevfl`` or
``~/.cache/securevfl``; ``off`` disables it), one small JSON file per entry, named by the
SHA-256 of the inputs and of the code that computes them (``code_version``), so a change to the
accountant invalidates every entry. JSON only (never pickle), at most ``MAX_BYTES`` read.

Shipped entries: ``calibrations.json`` beside this module holds the entries of the settings the
built-in suites run (written by ``tools/ship_calibrations.py`` from a cache directory), so a fresh
machine does not search them again. A lookup that misses the user's cache consults it; its
entries are checked exactly like the user's (below), and an entry of older code simply misses
(its key names the code version).

A cache file is not trusted: :func:`load` returns only what parses, and the caller re-checks
the answer by one evaluation of the accountant (``pbm_calibration.calibrate_beta``), so a stale
or tampered entry can never yield a false epsilon; it is recomputed and overwritten instead.

A search that misses can take minutes (pbm-vfl with 20 parties); :func:`progress` says what is
being computed while it runs. It lives here, not in the calibrating modules: their source is
part of every entry's key, so editing them would void the shipped table.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ENV_VAR = "SECUREVFL_CACHE_DIR"
MAX_BYTES = 4096  # an entry is a few hundred bytes: anything larger is not ours


def cache_dir() -> Path | None:
    """The cache directory, or None when ``$SECUREVFL_CACHE_DIR`` is ``off``."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if raw.lower() == "off":
        return None
    if raw:
        return Path(raw).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "securevfl"


@functools.cache
def code_version(modules: tuple[str, ...]) -> str:
    """SHA-256 of the source of ``modules`` (importable names) and of dp_accounting's version:
    the code a cached result depends on."""
    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        h.update(name.encode() + b"\0")
        h.update(Path(origin).read_bytes() if origin else b"?")
    try:
        h.update(importlib.metadata.version("dp-accounting").encode())
    except importlib.metadata.PackageNotFoundError:
        h.update(b"dp-accounting ?")
    return h.hexdigest()


def entry_key(kind: str, inputs: dict[str, Any], modules: Iterable[str]) -> str:
    """The entry's name: SHA-256 of ``kind``, the canonical JSON of ``inputs`` (floats by repr,
    exact) and the code version."""
    doc = json.dumps(
        {"kind": kind, "inputs": inputs, "code": code_version(tuple(modules))},
        sort_keys=True,
        allow_nan=False,
    )
    return hashlib.sha256(doc.encode()).hexdigest()


def _path(kind: str, key: str) -> Path | None:
    root = cache_dir()
    return None if root is None else root / kind / f"{key}.json"


SHIPPED = Path(__file__).with_name("calibrations.json")
SHIPPED_MAX_BYTES = 1 << 20  # a few thousand entries at most


SHIPPED_ENV = "SECUREVFL_SHIPPED_CALIBRATIONS"  # "off": ignore the table (regenerating it)


@functools.cache
def _shipped() -> dict[str, dict[str, Any]]:
    """kind -> key -> entry of the shipped table ({} if absent, malformed or switched off with
    ``$SECUREVFL_SHIPPED_CALIBRATIONS=off``: only time is lost)."""
    if os.environ.get(SHIPPED_ENV, "").strip().lower() == "off":
        return {}
    try:
        with SHIPPED.open("rb") as f:
            raw = f.read(SHIPPED_MAX_BYTES + 1)
        if len(raw) > SHIPPED_MAX_BYTES:
            return {}
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    kinds = doc.get("entries") if isinstance(doc, dict) else None
    return {k: v for k, v in (kinds or {}).items() if isinstance(v, dict)}


def load(kind: str, key: str) -> dict[str, Any] | None:
    """The entry's JSON object if it exists (the user's cache, else the shipped table), is at
    most MAX_BYTES, parses and names ``key``; else None (a miss). Never raises on a bad file:
    the caller recomputes. A disabled cache (``off``) consults neither."""
    path = _path(kind, key)
    if path is None:
        return None
    doc = _load_file(path, key)
    if doc is None:
        shipped = _shipped().get(kind, {}).get(key)
        if isinstance(shipped, dict) and shipped.get("key") == key:
            return dict(shipped)
    return doc


def _load_file(path: Path, key: str) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    return doc


def _no_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} in a cache entry")


def store(kind: str, key: str, value: dict[str, Any]) -> None:
    """Write the entry atomically (temporary file, then rename); a cache that cannot be written
    (read-only home, full disk) is skipped: it only saves time."""
    path = _path(kind, key)
    if path is None:
        return
    for v in value.values():
        if isinstance(v, float) and not math.isfinite(v):
            return
    doc = json.dumps({**value, "key": key}, sort_keys=True, allow_nan=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(doc)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return


PROGRESS_EVERY = 15.0  # seconds between two progress lines of a long calibration


@contextlib.contextmanager
def progress(
    what: str, *, every: float = PROGRESS_EVERY, write: Callable[[str], None] | None = None
) -> Iterator[None]:
    """While the body runs: a line every ``every`` seconds naming ``what``, the time so far and
    where the answer will be kept, and a last line when it is done. A body that returns sooner
    (a cache hit) prints nothing. ``write``: where the lines go (default: stderr where it is a
    terminal, as the CLI's progress bars; nothing else, so logs and one-line errors stay so)."""
    if write is None:
        if not sys.stderr.isatty():
            yield
            return
        write = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    root = cache_dir()
    kept = f"kept in {root} for the next run" if root is not None else "the cache is off"
    done, t0, beats = threading.Event(), time.monotonic(), []

    def beat() -> None:
        while not done.wait(every):
            beats.append(1)
            write(f"securevfl: {what}: {time.monotonic() - t0:.0f} s so far (once: {kept})")

    thread = threading.Thread(target=beat, name="calibration-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if beats:
            write(f"securevfl: {what}: done in {time.monotonic() - t0:.0f} s")
