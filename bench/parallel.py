"""Run a suite's cells in worker processes (``securevfl bench --jobs N``).

Each worker is a fresh (spawned) interpreter with the plugins loaded and torch limited to its
share of the cores, so N cells never fight over the same threads. The parent keeps the output
lock and appends each record as its cell finishes. Timings of cells that ran side by side are
each cell's own wall clock on a shared machine: every record says how many ran at once
(``bench_jobs``), so a report reader can tell them from sequential timings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any

from bench.suites import Cell


def _init(threads: int) -> None:
    import torch

    from bench.plugins import load_plugins

    torch.set_num_threads(threads)
    load_plugins()


def _work(run_cell: Callable[[Cell], Any], cell: Cell) -> tuple[str, Any]:
    """('ok', record) or ('error', one-line reason) for one cell, in a worker (``run_cell``:
    the runner's, handed in so that this module does not import the runner back)."""
    from securevfl.errors import SecureVFLError

    try:
        return "ok", run_cell(cell)
    except SecureVFLError as exc:
        return "error", str(exc)


def run_parallel(
    cells: list[Cell],
    jobs: int,
    *,
    run_cell: Callable[[Cell], Any],
    on_start: Callable[[Cell], None] | None = None,
) -> Iterator[tuple[Cell, str, Any]]:
    """Yield (cell, 'ok' | 'error', record | reason) as cells finish, ``jobs`` at a time, each
    run by ``run_cell`` (a module-level function: it travels to the workers by name)."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    ctx = get_context("spawn")  # no forked torch / MPyC state in the workers
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init, initargs=(threads,)) as ex:
        queue = list(cells)
        running: dict[Future, Cell] = {}
        while queue or running:
            while queue and len(running) < jobs:
                cell = queue.pop(0)
                if on_start is not None:
                    on_start(cell)
                running[ex.submit(_work, run_cell, cell)] = cell
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                cell = running.pop(fut)
                status, value = fut.result()
                yield cell, status, value
