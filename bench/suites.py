"""Bench suites: TOML files describing method x dataset x epsilon x seed cells.

A suite file ``bench/suites/NAME.toml`` (or any path) looks like::

    name = "default"
    description = "..."
    seeds = [0, 1, 2]
    [defaults]            # RunSpec fields or method options shared by all cells
    dataset = "breast"
    [[cells]]             # a list value expands to one cell per value (cartesian product)
    method = ["vfl", "centralized"]
    attack = "label-norm" # optional: an attack cell (securevfl.attacks) instead of a plain run
    predict_rows = 100000 # optional: a predict cell (train, --save, reload, score the rows)
    audit = "run/40"      # optional: an audit cell (securevfl audit: view[/trials]), not a run
    model = ["glm", "mlp"]
    [report]
    extras = ["hdp"]      # extra report sections: bench/reports/<name>.py
    [[perf]]              # optional: a perf job, ours beside a peer library (bench.perf_jobs)

Fragments in ``bench/suites/NAME.d/*.toml`` add their ``[[cells]]``, ``[[perf]]`` jobs and report
extras to suite NAME, so each method contributes its own cells to the default suite without
editing a shared file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.perf_jobs import PerfJob, parse_jobs
from bench.plugins import load_plugins
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.options import parse_bool
from securevfl.run_options import build_spec

SUITES_DIR = Path(__file__).parent / "suites"
FRAGMENT_KEYS = ("cells", "perf", "report")


@dataclass
class Cell:
    """One run of a suite: a spec, the runtime to use, and a stable id for skipping."""

    spec: RunSpec
    processes: bool = False
    attack: str | None = None  # an attack cell: run the attack (securevfl.attacks) on the spec
    # a predict cell: train with --save, reload, score this many rows (bench.predict_bench)
    predict_rows: int | None = None
    audit: str | None = None  # an audit cell: ``securevfl audit`` of the spec in this view
    # the id of the cell as the suite states it: taken when the cell is made, since running
    # fills in the spec (a csv: dataset's partition) and a rerun must find the same id
    _id: str = field(init=False, repr=False, default="")

    def __post_init__(self) -> None:
        key: dict[str, Any] = {"spec": self.spec.__dict__, "processes": self.processes}
        if self.attack is not None:  # plain cells keep the ids they had
            key["attack"] = self.attack
        if self.predict_rows is not None:
            key["predict_rows"] = self.predict_rows
        if self.audit is not None:
            key["audit"] = self.audit
        blob = json.dumps(key, sort_keys=True, default=str)
        self._id = hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def cell_id(self) -> str:
        """A stable id: the same cell in a later run of the suite has the same id (skipped)."""
        return self._id


@dataclass
class Suite:
    name: str
    description: str
    cells: list[Cell]
    extras: list[str] = field(default_factory=list)
    perf: list[PerfJob] = field(default_factory=list)  # side-by-side jobs (bench.perf)


def suite_names() -> list[str]:
    """Names of the suites shipped in bench/suites."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def _expand(entry: dict[str, Any]) -> list[dict[str, Any]]:
    keys = list(entry)
    values = [v if isinstance(v, list) else [v] for v in entry.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def make_spec(params: dict[str, Any]) -> tuple[RunSpec, bool]:
    """A suite cell's RunSpec (every value checked by its option) and its runtime."""
    params = dict(params)
    processes = parse_bool(params.pop("processes", False))
    params.pop("attack", None)  # read by load_suite
    params.pop("predict_rows", None)  # read by load_suite
    params.pop("audit", None)
    if "method" not in params:
        raise ConfigError(f"every suite cell must name a method, got {params}")
    return build_spec(params), processes


def _read_toml(path: Path) -> dict[str, Any]:
    """One suite file as a table; any unreadable file is a one-line ConfigError."""
    if not path.is_file():
        raise ConfigError(f"suite file must be a regular file, got {str(path)!r}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"suite file {path} must be UTF-8 TOML: {exc}") from None


def _typed(path: Path, doc: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = doc.get(key, default)
    if not isinstance(value, kind):
        raise ConfigError(
            f"{key} in suite file {path} must be a {kind.__name__}, got {value!r}"[:300]
        )
    return value


def _seeds(path: Path, value: Any) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
    ):
        raise ConfigError(
            f"seeds in suite file {path} must be a non-empty list of integers >= 0, got {value!r}"
        )
    return value


def _extras(path: Path, doc: dict[str, Any]) -> list[str]:
    extras = _typed(path, _typed(path, doc, "report", dict, {}), "extras", list, [])
    for name in extras:
        if (
            not isinstance(name, str)
            or not (Path(__file__).parent / "reports" / f"{name}.py").is_file()
        ):
            raise ConfigError(
                f"report extras in suite file {path} must name files in bench/reports/, "
                f"got {name!r}"
            )
    return extras


def _predict_rows(path: Path, value: Any) -> int | None:
    """A predict cell's number of scored rows (None: not a predict cell)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**8:
        raise ConfigError(
            f"predict_rows in suite file {path} must be an integer in [1, 1e8], got {value!r}"
        )
    return value


def load_suite(name_or_path: str) -> Suite:
    """Load a suite by name (bench/suites/NAME.toml) or by path, with its fragments."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SUITES_DIR / f"{name_or_path}.toml"
    if not path.exists():
        raise ConfigError(
            f"suite must be one of {suite_names()} or a .toml path, got {name_or_path!r}"
        )
    fragments = sorted((path.parent / f"{path.stem}.d").glob("*.toml"))
    docs = [(path, _read_toml(path))] + [(p, _read_toml(p)) for p in fragments]
    for p, d in docs[1:]:  # a misspelt table in a fragment would be silently ignored
        stray = sorted(set(d) - set(FRAGMENT_KEYS))
        if stray:
            raise ConfigError(
                f"suite fragment {p} may hold only {', '.join(FRAGMENT_KEYS)}, got {stray[0]!r}"
            )
    doc = docs[0][1]
    load_plugins()  # cells are checked against their methods' options as they are read
    seeds = _seeds(path, doc.get("seeds", [0]))
    defaults = _typed(path, doc, "defaults", dict, {})
    cells: list[Cell] = []
    extras: list[str] = []
    for p, d in docs:
        for entry in _typed(p, d, "cells", list, []):
            if not isinstance(entry, dict):
                raise ConfigError(f"cells in suite file {p} must be tables, got {entry!r}"[:300])
            entry = dict(entry)
            entry_seeds = _seeds(p, entry.pop("seeds", seeds))
            for params in _expand(entry):
                for seed in entry_seeds:
                    spec, processes = make_spec({**defaults, **params, "seed": seed})
                    attack = params.get("attack", defaults.get("attack"))
                    given = params.get("predict_rows", defaults.get("predict_rows"))
                    rows = _predict_rows(p, given)
                    audit = params.get("audit", defaults.get("audit"))
                    cells.append(Cell(spec, processes, attack, rows, audit))
        extras += [e for e in _extras(p, d) if e not in extras]
    perf = parse_jobs(docs)
    if not cells and not perf:
        raise ConfigError(f"a suite must have at least one cell or perf job, got none in {path}")
    name = _typed(path, doc, "name", str, path.stem)
    return Suite(name, _typed(path, doc, "description", str, ""), cells, extras, perf)
