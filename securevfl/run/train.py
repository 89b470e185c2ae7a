"""Step 7 of a run and what it needs: one torch thread, the runtime, the shared seed, the fit."""

from __future__ import annotations

import dataclasses
import secrets
import sys
from typing import Any

import numpy as np

from securevfl.context import (
    AuditTap,
    PartyView,
    PublicInfo,
    RunContext,
    RunSpec,
    has_budget,
)
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.privacy.centring import reserve as centring_reserve
from securevfl.run.dp_ranges import method_spec
from securevfl.runtime.base import Runtime
from securevfl.runtime.inprocess import InProcessRuntime


def one_torch_thread(spec: RunSpec) -> None:
    """The models here are small: torch's intra-op threads cost far more in synchronisation
    than they gain (measured 40x slower split-NN steps with 2 threads on a loaded 2-core
    machine), and one thread per party process keeps in-process and networked timings
    comparable. A GLM or boosted-trees run of a method whose module did not load torch never
    imports it (~2-3 CPU-s a process)."""
    if spec.model not in ("glm", "gbdt") or "torch" in sys.modules:
        import torch

        torch.set_num_threads(1)


def runtime_for(spec: RunSpec, method: Method, rt: Runtime | None) -> Runtime:
    """The given runtime, checked to have the method's party count; None: every party here."""
    if rt is None:
        return InProcessRuntime(method.n_parties(spec))
    if rt.n_parties != method.n_parties(spec):
        raise ConfigError(
            f"runtime must have {method.n_parties(spec)} parties for {spec.method!r} "
            f"with {spec.parties} data parties, got {rt.n_parties}"
        )
    return rt


def agree_seed(spec: RunSpec, rt: Runtime) -> int:
    """The seed of batches and initialisation every party shares: --seed, else party 0's draw."""
    if spec.seed is not None:
        return int(spec.seed)
    return int(rt.control(secrets.randbits(62) if rt.here(0) else None, src=0))


def fit_method(
    spec: RunSpec,
    method: Method,
    rt: Runtime,
    info: PublicInfo,
    views: dict[int, PartyView],
    pooled: Any,
    shared_seed: int,
    audit: AuditTap | None,
    checkpoints: Any,
    parties: dict[int, Any] | None = None,
) -> Any:
    """Step 7: the method trains (the centring's share of ε set aside where it is released);
    ``parties``: the local parties' records, where the method keeps their keys."""
    fit_spec = spec
    composes = method.composes_centring(spec)  # else the record adds them (basic)
    if spec.center and has_budget(spec) and not composes:  # the means take their share
        cost = centring_reserve(float(spec.epsilon), method.centre_share(spec))
        fit_spec = dataclasses.replace(spec, epsilon=float(spec.epsilon) - cost)
    fit_spec = method_spec(spec, method, info, fit_spec)  # DP ranges' share set aside
    from securevfl.engine import close_engines, open_engines

    ctx = RunContext(
        rt=rt,
        spec=fit_spec,
        info=info,
        views=views,
        shared_seed=shared_seed,
        pooled=pooled if method.pooled_data else None,
        audit=audit,
        parties=parties or {},
        engines=open_engines(
            spec,
            [k for k in rt.local_parties if k < info.data_parties],
            views,
            key_holder=info.label_party,
        ),
    )
    # numpy's overflow/invalid warnings would add unexplained lines to the output; what they
    # can mean (a non-finite or constant result) is judged by outcome_warnings below
    from securevfl.model import checkpoint

    token = checkpoint.activate(checkpoints)
    engines = None
    try:
        with np.errstate(all="ignore"):
            fit = method.fit(ctx)
    finally:
        checkpoint.deactivate(token)
        engines = close_engines(ctx.engines)
    if engines is not None:  # each local party's engine, its workers' peak memory
        fit.extra["engine"] = engines
    if checkpoints is not None and not checkpoints.used:
        raise ConfigError(
            f"--checkpoint-every/--resume do not apply to method {spec.method!r}: it does "
            "not train with the GLM or split-NN trainer's epochs"
        )
    return fit
