"""Run the cells of a suite, append records to results.jsonl, skip cells already there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.plugins import PLUGINS, load_plugins, plugin_modules
from bench.suites import Cell, Suite
from securevfl.errors import SecureVFLError
from securevfl.experiment import run_experiment, run_in_processes

__all__ = ["PLUGINS", "load_plugins", "read_results", "run_cell", "run_suite"]


def run_cell(cell: Cell) -> dict[str, Any]:
    """Run one cell in the runtime it asks for."""
    if cell.attack is not None:
        from securevfl.attacks import run_attack

        return run_attack(cell.attack, cell.spec)
    if cell.processes:
        return run_in_processes(cell.spec, plugins=plugin_modules())
    return run_experiment(cell.spec)


def read_results(path: Path) -> list[dict[str, Any]]:
    """All records of a results.jsonl (missing file: none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_suite(suite: Suite, out: Path, *, progress: bool = True) -> tuple[int, int, list[str]]:
    """Run missing cells; return (ran, skipped, errors)."""
    load_plugins()
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {r.get("cell_id") for r in read_results(results)}
    todo = [c for c in suite.cells if c.cell_id not in done]
    errors: list[str] = []
    bar = tqdm(todo, desc=f"suite {suite.name}", unit="run", disable=not progress)
    for cell in bar:
        s = cell.spec
        what = f"{cell.attack} on " if cell.attack else ""
        bar.set_postfix_str(f"{what}{s.method} {s.dataset} eps={s.epsilon} seed={s.seed}")
        try:
            record = run_cell(cell)
        except SecureVFLError as exc:
            what = f"{cell.attack}@" if cell.attack else ""
            errors.append(f"{what}{s.method}/{s.dataset}/eps={s.epsilon}/seed={s.seed}: {exc}")
            continue
        record["cell_id"] = cell.cell_id
        record["suite"] = suite.name
        with results.open("a") as f:
            f.write(json.dumps(record) + "\n")
    return len(todo) - len(errors), len(suite.cells) - len(todo), errors
