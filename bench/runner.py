"""Run the cells of a suite, append records to results.jsonl, skip cells already done.

One runner per output directory (a lock); each record is appended whole (see
:mod:`bench.results_file`). A cell that raises, or that finishes with a metric that is not a
finite number, is recorded with ``"status": "failed"`` and the reason: reports leave it out and
the next run of the suite on the same directory tries it again.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.plugins import PLUGINS, load_plugins, plugin_modules
from bench.results_file import OutputLock, append_record, cut_torn_tail, read_results
from bench.suites import Cell, Suite
from securevfl.errors import ConfigError, SecureVFLError
from securevfl.experiment import check_spec, run_experiment, run_in_processes

__all__ = ["PLUGINS", "failure_of", "load_plugins", "read_results", "run_cell", "run_suite"]

FAILED = "failed"


def run_cell(cell: Cell) -> dict[str, Any]:
    """Run one cell in the runtime it asks for."""
    if cell.attack is not None:
        from securevfl.attacks import run_attack

        return run_attack(cell.attack, cell.spec)
    if cell.predict_rows is not None:
        from bench.predict_bench import predict_cell

        return predict_cell(cell.spec, cell.predict_rows)
    if cell.audit is not None:
        from bench.audit_cell import audit_cell

        return audit_cell(cell.audit, cell.spec)
    if cell.processes:
        return run_in_processes(cell.spec, plugins=plugin_modules())
    return run_experiment(cell.spec)


def failure_of(record: dict[str, Any]) -> str | None:
    """Why a record does not count as a result (failed, or a metric not a finite number)."""
    if record.get("status") == FAILED:
        return record.get("error", "failed")
    for name, v in (record.get("metrics") or {}).items():
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return f"metric {name} is not a finite number ({v!r})"
    return None


def succeeded(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records a report may use."""
    return [r for r in records if failure_of(r) is None]


def _failed_record(cell: Cell, suite: Suite, error: str) -> dict[str, Any]:
    s = cell.spec
    return {
        "status": FAILED,
        "error": error,
        "method": s.method,
        "dataset": s.dataset,
        "config": s.to_config(),
        "cell_id": cell.cell_id,
        "suite": suite.name,
    }


def check_cells(suite: Suite) -> None:
    """Every cell against its method's rules before any runs (ConfigError naming the cell):
    a cell that can never run is a bad suite, not a failed run."""
    for cell in suite.cells:
        s = cell.spec
        try:
            check_spec(s)
        except ConfigError as exc:
            raise ConfigError(
                f"suite {suite.name!r}, cell {s.method}/{s.dataset}/eps={s.epsilon}: {exc}"
            ) from None


def _label(cell: Cell) -> str:
    s = cell.spec
    what = f"{cell.attack}@" if cell.attack else ("audit@" if cell.audit else "")
    return f"{what}{s.method}/{s.dataset}/eps={s.epsilon}/seed={s.seed}"


def _outcomes(todo: list[Cell], jobs: int, bar: Any):
    """(cell, 'ok' | 'error', record | reason) per cell, one at a time or ``jobs`` at once."""
    if jobs > 1 and len(todo) > 1:
        from bench.parallel import run_parallel

        yield from run_parallel(
            todo, jobs, run_cell=run_cell, on_start=lambda c: bar.set_postfix_str(_label(c))
        )
        return
    for cell in todo:
        bar.set_postfix_str(_label(cell))
        try:
            yield cell, "ok", run_cell(cell)
        except SecureVFLError as exc:
            yield cell, "error", str(exc)


def run_suite(
    suite: Suite, out: Path, *, progress: bool = True, jobs: int = 1
) -> tuple[int, int, list[str]]:
    """Run the cells without a successful record; return (ran, skipped, errors).

    ``jobs`` > 1: that many cells at once in worker processes (:mod:`bench.parallel`)."""
    if not suite.cells:
        raise ConfigError(f"suite {suite.name!r} must have at least one cell, got none")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out must be a directory, got the file {str(out)!r}")
    load_plugins()
    check_cells(suite)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    with OutputLock(out):
        cut_torn_tail(results)
        done = {r.get("cell_id") for r in succeeded(read_results(results))}
        todo = [c for c in suite.cells if c.cell_id not in done]
        errors: list[str] = []
        bar = tqdm(total=len(todo), desc=f"suite {suite.name}", unit="run", disable=not progress)
        for cell, status, value in _outcomes(todo, jobs, bar):
            bar.update(1)
            label = _label(cell)
            if status == "error":
                errors.append(f"{label}: {value}")
                append_record(results, _failed_record(cell, suite, str(value)))
                continue
            record = value
            if jobs > 1:
                record["bench_jobs"] = jobs  # its timings were taken beside other cells
            record["cell_id"] = cell.cell_id
            record["suite"] = suite.name
            why = failure_of(record)
            if why is not None:
                errors.append(f"{label}: {why}")
                record.update(status=FAILED, error=why)
            append_record(results, record)
    return len(todo) - len(errors), len(suite.cells) - len(todo), errors
