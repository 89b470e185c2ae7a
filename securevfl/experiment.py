"""Run one method on one dataset and build its result record.

The same function runs in every process of a networked run (SPMD): each process loads the data,
keeps only the columns of the parties that live there, and the label holder returns the record.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from securevfl.context import AuditTap, PartyView, PublicInfo, RunContext, RunSpec
from securevfl.data import (
    check_rows,
    load_dataset,
    partition_columns,
    scale_block_to_unit_rows,
    schema_norm_bound,
    split_in_place,
)
from securevfl.data.custom import (
    CSV_KEYS,
    CSV_PREFIX,
    alignment_of,
    register_csv_parties,
)
from securevfl.disclosure import (
    FINGERPRINT_WITHHELD,
    guarded,
    has_budget,
    noise_seed,
    scrub_record,
)
from securevfl.errors import ConfigError
from securevfl.evaluation import metrics_for
from securevfl.methods.base import Method
from securevfl.outcome import finite_values, outcome_warnings
from securevfl.privacy.centring import (
    CENTRE_SHARE,
    centre,
    centring_epsilon,
    compose_into,
    released_means,
)
from securevfl.privacy.centring import reserve as centring_reserve
from securevfl.registry import create
from securevfl.resources import check_memory, cpu_seconds, current_rss_bytes, peak_rss_bytes
from securevfl.rng import make_noise_rng, noise_generator_name
from securevfl.run_options import build_spec, check_common
from securevfl.runtime.base import Runtime
from securevfl.runtime.frame_limits import frame_limit
from securevfl.runtime.inprocess import InProcessRuntime
from securevfl.version import __version__


def check_spec(spec: RunSpec) -> Method:
    """Every rule that needs no data: options, generic fields, the method's own (ConfigError).

    A party process calls this before it connects, so a bad spec never waits for peers."""
    method: Method = create("method", spec.method)
    check_common(spec, min_parties=1 if method.pooled_data else 2)
    is_csv = isinstance(spec.dataset, str) and spec.dataset.startswith(CSV_PREFIX)
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
    method.validate(spec)
    check_rows(spec.dataset, (spec.dataset_options or {}).get("n"))  # before any run
    return method


def validate_spec(spec: RunSpec) -> Method:
    """:func:`check_spec`, then a ``csv:`` dataset's files (registered, one per party)."""
    method = check_spec(spec)
    if isinstance(spec.dataset, str) and spec.dataset.startswith(CSV_PREFIX):
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


def preprocessing_disclosure(spec: RunSpec, fitted: tuple[str, ...]) -> list[str]:
    """The data-dependent preprocessing that no ε covers: what the loader fitted on the rows
    (``Dataset.fitted``: a column's min/max where no public domain is known) and, for centring
    without a budget, the training means. Empty when scaling is from public domains and
    centring is released under the budget (the default of every catalogue dataset)."""
    out = []
    if fitted:
        shown = "; ".join(fitted[:3]) + (f"; and {len(fitted) - 3} more" if len(fitted) > 3 else "")
        out.append(
            f"computed from the rows and treated as public: {shown} (declare public domains: "
            "--bounds for csv data)"
        )
    if spec.center and not has_budget(spec):
        out.append("training means (centring) are computed from the data and treated as public")
    return out


def party_blocks(groups: list[list[int]], spec: RunSpec, seed: int) -> list[np.ndarray]:
    """Each data party's columns (global indices): one block for a pooled one-party run."""
    if spec.parties == 1:  # a pooled baseline run with one party: it holds every column
        return [np.arange(sum(len(g) for g in groups))]
    scheme: Any = spec.partition
    if scheme == "roles":  # the dataset's declared holders (a public declaration)
        from securevfl.data.datasets import role_blocks

        scheme = role_blocks(
            spec.dataset, spec.dataset_options.get("encoding"), groups, spec.parties
        )
    return partition_columns(groups, spec.parties, scheme=scheme, seed=seed)


def build_views(
    spec: RunSpec, method: Method, wanted: list[int], facts: dict[str, Any] | None = None
) -> tuple[PublicInfo, dict[int, PartyView], Any]:
    """Load, split, partition and bound the data; return the views of the parties in ``wanted``.

    This process holds only the columns of its own parties (every column for a method that may
    see pooled data): a party's memory grows with its share of the table, not the whole table.
    Every party holds the labels while the public row split is drawn (it is stratified by
    class); only the label holder keeps them in its view.
    """
    seed = 0 if spec.seed is None else spec.seed  # the split is public, not private randomness
    K = spec.parties

    def keep(groups: list[list[int]]) -> np.ndarray:
        blocks = party_blocks(groups, spec, seed)
        if method.pooled_data:
            return np.arange(sum(len(g) for g in groups))
        mine = [blocks[k] for k in wanted if k < K]
        return np.unique(np.concatenate(mine)) if mine else np.arange(0)

    opts = {k: v for k, v in spec.dataset_options.items() if k not in CSV_KEYS}  # read above
    ds = load_dataset(spec.dataset, seed=seed, keep=keep, **opts)
    blocks = party_blocks(ds.groups, spec, seed)
    train, test = split_in_place(ds, seed=seed)  # the same rows as train_test_split, no copy
    name, task, n_classes, groups, held = ds.name, ds.task, ds.n_classes, ds.groups, ds.columns
    fitted = ds.fitted
    del ds  # its X now holds the split's rows
    if facts is not None:
        facts["feature_names"] = list(getattr(train, "feature_names", None) or [])
    if spec.center and has_budget(spec):  # the means are released under the budget
        here = list(range(K)) if method.pooled_data else [k for k in wanted if k < K]
        train, test = center_released(
            train, test, spec, blocks, here, method.privacy_unit, facts, method.centre_share(spec)
        )
    elif spec.center:
        train, test = center_numeric_columns(train, test, facts)
    bound_sq = sum(schema_norm_bound(groups, b) for b in blocks)
    server = K if method.has_server(spec) else None
    label_party = server if (method.labels_at_server and server is not None) else 0
    n_parties = method.n_parties(spec)
    info = PublicInfo(
        dataset=name,
        task=task,
        n_classes=n_classes,
        n_train=len(train.y),
        n_test=len(test.y),
        n_features=sum(len(g) for g in groups),
        features_per_party=tuple(len(b) for b in blocks),
        data_parties=K,
        n_parties=n_parties,
        label_party=label_party,
        server=server,
        row_norm_bound_sq=bound_sq,
        fitted=tuple(fitted),
    )
    views: dict[int, PartyView] = {}
    for k in wanted:
        cols = blocks[k] if k < K else np.arange(0, dtype=int)
        pos = cols if held is None else np.searchsorted(held, cols)
        # a process's only data party owns the split's arrays: scale them where they are
        alone = (
            not method.pooled_data
            and train.X.dtype == np.float64
            and np.array_equal(pos, np.arange(train.X.shape[1]))
        )
        views[k] = PartyView(
            index=k,
            columns=cols,
            X_train=_unit_rows(train.X, None if alone else pos, bound_sq),
            X_test=_unit_rows(test.X, None if alone else pos, bound_sq),
        )
        if k == label_party:
            views[k].y_train, views[k].y_test = train.y, test.y
    if not method.pooled_data:
        return info, views, _no_pooled(method)

    def pooled():
        s = np.sqrt(bound_sq)
        return train.X / s, train.y, test.X / s, test.y

    return info, views, pooled


def _unit_rows(X: np.ndarray, pos: np.ndarray | None, bound_sq: float) -> np.ndarray:
    """Columns ``pos`` of X scaled to unit rows; ``pos=None``: all of X, scaled in place.

    Always C-ordered: BLAS sums in an order that depends on the layout, and a party must compute
    bit for bit the same in-process as in its own process (same fingerprints)."""
    if pos is not None:
        return np.ascontiguousarray(scale_block_to_unit_rows(X[:, pos], total_bound_sq=bound_sq))
    return np.ascontiguousarray(np.divide(X, math.sqrt(bound_sq), out=X))  # no copy if C-ordered


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
    (:mod:`securevfl.model_io`). ``checkpoints``: a :class:`securevfl.checkpoint.Checkpoints`
    (write every N epochs / resume), None: off.
    ``audit``: a trial of ``securevfl audit`` (fresh noise; maybe deliberately under-noised).
    """
    t_start = time.perf_counter()
    rss_start, cpu_start = current_rss_bytes(), cpu_seconds()
    method = validate_spec(spec)
    # The models here are small: torch's intra-op threads cost far more in synchronisation than
    # they gain (measured 40x slower split-NN steps with 2 threads on a loaded 2-core machine),
    # and one thread per party process keeps in-process and networked timings comparable. A GLM
    # run of a method whose module did not load torch never imports it (~1.8 s a process).
    if spec.model != "glm" or "torch" in sys.modules:
        import torch

        torch.set_num_threads(1)
    own_rt = rt is None
    if rt is None:
        rt = InProcessRuntime(method.n_parties(spec))
    elif rt.n_parties != method.n_parties(spec):
        raise ConfigError(
            f"runtime must have {method.n_parties(spec)} parties for {spec.method!r} "
            f"with {spec.parties} data parties, got {rt.n_parties}"
        )
    if save is not None:  # refused before any training
        from securevfl.model_io import check_save

        check_save(save, rt.local_parties, spec, method)
    try:
        facts: dict[str, Any] = {}
        info, views, pooled = build_views(spec, method, rt.local_parties, facts)
        if views_hook is not None:
            info, views, pooled = views_hook(info, views, pooled)
        if hasattr(rt, "limit_frames"):  # networked: refuse frames over this run's largest
            rt.limit_frames(frame_limit(spec, info, method))
        if rt.view is not None:  # the recorded party's own data and the public facts
            v = rt.view.view
            v.own, v.info, v.spec = views.get(v.party), info, spec
        shared_seed = (
            spec.seed
            if spec.seed is not None
            else rt.control(secrets.randbits(62) if rt.here(0) else None, src=0)
        )
        fit_spec = spec
        composes = method.composes_centring(spec)  # else the record adds them (basic)
        if spec.center and has_budget(spec) and not composes:  # the means take their share
            cost = centring_reserve(float(spec.epsilon), method.centre_share(spec))
            fit_spec = dataclasses.replace(spec, epsilon=float(spec.epsilon) - cost)
        ctx = RunContext(
            rt=rt,
            spec=fit_spec,
            info=info,
            views=views,
            shared_seed=int(shared_seed),
            pooled=pooled if method.pooled_data else None,
            audit=audit,
        )
        # numpy's overflow/invalid warnings would add unexplained lines to the output; what they
        # can mean (a non-finite or constant result) is judged by outcome_warnings below
        from securevfl import checkpoint

        token = checkpoint.activate(checkpoints)
        try:
            with np.errstate(all="ignore"):
                fit = method.fit(ctx)
        finally:
            checkpoint.deactivate(token)
        if checkpoints is not None and not checkpoints.used:
            raise ConfigError(
                f"--checkpoint-every/--resume do not apply to method {spec.method!r}: it does "
                "not train with the GLM or split-NN trainer's epochs"
            )
        if rt.view is not None and rt.view.party == info.label_party:
            rt.view.view.outputs = fit.test_scores
        if save is not None:  # every party writes only its own part, where it lives
            from securevfl.model_io import save_parts

            save_parts(
                save,
                spec,
                method,
                info,
                views,
                fit,
                facts,
                shared_seed=int(shared_seed),
                here_label=rt.here(info.label_party),
            )
        # a budgeted run's fingerprints hash exact weights: they stay with their owners
        fingerprints = rt.collect({} if guarded(spec) else fit.fingerprints, dst=info.label_party)
        meters = rt.collect(rt.meter.export(), dst=info.label_party)
        used = (rss_start, peak_rss_bytes(), cpu_seconds() - cpu_start)
        peaks = rt.collect(used, dst=info.label_party)  # unmetered
        if peaks is not None:
            fit.stats.start_rss_bytes = {str(k): int(v[0]) for k, v in sorted(peaks.items())}
            fit.stats.peak_rss_bytes = {str(k): int(v[1]) for k, v in sorted(peaks.items())}
        if not rt.here(info.label_party):
            return None
        if meters is not None and len(rt.local_parties) < rt.n_parties:
            from securevfl.runtime.channel import Meter

            merged = Meter()
            for m in {id(v): v for v in meters.values()}.values():
                merged.merge(m)
            comm = merged.summary(rt.n_parties)
        else:
            comm = rt.meter.summary(rt.n_parties)
        fps: dict[str, str] = {}
        for d in (fingerprints or {}).values():
            fps.update({str(k): v for k, v in d.items()})
        y_test = views[info.label_party].y_test
        metrics = metrics_for(info.task, y_test, fit.test_scores)
        record = {
            "method": spec.method,
            "family": method.family,
            "capabilities": method.capabilities(spec.model),
            "dataset": spec.dataset,
            "parties": spec.parties,
            "n_train": info.n_train,
            "n_test": info.n_test,
            "n_features": info.n_features,
            "features_per_party": list(info.features_per_party),
            "metrics": metrics,
            # the accuracy of always answering the test split's most common class: the floor
            # a report marks every method against (None for regression)
            "majority_class_rate": majority_class_rate(info.task, y_test),
            "threat_model": threat_model_ref(spec.method),
            "time": {
                "train_s": round(fit.train_s, 6),
                "total_s": round(time.perf_counter() - t_start, 6),
                # every party's CPU, from setup to scoring (one process in-process: its own)
                "cpu_s": round(
                    sum(v[2] for v in peaks.values())
                    if len(rt.local_parties) < rt.n_parties
                    else used[2],
                    6,
                ),
            },
            "comm": comm,
            "privacy": fit.privacy.to_dict() if fit.privacy is not None else None,
            "config": spec.to_config(),
            "runtime": "inprocess" if len(rt.local_parties) == rt.n_parties else "processes",
            "noise_seeded": noise_seed(spec) is not None,
            "noise_generator": noise_generator_name(noise_seed(spec)),
            "model_fingerprint": fps,
            **({"fingerprint_withheld": FINGERPRINT_WITHHELD} if guarded(spec) else {}),
            "stats": fit.stats.to_dict(),
            "extra": fit.extra,
            "alignment": alignment_of(spec.dataset) if spec.id_column else None,
            **({"view": rt.view.view.summary()} if rt.view is not None else {}),
            "version": __version__,
            "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        if record["privacy"] is not None and spec.center and has_budget(spec) and not composes:
            # a resumed run under the CSPRNG: every earlier run's centring was a release too
            again = 0 if checkpoints is None else checkpoints.centrings_again
            for _ in range(1 + again):
                record["privacy"] = compose_into(
                    record["privacy"],
                    epsilon=float(spec.epsilon),
                    unit=method.privacy_unit,
                    parties=spec.parties,
                    share=method.centre_share(spec),
                )
        if record["privacy"] is not None:  # every DP record says what no ε covers here
            record["privacy"]["threat_model"] = record["threat_model"]
            record["privacy"]["outside_guarantee"] = [
                *record["privacy"].get("outside_guarantee", []),
                *preprocessing_disclosure(spec, info.fitted),
            ]
        scrub_record(record, spec, label_party=info.label_party)  # what may not be in it, or no ε
        at = f" at ε = {spec.epsilon:g}" if spec.epsilon is not None else ""
        warnings = fit.stats.warnings + outcome_warnings(
            info.task,
            fit.test_scores,
            metrics,
            record["privacy"],
            y_test=y_test,
            setting=f"{spec.method}{at} on {info.n_train} training rows",
        )
        if audit is not None and audit.noise_divisor != 1.0:  # the record marks the variant
            record["audit_noise_divisor"] = audit.noise_divisor
            warnings.append(
                f"audit variant: the DP noise was divided by {audit.noise_divisor:g}, so the "
                "reported ε does not hold for this run"
            )
        if warnings:  # a result that looks fine but is not says so (printed by the CLI)
            record["stats"]["warnings"] = warnings
        return finite_values(record)  # strict JSON: a non-finite number is null (and warned)
    finally:
        if own_rt:
            rt.close()


def majority_class_rate(task: str, y_test: np.ndarray | None) -> float | None:
    """The test accuracy of always predicting the most common test class (classification)."""
    if task == "regression" or y_test is None or len(y_test) == 0:
        return None
    counts = np.unique(np.asarray(y_test), return_counts=True)[1]
    return round(float(counts.max()) / len(y_test), 6)


def threat_model_ref(method: str) -> str:
    """Where the method's adversary, collusion and who-sees-what are stated."""
    return f"docs/threat-model.md#{method}"


def spec_from_dict(d: dict[str, Any]) -> RunSpec:
    """Rebuild a RunSpec from its ``__dict__`` (how the launcher hands it to party processes)."""
    return build_spec(d)


def run_in_processes(
    spec: RunSpec, *, plugins: tuple[str, ...] = (), save: str | None = None
) -> dict[str, Any]:
    """Run ``spec`` with one local OS process per party (MPyC runtime); return the record."""
    from securevfl.runtime.launcher import run_local_processes

    method = validate_spec(spec)
    n = method.n_parties(spec)
    # each party may wait up to spec.timeout per message; the whole run gets a generous bound
    overall = spec.timeout * 4 + 60
    if save is not None:
        from securevfl.model_io import check_save

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
    )
