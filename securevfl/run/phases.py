"""The steps of a run around its training, each one named in
:func:`securevfl.experiment.run_experiment`: the local parties get ready (frame limit, the
recorded party's view, their identity keys), then after training each one keeps its part of the
model, and ``--save`` writes each local party's part from its record.
"""

from __future__ import annotations

from typing import Any

from securevfl.context import PublicInfo, RunSpec
from securevfl.methods.base import Method
from securevfl.run.parties import Party
from securevfl.run.probe import write_trained_probe
from securevfl.runtime.base import Runtime
from securevfl.runtime.frame_limits import frame_limit
from securevfl.runtime.resources import cpu_seconds, current_rss_bytes

Start = tuple[float, int, float]


def start_clock() -> Start:
    """Wall time, resident memory and CPU seconds at the start of the run (for the record)."""
    import time

    return time.perf_counter(), current_rss_bytes(), cpu_seconds()


def views_of(parties: dict[int, Party]) -> dict[int, Any]:
    """The local parties' views, by party."""
    return {k: p.view for k, p in parties.items()}


def apply_views_hook(
    hook: Any, info: PublicInfo, parties: dict[int, Party], pooled: Any
) -> tuple[PublicInfo, Any]:
    """``hook(info, views, pooled)`` may re-split the rows (the membership attack): each local
    party's record takes its new view."""
    info, views, pooled = hook(info, views_of(parties), pooled)
    for k, p in parties.items():
        p.view = views.get(k)
    return info, pooled


def before_training(
    spec: RunSpec, method: Method, rt: Runtime, info: PublicInfo, parties: dict[int, Party]
) -> None:
    """Networked: refuse frames over this run's largest; the recorded party's own data and the
    public facts; a party on a host of its own holds its TLS identity."""
    if hasattr(rt, "limit_frames"):
        rt.limit_frames(frame_limit(spec, info, method))
    if rt.view is not None:
        v = rt.view.view
        v.own, v.info, v.spec = views_of(parties).get(v.party), info, spec
    identity = getattr(rt, "identity", None)
    for p in parties.values():  # a networked process holds exactly one party
        p.keys.identity = identity


def after_training(rt: Runtime, info: PublicInfo, parties: dict[int, Party], fit: Any) -> None:
    """Each local party keeps its part of the trained model; the recorded label holder's view
    gets the test outputs."""
    model = fit.model or {}
    for k, p in parties.items():
        p.model = model.get(k)
    if rt.view is not None and rt.view.party == info.label_party:
        rt.view.view.outputs = fit.test_scores
    write_trained_probe(parties)  # tests only: the keys and model parts this process holds


def save_parties(
    save: str,
    spec: RunSpec,
    method: Method,
    info: PublicInfo,
    parties: dict[int, Party],
    fit: Any,
    facts: dict[str, Any],
    *,
    shared_seed: int,
    rt: Runtime,
) -> None:
    """``--save``: every local party writes only its own part, from its record, where it lives."""
    from securevfl.model.files import save_parts

    save_parts(
        save,
        spec,
        method,
        info,
        views_of(parties),
        fit,
        facts,
        shared_seed=shared_seed,
        here_label=rt.here(info.label_party),
        parts={k: p.model for k, p in parties.items() if p.model is not None},
    )
