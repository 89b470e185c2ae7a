"""Run one method on one dataset and build its result record.

The same function runs in every process of a networked run (SPMD): each process loads the data,
keeps only the columns of the parties that live there, and the label holder returns the record.
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from securevfl.context import (
    AuditTap,
    PartyView,
    PublicInfo,
    RunContext,
    RunSpec,
    has_budget,
    noise_seed,
)
from securevfl.data import check_rows
from securevfl.data.custom import (
    CSV_KEYS,
    FILE_PREFIXES,
    file_sources,
    is_csv_dataset,
    register_csv_parties,
)
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.privacy.centring import (
    CENTRE_SHARE,
    centre,
    centring_epsilon,
    released_means,
)
from securevfl.privacy.centring import reserve as centring_reserve
from securevfl.registry import create
from securevfl.rng import make_noise_rng
from securevfl.run.record import collect_record
from securevfl.run.steps import (
    OWN_CSV,
    open_parties,
    party_views,
    pooled_arrays,
    public_info,
    receive_split,
    split_from_label_holder,
    write_probe,
)
from securevfl.run_options import build_spec, check_common
from securevfl.runtime.base import Runtime
from securevfl.runtime.frame_limits import frame_limit
from securevfl.runtime.inprocess import InProcessRuntime
from securevfl.runtime.resources import check_memory, cpu_seconds, current_rss_bytes


def check_spec(spec: RunSpec) -> Method:
    """Every rule that needs no data: options, generic fields, the method's own (ConfigError).

    A party process calls this before it connects, so a bad spec never waits for peers."""
    method: Method = create("method", spec.method)
    check_common(spec, min_parties=1 if method.pooled_data else 2)
    is_csv = isinstance(spec.dataset, str) and is_csv_dataset(spec.dataset)
    if (spec.data is not None) != (spec.dataset == OWN_CSV) and spec.data is not None:
        raise ConfigError(
            f"--data (this party's own file) applies to dataset {OWN_CSV!r} only, got dataset "
            f"{spec.dataset!r}"
        )
    if spec.id_column is not None and not is_csv:
        raise ConfigError(
            f"id_column applies to --dataset csv:... only, got dataset {spec.dataset!r}"
        )
    for key in CSV_KEYS:
        if (spec.dataset_options or {}).get(key) is not None and not is_csv:
            raise ConfigError(
                f"{key} applies to --dataset csv:... only, got dataset {spec.dataset!r}"
            )
    if spec.bounds is not None and not is_csv:
        raise ConfigError(f"bounds applies to --dataset csv:... only, got dataset {spec.dataset!r}")
    if spec.dask_scheduler is not None and spec.engine != "dask":
        raise ConfigError(
            f"--dask-scheduler applies with --engine dask, got --engine {spec.engine}"
        )
    method.validate(spec)
    check_rows(spec.dataset, (spec.dataset_options or {}).get("n"))  # before any run
    return method


def validate_spec(spec: RunSpec) -> Method:
    """:func:`check_spec`, then a ``csv:`` dataset's files (registered, one per party)."""
    method = check_spec(spec)
    if isinstance(spec.dataset, str) and spec.dataset.startswith(FILE_PREFIXES):
        opts = spec.dataset_options or {}
        spec.partition = register_csv_parties(
            spec.dataset,
            id_column=spec.id_column,
            label_column=opts.get("label_column"),
            categories=opts.get("categories"),
            bounds=spec.bounds,
        )
        if len(spec.partition) != spec.parties:
            raise ConfigError(
                f"parties must equal the number of CSV files "
                f"({len(spec.partition)}), got {spec.parties}"
            )
    check_memory(spec, spec.parties)  # before anything is allocated
    return method


def center_numeric_columns(
    train: Any, test: Any, facts: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """Centre each numeric column on its training mean, then rescale it into [-1, 1].

    Each party can do this on its own columns with its own data (the operation is column-wise,
    so applying it to the table equals every party applying it to its block). Test values are
    clipped to [-1, 1] so the schema's row-norm bound still holds. One-hot columns are left as
    they are: centred, a one-hot group would no longer contribute at most 1 to ||x||^2.
    Why: GLMs with a norm-bounded weight vector (HDP-VFL's clipping, FM's bounded inputs) and
    no room for an intercept learn a biased threshold on uncentred min-max scaled features.
    """
    numeric = [g[0] for g in train.groups if len(g) == 1]
    if train.columns is not None:  # X holds only some columns: their positions in X
        numeric = [int(j) for j in np.flatnonzero(np.isin(train.columns, numeric))]
    Xtr, Xte = train.X.copy(), test.X.copy()
    mean = Xtr[:, numeric].mean(axis=0)
    scale = np.abs(Xtr[:, numeric] - mean).max(axis=0)
    scale[scale == 0] = 1.0
    Xtr[:, numeric] = (Xtr[:, numeric] - mean) / scale
    Xte[:, numeric] = np.clip((Xte[:, numeric] - mean) / scale, -1.0, 1.0)
    if facts is not None:  # global column -> (mean, scale): a saved model centres new rows so
        held = np.arange(train.X.shape[1]) if train.columns is None else train.columns
        facts["center"] = {
            int(held[j]): (float(m), float(c)) for j, m, c in zip(numeric, mean, scale)
        }
    return dataclasses.replace(train, X=Xtr), dataclasses.replace(test, X=Xte)


def center_released(
    train: Any,
    test: Any,
    spec: RunSpec,
    blocks: list[np.ndarray],
    parties: list[int],
    unit: str,
    facts: dict[str, Any] | None = None,
    share: float = CENTRE_SHARE,
) -> tuple[Any, Any]:
    """Centring in a run with an ε: each party's numeric columns on their Laplace-released
    training means, scaled by the public 1 + |m~| (``privacy.centring``; the record composes
    the releases into its ε). ``parties``: the data parties whose columns this process holds."""
    numeric = np.asarray([g[0] for g in train.groups if len(g) == 1], dtype=int)
    held = np.arange(train.X.shape[1]) if train.columns is None else np.asarray(train.columns)
    Xtr, Xte = train.X.copy(), test.X.copy()
    eps_c = centring_epsilon(float(spec.epsilon), unit=unit, parties=spec.parties, share=share)
    for k in parties:
        cols = np.intersect1d(np.intersect1d(blocks[k], numeric), held)
        pos = np.searchsorted(held, cols)
        rng = make_noise_rng(noise_seed(spec), purpose="noise/centring", party=k)
        mean = released_means(Xtr[:, pos], epsilon=eps_c, rng=rng)
        Xtr[:, pos], Xte[:, pos] = centre(Xtr[:, pos], mean), centre(Xte[:, pos], mean)
        if facts is not None:  # global column -> (released mean, public scale), for new rows
            facts.setdefault("center", {}).update(
                {int(c): (float(m), 1.0 + abs(float(m))) for c, m in zip(cols, mean)}
            )
    return dataclasses.replace(train, X=Xtr), dataclasses.replace(test, X=Xte)


def build_views(
    spec: RunSpec,
    method: Method,
    wanted: list[int],
    facts: dict[str, Any] | None = None,
    *,
    rt: Runtime | None = None,
    fixed_split: bool = False,
) -> tuple[PublicInfo, dict[int, PartyView], Any]:
    """The parties in ``wanted`` take the steps before training (:mod:`securevfl.run.steps`):
    each opens its own data (metadata exchanged, rows aligned by PSI with --data files), the
    label holder's split is received, columns centred; returns the public facts, their views
    and (a method that may see pooled data only) the pooled arrays.

    ``rt``: the run's runtime (None: every party in this process, for tests and attacks).
    ``fixed_split``: the split from ``--seed`` whatever the noise (an audit's trials, a run
    that writes or resumes checkpoints).
    """
    if rt is None:
        rt = InProcessRuntime(method.n_parties(spec))
    data = open_parties(spec, method, rt, wanted)
    split_of = split_from_label_holder(spec, method, rt, fixed=fixed_split)
    train, test, test_idx = receive_split(data, split_of)
    del data.ds  # its X now holds the split's rows
    if facts is not None:
        facts["feature_names"] = list(getattr(train, "feature_names", None) or [])
        facts["test_rows"] = [int(i) for i in test_idx]  # a saved model rescores its test split
    train, test = centre_columns(spec, method, train, test, data.blocks, wanted, facts)
    info = public_info(spec, method, train, test, data.blocks)
    views = party_views(data, train, test, info, method.pooled_data)
    write_probe(data, train, test)  # tests only: what this process holds
    if not method.pooled_data:
        return info, views, _no_pooled(method)
    return info, views, pooled_arrays(train, test, info.row_norm_bound_sq)


def centre_columns(
    spec: RunSpec,
    method: Method,
    train: Any,
    test: Any,
    blocks: list[np.ndarray],
    wanted: list[int],
    facts: dict[str, Any] | None,
) -> tuple[Any, Any]:
    """Step 5: each local party centres its numeric columns (released means with a budget)."""
    if spec.center and has_budget(spec):  # the means are released under the budget
        K = spec.parties
        here = list(range(K)) if method.pooled_data else [k for k in wanted if k < K]
        return center_released(
            train, test, spec, blocks, here, method.privacy_unit, facts, method.centre_share(spec)
        )
    if spec.center:
        return center_numeric_columns(train, test, facts)
    return train, test


def _no_pooled(method: Method) -> Callable[[], Any]:
    def pooled():
        raise ConfigError(f"method {method.name!r} is federated: it may not see pooled data")

    return pooled


ViewsHook = Callable[[PublicInfo, dict[int, PartyView], Any], tuple[PublicInfo, dict, Any]]


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
    t_start = time.perf_counter()
    rss_start, cpu_start = current_rss_bytes(), cpu_seconds()
    method = validate_spec(spec)
    one_torch_thread(spec)
    own_rt = rt is None
    rt = runtime_for(spec, method, rt)
    if save is not None:  # refused before any training
        from securevfl.model.files import check_save

        check_save(save, rt.local_parties, spec, method)
    try:
        facts: dict[str, Any] = {}
        info, views, pooled = build_views(
            spec,
            method,
            rt.local_parties,
            facts,
            rt=rt,
            # an audit's trials and a resumed run must see the rows of the run they continue
            fixed_split=audit is not None or checkpoints is not None,
        )
        if views_hook is not None:
            info, views, pooled = views_hook(info, views, pooled)
        if hasattr(rt, "limit_frames"):  # networked: refuse frames over this run's largest
            rt.limit_frames(frame_limit(spec, info, method))
        if rt.view is not None:  # the recorded party's own data and the public facts
            v = rt.view.view
            v.own, v.info, v.spec = views.get(v.party), info, spec
        shared_seed = agree_seed(spec, rt)
        fit = fit_method(spec, method, rt, info, views, pooled, shared_seed, audit, checkpoints)
        if rt.view is not None and rt.view.party == info.label_party:
            rt.view.view.outputs = fit.test_scores
        if save is not None:  # every party writes only its own part, where it lives
            from securevfl.model.files import save_parts

            save_parts(
                save,
                spec,
                method,
                info,
                views,
                fit,
                facts,
                shared_seed=shared_seed,
                here_label=rt.here(info.label_party),
            )
        return collect_record(
            spec,
            method,
            rt,
            info,
            views,
            fit,
            start=(t_start, rss_start, cpu_start),
            checkpoints=checkpoints,
            audit=audit,
        )
    finally:
        if own_rt:
            rt.close()


def one_torch_thread(spec: RunSpec) -> None:
    """The models here are small: torch's intra-op threads cost far more in synchronisation
    than they gain (measured 40x slower split-NN steps with 2 threads on a loaded 2-core
    machine), and one thread per party process keeps in-process and networked timings
    comparable. A GLM run of a method whose module did not load torch never imports it."""
    if spec.model != "glm" or "torch" in sys.modules:
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
) -> Any:
    """Step 7: the method trains (the centring's share of ε set aside where it is released)."""
    fit_spec = spec
    composes = method.composes_centring(spec)  # else the record adds them (basic)
    if spec.center and has_budget(spec) and not composes:  # the means take their share
        cost = centring_reserve(float(spec.epsilon), method.centre_share(spec))
        fit_spec = dataclasses.replace(spec, epsilon=float(spec.epsilon) - cost)
    from securevfl.engine import close_engines, open_engines

    ctx = RunContext(
        rt=rt,
        spec=fit_spec,
        info=info,
        views=views,
        shared_seed=shared_seed,
        pooled=pooled if method.pooled_data else None,
        audit=audit,
        engines=open_engines(spec, [k for k in rt.local_parties if k < info.data_parties]),
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


def spec_from_dict(d: dict[str, Any]) -> RunSpec:
    """Rebuild a RunSpec from its ``__dict__`` (how the launcher hands it to party processes)."""
    return build_spec(d)


def run_in_processes(
    spec: RunSpec, *, plugins: tuple[str, ...] = (), save: str | None = None
) -> dict[str, Any]:
    """Run ``spec`` with one local OS process per party (MPyC runtime); return the record."""
    from securevfl.runtime.launcher import run_local_processes

    own = None
    if spec.dataset == OWN_CSV:
        raise ConfigError(
            "--processes starts every party: name every party's file with --dataset "
            "csv:A.csv,B.csv (each process then opens only its own), not --data"
        )
    if spec.dataset.startswith(FILE_PREFIXES):  # each process opens only its own file
        method = check_spec(spec)
        spec, own = own_files_of(spec, method)
        check_memory(spec, spec.parties)
    else:
        method = validate_spec(spec)
    n = method.n_parties(spec)
    # each party may wait up to spec.timeout per message; the whole run gets a generous bound
    overall = spec.timeout * 4 + 60
    if save is not None:
        from securevfl.model.files import check_save

        check_save(save, list(range(n)), spec, method)
    # a party imports its method's module, not every method's (torch, the accountant: ~3 s)
    module = type(method).__module__
    return run_local_processes(
        dict(spec.__dict__),
        n,
        timeout=overall,
        plugins=plugins,
        method_module="" if module == "__main__" else module,
        save=save,
        own=own,
    )


def own_files_of(spec: RunSpec, method: Method) -> tuple[RunSpec, dict[int, dict[str, Any]]]:
    """``csv:A.csv,B.csv`` as one process per party: the shared spec (dataset ``csv``) and what
    party k alone is given (its own file; the label column at the label holder only)."""
    from pathlib import Path

    from securevfl.run.steps import label_holder

    paths = file_sources(spec.dataset)
    if len(paths) != spec.parties:
        raise ConfigError(
            f"parties must equal the number of CSV files ({len(paths)}), got {spec.parties}"
        )
    if label_holder(spec, method) != 0:
        raise ConfigError(
            f"method {spec.method!r} keeps the labels at its server, not in party 0's file: "
            "run it on csv: data in one process (without --processes)"
        )
    opts = dict(spec.dataset_options or {})
    label, cats = opts.pop("label_column", None), opts.pop("categories", None)
    shared = dataclasses.replace(spec, dataset=OWN_CSV, dataset_options=opts, bounds=None)

    def absolute(p: str | None) -> str | None:
        return None if p is None else str(Path(p).resolve())

    own = {
        k: {
            "data": absolute(p),
            "bounds": absolute(spec.bounds),
            "dataset_options": {
                **({"categories": absolute(cats)} if cats else {}),
                **({"label_column": label} if k == 0 and label else {}),
            },
        }
        for k, p in enumerate(paths)
    }
    return shared, own
