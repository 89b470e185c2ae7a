"""Steps 1-3 of a run: every local party opens its own data (a catalogue dataset's block, or its
own CSV file), the parties exchange public metadata, rows are aligned by PSI with an ID column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from securevfl.context import RunSpec
from securevfl.data import load_dataset
from securevfl.data.bounds import DpRanges
from securevfl.data.custom import CSV_KEYS, register_own_schema
from securevfl.data.datasets import Dataset, DatasetInfo
from securevfl.data.own_csv import OwnFile, open_own_files
from securevfl.errors import ConfigError, DataError
from securevfl.methods.base import Method
from securevfl.run.dp_ranges import bounds_plan, party_rng
from securevfl.run.parties import (
    OWN_CSV,
    LocalData,
    _parties,
    label_holder,
    own_files,
    party_blocks,
)
from securevfl.runtime.base import Runtime


def open_parties(spec: RunSpec, method: Method, rt: Runtime, wanted: list[int]) -> LocalData:
    """Step 1-3: every local party opens its own data; metadata and (with an ID column) PSI
    are exchanged with the peers inside (SPMD: every process calls this)."""
    if own_files(spec):
        return _open_own_files(spec, method, rt, wanted)
    return _open_catalogue(spec, method, wanted)


def _open_catalogue(spec: RunSpec, method: Method, wanted: list[int]) -> LocalData:
    seed = 0 if spec.seed is None else spec.seed  # synthetic data and the partition are public
    K = spec.parties

    def keep(groups: list[list[int]]) -> np.ndarray:
        blocks = party_blocks(groups, spec, seed)
        if method.pooled_data:
            return np.arange(sum(len(g) for g in groups))
        mine = [blocks[k] for k in wanted if k < K]
        return np.unique(np.concatenate(mine)) if mine else np.arange(0)

    opts = {k: v for k, v in spec.dataset_options.items() if k not in CSV_KEYS}
    ds = load_dataset(spec.dataset, seed=seed, keep=keep, **opts)
    holder = label_holder(spec, method)
    if holder not in wanted and not method.pooled_data:
        from securevfl.data.real import clear_caches

        ds.y = None  # a process without the label holder keeps no label (the loader read them)
        clear_caches()  # nor the whole table the loader cached
    blocks = party_blocks(ds.groups, spec, seed)
    parties = _parties(wanted, blocks, holder, f"dataset {spec.dataset}")
    return LocalData(ds=ds, blocks=blocks, parties=parties)


def _open_own_files(spec: RunSpec, method: Method, rt: Runtime, wanted: list[int]) -> LocalData:
    K, holder = spec.parties, label_holder(spec, method)
    if holder != 0:
        raise ConfigError(
            f"method {spec.method!r} keeps the labels at its server; with --data files the "
            "labels stay in party 0's file: run it with --dataset csv:... in one process"
        )
    mine = [k for k in wanted if k < K]
    if len(mine) > 1:
        raise ConfigError(
            f"--data is one party's own file, got a process holding parties {mine}: start each "
            "party with `securevfl party`, or name every file with --dataset csv:A.csv,B.csv"
        )
    if mine and spec.data is None:
        raise ConfigError(f"party {mine[0]} must name its own data file with --data, got none")
    opts = spec.dataset_options or {}
    plan = bounds_plan(spec, method)  # without --bounds in a run with an ε: DP ranges
    files = {
        k: OwnFile(
            str(spec.data),
            opts.get("label_column"),
            opts.get("categories"),
            spec.bounds,
            dp=None if plan is None else DpRanges(plan, party_rng(plan, k)),
            feature_column=opts.get("feature_column"),
        )
        for k in mine
    }
    own = open_own_files(rt, files, id_column=spec.id_column, data_parties=K, label_party=holder)
    meta = exchange_metadata(rt, {k: b.public() for k, b in own.items()}, K)
    counts = [meta[k]["columns"] for k in range(K)]
    starts = np.cumsum([0, *counts])
    blocks = [np.arange(starts[k], starts[k + 1]) for k in range(K)]
    total = int(starts[-1])
    alignment = own[0].alignment if 0 in own else None
    schema = {k: (b.header, b.scaling, b.classes, b.encoder) for k, b in own.items()}
    names = [meta[k]["names"] for k in range(K)]
    register_own_schema(spec.dataset, schema, blocks, alignment, names)
    X = own[mine[0]].X if mine else np.zeros((meta[0]["rows"], 0))
    held = blocks[mine[0]] if mine else np.arange(0, dtype=int)
    y = own[holder].y if holder in own else None
    task = meta[holder]["task"]
    fitted = [
        f"scaling ranges (min/max) of party {k}'s {counts[k]} CSV columns (no --bounds)"
        for k in range(K)
        if meta[k]["fitted"]
    ]
    dp_bounds = tuple(k for k in range(K) if meta[k].get("dp_bounds"))
    if meta[holder].get("target_fitted"):
        fitted.append("scaling range (min/max) of the regression target")
    info = DatasetInfo(
        OWN_CSV,
        int(X.shape[0]),
        total,
        task,
        "each party's own file",
        "user's own",
        "user data",
        False,
    )
    ds = Dataset(
        name=OWN_CSV,
        task=task,
        X=np.ascontiguousarray(X),
        y=y,
        feature_names=[f"x{j}" for j in range(total)],
        groups=[[j] for j in range(total)],
        n_classes=meta[holder]["n_classes"],
        info=info,
        columns=held,
        fitted=tuple(fitted),
        dp_bounds=dp_bounds,
    )
    source = f"file {Path(spec.data).name}" if spec.data else "none (server)"
    parties = _parties(wanted, blocks, holder, source)
    return LocalData(ds=ds, blocks=blocks, parties=parties, alignment=alignment)


def exchange_metadata(rt: Runtime, mine: dict[int, dict], data_parties: int) -> dict[int, dict]:
    """Step 2: each data party's public facts, gathered at party 0 and sent to every party
    (unmetered control plane: counts and names, no values). Row counts must agree."""
    got = rt.collect(mine, dst=0)
    merged = None
    if got is not None:
        merged = {}
        for d in got.values():
            merged.update({int(k): v for k, v in d.items()})
    meta = rt.control(merged, src=0)
    meta = {int(k): v for k, v in meta.items()}
    if sorted(meta) != list(range(data_parties)):
        raise ConfigError(
            f"every data party must open its own file, got files from parties {sorted(meta)}"
        )
    rows = [meta[k]["rows"] for k in range(data_parties)]
    for k, n in enumerate(rows):
        if n != rows[0]:
            raise DataError(
                f"every party must hold the same samples: party {k} has {n} rows, party 0 "
                f"has {rows[0]} (align them by an ID column: --id-column)"
            )
    return meta
