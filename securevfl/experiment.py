"""Run one method on one dataset and build its result record.

The same function runs in every process of a networked run (SPMD): each process loads the data,
keeps only the columns of the parties that live there, and the label holder returns the record.
"""

from __future__ import annotations

from typing import Any

from securevfl.context import (
    AuditTap,
    RunSpec,
)
from securevfl.run.centring import center_numeric_columns, center_released, centre_columns
from securevfl.run.checks import check_spec, validate_spec
from securevfl.run.phases import (
    after_training,
    apply_views_hook,
    before_training,
    save_parties,
    start_clock,
    views_of,
)
from securevfl.run.processes import own_files_of, run_in_processes
from securevfl.run.record import collect_record
from securevfl.run.train import agree_seed, fit_method, one_torch_thread, runtime_for
from securevfl.run.views import ViewsHook, build_views, prepare_parties
from securevfl.run_options import build_spec
from securevfl.runtime.base import Runtime

__all__ = [
    "ViewsHook",
    "agree_seed",
    "build_views",
    "center_numeric_columns",
    "center_released",
    "centre_columns",
    "check_spec",
    "fit_method",
    "one_torch_thread",
    "own_files_of",
    "run_experiment",
    "run_in_processes",
    "runtime_for",
    "spec_from_dict",
    "validate_spec",
]


def run_experiment(
    spec: RunSpec,
    rt: Runtime | None = None,
    *,
    views_hook: ViewsHook | None = None,
    save: str | None = None,
    checkpoints: Any = None,
    audit: AuditTap | None = None,
) -> dict[str, Any] | None:
    """Run ``spec``; the label holder's process returns the record, other processes ``None``.

    ``views_hook(info, views, pooled)`` may re-split the rows before training (the membership
    attack trains on part of the training split and scores members beside non-members).
    ``save``: a directory; each party living here writes its own trained part into it
    (:mod:`securevfl.model.files`). ``checkpoints``:
    a :class:`securevfl.model.checkpoint.Checkpoints` (write every N epochs / resume), None: off.
    ``audit``: a trial of ``securevfl audit`` (fresh noise; maybe deliberately under-noised).
    """
    start = start_clock()
    method = validate_spec(spec)
    one_torch_thread(spec)
    own_rt = rt is None
    rt = runtime_for(spec, method, rt)
    if save is not None:  # refused before any training
        from securevfl.model.files import check_save

        check_save(save, rt.local_parties, spec, method)
    try:
        facts: dict[str, Any] = {}
        info, parties, pooled = prepare_parties(spec, method, rt.local_parties, facts, rt=rt)
        if views_hook is not None:
            info, pooled = apply_views_hook(views_hook, info, parties, pooled)
        before_training(spec, method, rt, info, parties)
        shared_seed = agree_seed(spec, rt)
        views = views_of(parties)
        fit = fit_method(
            spec, method, rt, info, views, pooled, shared_seed, audit, checkpoints, parties
        )
        after_training(rt, info, parties, fit)
        if save is not None:
            save_parties(
                save, spec, method, info, parties, fit, facts, shared_seed=shared_seed, rt=rt
            )
        return collect_record(
            spec, method, rt, info, views, fit, start=start, checkpoints=checkpoints, audit=audit
        )
    finally:
        if own_rt:
            rt.close()


def spec_from_dict(d: dict[str, Any]) -> RunSpec:
    """Rebuild a RunSpec from its ``__dict__`` (how the launcher hands it to party processes)."""
    return build_spec(d)
