"""Perf jobs (issue 29): one comparison of our command against a peer library's, declared as
``[[perf]]`` tables in ``bench/suites/perf.d/<job>.toml``::

    [[perf]]
    name = "fm-product-100k"    # unique id: lowercase letters, digits, '-' and '_'
    title = "FM-VFL secure phase ..."
    goal = 3.0                  # peer median s / our median s to reach (absent: informational)
    peer = "spu"                # an environment of bench/peers/envs.toml
    ours = ["{python}", "-m", "bench.secure_products_bench", "--n", "100000", "--json"]
    theirs = ["{peer_python}", "bench/peers/spu_block.py", "100000", "--json"]
    timeout_s = 900             # per run; default 900
    runs = 3                    # runs per side; default 3

Every problem is a one-line :class:`ConfigError` naming the file and the key, raised when the
suite is loaded, before anything runs or installs.
"""

from __future__ import annotations

import argparse
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securevfl.errors import ConfigError

ENVS_FILE = Path(__file__).parent / "peers" / "envs.toml"
PLACEHOLDERS = ("{python}", "{peer_python}")
REQUIRED = ("name", "title", "peer", "ours", "theirs")
OPTIONAL = ("goal", "timeout_s", "runs")
MAX_TIMEOUT_S = 24 * 3600
MAX_RUNS = 100
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_FIELD = re.compile(r"\{[A-Za-z_]+\}")  # a placeholder; other braces (JSON, code) are literal


@dataclass(frozen=True)
class PeerEnv:
    """A peer's virtual environment: what pip installs, what to import, whose version to show."""

    name: str
    requirements: tuple[str, ...]
    module: str
    distribution: str


@dataclass(frozen=True)
class PerfJob:
    """One side-by-side comparison; ``goal`` None: informational (no ratio to meet)."""

    name: str
    title: str
    peer: str
    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    goal: float | None = None
    timeout_s: float = 900.0
    runs: int = 3
    source: str = ""  # the file it was declared in


def _str_list(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key} in {where} must be a non-empty list of strings, got {value!r}")
    return tuple(value)


def load_envs(path: Path | None = None) -> dict[str, PeerEnv]:
    """The peer environments declared in ``path`` (default: bench/peers/envs.toml)."""
    path = ENVS_FILE if path is None else path
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"peer environments file {path} must be readable TOML: {exc}") from None
    envs = {}
    for name, table in doc.items():
        where = f"peer environments file {path}, [{name}]"
        if not isinstance(table, dict) or not _NAME.match(name):
            raise ConfigError(f"{where} must be a table named in [a-z0-9_-], got {table!r}"[:300])
        unknown = sorted(set(table) - {"requirements", "module", "distribution"})
        if unknown:
            raise ConfigError(f"{where} has the unknown key {unknown[0]!r}")
        for key in ("module", "distribution"):
            if not isinstance(table.get(key), str) or not table[key]:
                raise ConfigError(f"{key} in {where} must be a non-empty string")
        reqs = _str_list(where, "requirements", table.get("requirements"))
        envs[name] = PeerEnv(name, reqs, table["module"], table["distribution"])
    return envs


def _command(where: str, key: str, value: Any) -> tuple[str, ...]:
    cmd = _str_list(where, key, value)
    for arg in cmd:
        stray = [f for f in _FIELD.findall(arg) if f not in PLACEHOLDERS]
        if stray:
            raise ConfigError(
                f"{key} in {where} may use only the placeholders {', '.join(PLACEHOLDERS)}, "
                f"got {stray[0]!r}"
            )
    return cmd


def _number(where: str, key: str, value: Any, *, low: float, high: float, kind: type) -> Any:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and isinstance(value, int)
    if not ok or not math.isfinite(value) or not low <= value <= high:
        kind_name = "an integer" if kind is int else "a number"
        raise ConfigError(
            f"{key} in {where} must be {kind_name} in [{low:g}, {high:g}], got {value!r}"
        )
    return kind(value)


def parse_job(path: Path, index: int, entry: Any, envs: dict[str, PeerEnv]) -> PerfJob:
    """One ``[[perf]]`` table of ``path`` (its ``index``-th), checked key by key."""
    where = f"perf job #{index + 1} of {path}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table, got {entry!r}"[:300])
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ConfigError(
            f"{where} has the unknown key {unknown[0]!r} (known: {', '.join(REQUIRED + OPTIONAL)})"
        )
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise ConfigError(f"{where} must have the key {missing[0]!r}")
    name = entry["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"name in {where} must match [a-z0-9][a-z0-9_-]*, got {name!r}")
    where = f"perf job {name!r} of {path}"
    if not isinstance(entry["title"], str) or not entry["title"].strip():
        raise ConfigError(f"title in {where} must be a non-empty string, got {entry['title']!r}")
    if entry["peer"] not in envs:
        raise ConfigError(
            f"peer in {where} must be one of {sorted(envs)} (bench/peers/envs.toml), "
            f"got {entry['peer']!r}"
        )
    goal = entry.get("goal")
    return PerfJob(
        name=name,
        title=entry["title"].strip(),
        peer=entry["peer"],
        ours=_command(where, "ours", entry["ours"]),
        theirs=_command(where, "theirs", entry["theirs"]),
        goal=None if goal is None else _number(where, "goal", goal, low=1e-6, high=1e6, kind=float),
        timeout_s=_number(
            where, "timeout_s", entry.get("timeout_s", 900), low=1, high=MAX_TIMEOUT_S, kind=float
        ),
        runs=_number(where, "runs", entry.get("runs", 3), low=1, high=MAX_RUNS, kind=int),
        source=str(path),
    )


def parse_jobs(
    docs: list[tuple[Path, dict[str, Any]]], envs: dict[str, PeerEnv] | None = None
) -> list[PerfJob]:
    """The perf jobs of a suite's files (the suite file, then its fragments); names unique."""
    jobs: list[PerfJob] = []
    for path, doc in docs:
        entries = doc.get("perf", [])
        if not isinstance(entries, list):
            raise ConfigError(
                f"perf in {path} must be an array of tables ([[perf]]), got {entries!r}"[:300]
            )
        for i, entry in enumerate(entries):
            envs = load_envs() if envs is None else envs  # read only when a suite has jobs
            job = parse_job(path, i, entry, envs)
            if any(j.name == job.name for j in jobs):
                raise ConfigError(
                    f"name in perf job #{i + 1} of {path} must be unique, got {job.name!r} twice"
                )
            jobs.append(job)
    return jobs


def select_jobs(jobs: list[PerfJob], names: str | None) -> list[PerfJob]:
    """``--perf-jobs NAME,...``: those jobs in the order given (None: all of them)."""
    if names is None:
        return jobs
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {j.name: j for j in jobs}
    if not wanted:
        raise ConfigError(f"--perf-jobs must name at least one job, got {names!r}")
    for n in wanted:
        if n not in known:
            raise ConfigError(f"--perf-jobs must name jobs of the suite {sorted(known)}, got {n!r}")
    return [known[n] for n in dict.fromkeys(wanted)]


def add_perf_args(parser: argparse.ArgumentParser) -> None:
    """``securevfl bench``'s perf-job options."""
    g = parser.add_argument_group(
        "perf jobs",
        "a suite's [[perf]] jobs (the perf suite: bench/suites/perf.d/) run our command and a peer "
        "library's alternately, each peer in its own virtual environment made with pip on first "
        "use ($SECUREVFL_PEER_DIR/NAME or ~/.cache/securevfl/peers/NAME; "
        "SECUREVFL_PEER_PYTHON_NAME=/path/to/python uses an existing one); results in "
        "OUT/perf.jsonl, the ratio table in report.html under 'Performance against peers'",
    )
    g.add_argument(
        "--perf-jobs",
        metavar="NAME,...",
        help="run only these perf jobs (see --list), and none of the suite's cells",
    )
    g.add_argument(
        "--perf-runs",
        metavar="N",
        help="runs per side of each perf job (median of them); default: the job's runs, else 3",
    )
