"""Peer environments on demand: a virtual environment per peer library (bench/peers/envs.toml),
made with the project's interpreter and pip the first time a perf job needs it, then reused while
its requirements match the stamp written after a complete install. Nothing here runs in
``make test`` or ``make setup``; the peers' pins (e.g. numpy < 2) never touch the project's venv.

Where: ``$SECUREVFL_PEER_DIR/<name>``, else ``~/.cache/securevfl/peers/<name>``. An existing
interpreter can stand in: ``SECUREVFL_PEER_PYTHON_<NAME>=/path/to/python`` (NAME upper-cased,
``-`` as ``_``) is used as it is, nothing installed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.perf_jobs import PeerEnv
from securevfl.errors import ConfigError, SecureVFLError

STAMP = ".securevfl-peer.json"
INSTALL_TIMEOUT_S = 3600
# pip's words when the index cannot be reached or has no such release
_UNREACHABLE = (
    "Could not find a version that satisfies",
    "No matching distribution found",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ConnectionError",
    "ReadTimeoutError",
    "ProxyError",
)


class PeerEnvError(SecureVFLError, RuntimeError):
    """A peer environment could not be made or does not work (one line; the CLI exits 3)."""


@dataclass(frozen=True)
class PeerPython:
    """A ready peer interpreter and what it is."""

    python: str
    version: str  # e.g. 'spu 0.9.5'
    how: str  # 'installed in DIR', 'reused DIR' or 'SECUREVFL_PEER_PYTHON_SPU'


def override_var(name: str) -> str:
    return "SECUREVFL_PEER_PYTHON_" + name.upper().replace("-", "_")


def peer_root() -> Path:
    given = os.environ.get("SECUREVFL_PEER_DIR")
    return Path(given).expanduser() if given else Path.home() / ".cache/securevfl/peers"


def _stamp(env: PeerEnv) -> dict[str, object]:
    return {"requirements": list(env.requirements), "python": platform.python_version()}


def _tail(text: str, lines: int = 1) -> str:
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " / ".join(kept[-lines:])[:400] if kept else "no output"


def peer_version(env: PeerEnv, python: str) -> str:
    """``'<distribution> <version>'`` as installed for ``python``, after importing the module."""
    code = f"import importlib.metadata as m, {env.module}; print(m.version({env.distribution!r}))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerEnvError(
            f"peer environment {env.name!r} at {python} does not run: {exc}"
        ) from None
    if done.returncode != 0:
        raise PeerEnvError(
            f"peer environment {env.name!r} at {python} cannot import {env.module!r}: "
            f"{_tail(done.stderr)}"
        )
    return f"{env.distribution} {done.stdout.strip()}"


def _install(env: PeerEnv, where: Path, log: Callable[[str], None]) -> None:
    if where.exists() and not (where / "pyvenv.cfg").is_file() and any(where.iterdir()):
        raise ConfigError(
            f"peer directory {where} must be empty or a virtual environment (it is neither); "
            "set SECUREVFL_PEER_DIR elsewhere"
        )
    log(
        f"perf: installing peer environment {env.name!r} ({', '.join(env.requirements)}) in "
        f"{where} with pip; once, then reused"
    )
    t0 = time.perf_counter()
    (where / STAMP).unlink(missing_ok=True)
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--clear", str(where)], capture_output=True, text=True
    )
    if made.returncode != 0:
        raise PeerEnvError(f"python -m venv {where} failed: {_tail(made.stderr)}")
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", *env.requirements]
    try:
        done = subprocess.run(pip, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PeerEnvError(
            f"pip install {' '.join(env.requirements)} for peer {env.name!r} took over "
            f"{INSTALL_TIMEOUT_S} s; is the package index reachable?"
        ) from None
    if done.returncode != 0:
        out = done.stdout + done.stderr
        why = (
            "pip cannot reach the package index or it has no such release"
            if any(w in out for w in _UNREACHABLE)
            else "pip install failed"
        )
        raise PeerEnvError(
            f"{why} for peer {env.name!r} ({', '.join(env.requirements)}): {_tail(out)}; set "
            f"PIP_INDEX_URL/PIP_FIND_LINKS, or {override_var(env.name)} to an existing interpreter"
        )
    log(f"perf: peer environment {env.name!r} installed in {time.perf_counter() - t0:.0f} s")


def ensure_peer(env: PeerEnv, log: Callable[[str], None] = print) -> PeerPython:
    """The peer's interpreter, installing its environment first when none matches."""
    var = override_var(env.name)
    given = os.environ.get(var)
    if given:
        if not os.path.isfile(given) or not os.access(given, os.X_OK):
            raise ConfigError(f"{var} must be an executable Python interpreter, got {given!r}")
        return PeerPython(given, peer_version(env, given), var)
    where = peer_root() / env.name
    python = where / "bin" / "python"
    stamp = where / STAMP
    try:
        reuse = json.loads(stamp.read_text()) == _stamp(env) and python.is_file()
    except (OSError, ValueError):
        reuse = False
    if not reuse:
        _install(env, where, log)
    version = peer_version(env, str(python))
    if not reuse:  # the stamp last: an interrupted install is redone, never reused
        stamp.write_text(json.dumps(_stamp(env)))
    return PeerPython(str(python), version, f"{'reused' if reuse else 'installed in'} {where}")
