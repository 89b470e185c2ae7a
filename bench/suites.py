"""Bench suites: TOML files describing method x dataset x epsilon x seed cells.

A suite file ``bench/suites/NAME.toml`` (or any path) looks like::

    name = "default"
    description = "..."
    seeds = [0, 1, 2]
    [defaults]            # RunSpec fields or method options shared by all cells
    dataset = "breast"
    [[cells]]             # a list value expands to one cell per value (cartesian product)
    method = ["vfl", "centralized"]
    model = ["glm", "mlp"]
    [report]
    extras = ["hdp"]      # extra report sections: bench/reports/<name>.py

Fragments in ``bench/suites/NAME.d/*.toml`` add their ``[[cells]]`` (and report extras) to suite
NAME, so each method contributes its own cells to the default suite without editing a shared file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from bench.suite_checks import check_params, check_suite_doc, read_suite_toml
from securevfl.context import RunSpec
from securevfl.errors import ConfigError

SUITES_DIR = Path(__file__).parent / "suites"
_SPEC_FIELDS = {f.name for f in fields(RunSpec)}
_DATASET_KEYS = {"n", "d", "sparsity", "encoding"}


@dataclass
class Cell:
    """One run of a suite: a spec, the runtime to use, and a stable id for skipping."""

    spec: RunSpec
    processes: bool = False

    @property
    def cell_id(self) -> str:
        blob = json.dumps(
            {"spec": self.spec.__dict__, "processes": self.processes}, sort_keys=True, default=str
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Suite:
    name: str
    description: str
    cells: list[Cell]
    extras: list[str] = field(default_factory=list)


def suite_names() -> list[str]:
    """Names of the suites shipped in bench/suites."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def _expand(entry: dict[str, Any]) -> list[dict[str, Any]]:
    keys = list(entry)
    values = [v if isinstance(v, list) else [v] for v in entry.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def make_spec(params: dict[str, Any]) -> tuple[RunSpec, bool]:
    """Split flat suite parameters into a RunSpec (+ dataset options, method options)."""
    params = dict(params)
    processes = bool(params.pop("processes", False))
    spec_kw: dict[str, Any] = {"dataset_options": {}, "options": {}}
    for k, v in params.items():
        if k in _DATASET_KEYS:
            spec_kw["dataset_options"][k] = v
        elif k in _SPEC_FIELDS:
            spec_kw[k] = v
        else:
            spec_kw["options"][k] = v
    if "method" not in spec_kw:
        raise ConfigError(f"every suite cell must name a method, got {params}")
    return RunSpec(**spec_kw), processes


def load_suite(name_or_path: str) -> Suite:
    """Load a suite by name (bench/suites/NAME.toml) or by path, with its fragments."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SUITES_DIR / f"{name_or_path}.toml"
    if not path.exists():
        raise ConfigError(
            f"suite must be one of {suite_names()} or a .toml path, got {name_or_path!r}"
        )
    doc = read_suite_toml(path)
    check_suite_doc(doc, path)
    docs = [doc]
    for frag in sorted((path.parent / f"{path.stem}.d").glob("*.toml")):
        docs.append(read_suite_toml(frag))
        check_suite_doc(docs[-1], frag, fragment=True)
    seeds = doc.get("seeds", [0])
    defaults = doc.get("defaults", {})
    cells: list[Cell] = []
    extras: list[str] = list(doc.get("report", {}).get("extras", []))
    for d in docs:
        for entry in d.get("cells", []):
            entry_seeds = entry.pop("seeds", seeds)
            for params in _expand(entry):
                check_params({**defaults, **params})
                for seed in entry_seeds:
                    spec, processes = make_spec({**defaults, **params, "seed": seed})
                    cells.append(Cell(spec, processes))
        if d is not doc:
            extras += [e for e in d.get("report", {}).get("extras", []) if e not in extras]
    return Suite(doc.get("name", path.stem), doc.get("description", ""), cells, extras)
