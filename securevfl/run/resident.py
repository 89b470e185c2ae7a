"""Steps 1-6 for a party whose table stays on its Dask engine (``--engine dask``, ``parquet:``).

The same steps as :mod:`securevfl.run.views` (open, metadata, split, centring, unit rows,
views), each done as a pass over the party's blocks on its own cluster
(:mod:`securevfl.data.resident`): the party process holds the schema, the split's positions and
(the label holder) the labels, never its rows. Each party reads only its own source. What a
party computes and releases is what the in-memory path computes from the same rows (the same
rules, ranges, released means and noise), to float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from securevfl.context import PartyView, PublicInfo, RunSpec, has_budget, noise_seed
from securevfl.data.arrow_input import is_parquet_source
from securevfl.data.bounds import read_bounds
from securevfl.data.csv_columns import read_categories
from securevfl.data.custom import file_sources, label_task, register_own_schema
from securevfl.data.datasets import Dataset, DatasetInfo
from securevfl.data.resident import ResidentTable, fit_ranges, open_resident, scaled
from securevfl.data.saved_encoder import rules_to_json
from securevfl.data.split import check_split
from securevfl.engine import EngineRows, local_workers
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.privacy.centring import centre, centring_epsilon, noisy_means
from securevfl.rng import make_noise_rng
from securevfl.run.dp_ranges import dp_ranges_of
from securevfl.run.open_data import exchange_metadata
from securevfl.run.parties import Party, _parties, label_holder, own_files
from securevfl.run.steps import public_info, split_from_label_holder
from securevfl.runtime.base import Runtime

# methods whose products on a party's rows are X w, Xᵀ g, Xᵀ X, a stream of its row blocks
# or its minibatches' rows (he-vfl encodes them: ``DaskEngine.rows``)
RESIDENT_METHODS = ("hdp-vfl", "fm-vfl", "he-vfl")
Step = Callable[[np.ndarray], np.ndarray]


def resident_run(spec: RunSpec, method: Method) -> bool:
    """Whether each party's table stays on its engine in this run."""
    if getattr(spec, "engine", "numpy") != "dask" or method.name not in RESIDENT_METHODS:
        return False
    if own_files(spec):  # one party's own source (--data; what --processes runs)
        return spec.data is not None and is_parquet_source(spec.data)
    return isinstance(spec.dataset, str) and spec.dataset.startswith("parquet:")


def _sources(spec: RunSpec, mine: list[int]) -> dict[int, str]:
    """Each local data party's own source."""
    if own_files(spec):
        return {k: str(spec.data) for k in mine}
    every = file_sources(spec.dataset)
    return {k: every[k] for k in mine}


def check_resident(spec: RunSpec) -> None:
    """What the engine-resident path refuses (one line each), before any file is read."""
    if spec.id_column is not None:
        raise ConfigError(
            "--id-column with --engine dask needs the whole ID column in one process: align "
            "the files first (securevfl align), then run on the aligned Parquet"
        )
    n_files = 1 if own_files(spec) else len(file_sources(spec.dataset))
    if not own_files(spec) and n_files != spec.parties:
        raise ConfigError(
            f"parties must equal the number of Parquet sources ({n_files}), got {spec.parties}"
        )


def prepare_resident(
    spec: RunSpec, method: Method, wanted: list[int], facts: dict[str, Any] | None, rt: Runtime
) -> tuple[PublicInfo, dict[int, Party], Callable[[], Any]]:
    """:func:`securevfl.run.views.prepare_parties` for tables that stay on their engines."""
    from securevfl.engine import DaskEngine

    K, holder = spec.parties, label_holder(spec, method)
    opts = spec.dataset_options or {}
    mine = [k for k in wanted if k < K]
    sources = _sources(spec, mine)
    dp = None if spec.bounds is not None else dp_ranges_of(spec, method)
    declared = None if spec.bounds is None else read_bounds(spec.bounds)
    cats = read_categories(opts.get("categories"))
    tables: dict[int, ResidentTable] = {}
    public: dict[int, dict] = {}
    y = classes = None
    workers = local_workers(len(mine))
    for k in mine:
        engine = DaskEngine(spec.dask_scheduler, workers=workers, timeout=spec.timeout)
        label = (opts.get("label_column") or "label") if k == holder else None
        t, labels = open_resident(
            k, sources[k], engine, label=label, categories=cats,
            feature_column=opts.get("feature_column"),
        )  # fmt: skip
        exact = fit_ranges(t, declared, None if dp is None else dp(k))
        tables[k] = t
        public[k] = {
            "rows": t.n,
            "columns": len(t.names),
            "names": list(t.names),
            "fitted": exact,
            "dp_bounds": dp is not None,
        }
        if labels is not None:
            classes, y = labels  # the distinct labels, each row's index into them
            task = label_task(classes)  # the rule looks at the distinct values only
            if task == "regression":
                raise ConfigError(
                    "--engine dask with a parquet: source takes a binary or multiclass label, "
                    "got a regression target: run it with --engine numpy"
                )
            if task == "binary" and len(classes) != 2:
                raise ConfigError(f"a binary task needs 2 label values, got {len(classes)}")
            public[k].update(task=task, n_classes=len(classes))
    meta = exchange_metadata(rt, public, K)
    counts = [meta[k]["columns"] for k in range(K)]
    starts = np.cumsum([0, *counts])
    blocks = [np.arange(starts[k], starts[k + 1]) for k in range(K)]
    total, n = int(starts[-1]), int(meta[0]["rows"])
    groups = [[j] for j in range(total)]
    register_own_schema(
        spec.dataset,
        {
            k: (
                t.reader.header,
                t.ranges,
                None if classes is None else classes.tolist(),
                rules_to_json(list(t.reader.rules)),
            )
            for k, t in tables.items()
        },  # fmt: skip
        blocks,
        None,
        [meta[k]["names"] for k in range(K)],
    )
    train_idx, test_idx = check_split(n, *split_from_label_holder(spec, method, rt)(n))
    if facts is not None:
        facts["feature_names"] = [f"x{j}" for j in range(total)]
        facts["test_rows"] = test_idx  # an array: a list of n/5 Python ints is ~36 bytes a row
    fitted = tuple(
        f"scaling ranges (min/max) of party {k}'s {counts[k]} Parquet columns (no --bounds)"
        for k in range(K)
        if meta[k]["fitted"]
    )
    bound_sq = float(total)  # every column its own group of norm <= 1 (schema_norm_bound)
    views: dict[int, PartyView] = {}
    for k, t in tables.items():
        step = _prepared(spec, method, t, train_idx, math.sqrt(bound_sq), facts, blocks[k])
        table, take = t.array(step), t.taker(step)
        views[k] = PartyView(
            index=k,
            columns=blocks[k],
            X_train=EngineRows(table, train_idx, t.engine, take),
            X_test=EngineRows(table, test_idx, t.engine, take),
        )
        if k == holder:
            views[k].y_train, views[k].y_test = y[train_idx], y[test_idx]
    info = public_info(
        spec,
        method,
        _dataset(spec, meta, holder, train_idx, groups, fitted, total),
        _dataset(spec, meta, holder, test_idx, groups, fitted, total),
        blocks,
    )
    if not math.isclose(info.row_norm_bound_sq, bound_sq):
        raise AssertionError("row norm bound: every column must be a group of its own")
    parties = _parties(wanted, blocks, holder, f"Parquet {spec.dataset} on its engine")
    for k, p in parties.items():
        p.view = views.get(k)
    return info, parties, _federated(method)


def _prepared(
    spec: RunSpec,
    method: Method,
    t: ResidentTable,
    train_idx: np.ndarray,
    norm: float,
    facts: dict[str, Any] | None,
    cols: np.ndarray,
) -> Step:
    """Each block's steps after the rules: scaling, centring (step 5), unit rows (step 6)."""
    scale = scaled(t)
    if not spec.center:
        return lambda X: scale(X) / norm
    engine = t.engine
    X = t.array(scale)
    mask = np.zeros(t.n, dtype=bool)  # 1 byte a row; X.T @ m reads it as 0.0/1.0
    mask[train_idx] = True
    m = engine._column(mask, X.chunks[0])
    mean = engine._result(X.T @ m) / len(train_idx)
    if has_budget(spec):  # the means are released under the budget (centring.center_released)
        eps_c = centring_epsilon(
            float(spec.epsilon),
            unit=method.privacy_unit,
            parties=spec.parties,
            share=method.centre_share(spec),
        )
        rng = make_noise_rng(noise_seed(spec), purpose="noise/centring", party=t.reader.party)
        released = noisy_means(mean, rows=len(train_idx), epsilon=eps_c, rng=rng)
        if facts is not None:
            facts.setdefault("center", {}).update(
                {int(c): (float(v), 1.0 + abs(float(v))) for c, v in zip(cols, released)}
            )
        return lambda X: centre(scale(X), released) / norm
    import dask.array as da  # centring.center_numeric_columns: the training mean, max |x - m|

    dev = engine._result(da.max(abs(X - mean) * m[:, None], axis=0))
    dev[dev == 0] = 1.0
    if facts is not None:
        facts["center"] = {int(c): (float(a), float(b)) for c, a, b in zip(cols, mean, dev)}
    return lambda X: np.clip((scale(X) - mean) / dev, -1.0, 1.0) / norm


def _dataset(
    spec: RunSpec,
    meta: dict[int, dict],
    holder: int,
    rows: np.ndarray,
    groups: list[list[int]],
    fitted: tuple[str, ...],
    total: int,
) -> Dataset:
    """The public facts of one side of the split, as the steps' Dataset (no values)."""
    task = meta[holder]["task"]
    info = DatasetInfo(
        spec.dataset, int(meta[0]["rows"]), total, task, "each party's own Parquet",
        "user's own", "user data", False,
    )  # fmt: skip
    return Dataset(
        name=spec.dataset,
        task=task,
        X=np.zeros((len(rows), 0)),  # a view's rows live on its engine
        y=None,
        feature_names=[f"x{j}" for j in range(total)],
        groups=groups,
        n_classes=meta[holder]["n_classes"],
        info=info,
        fitted=fitted,
        dp_bounds=tuple(k for k in meta if meta[k].get("dp_bounds")),
    )


def _federated(method: Method) -> Callable[[], Any]:
    def pooled():
        raise ConfigError(f"method {method.name!r} is federated: it may not see pooled data")

    return pooled
