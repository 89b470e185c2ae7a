"""The checks before a run: every rule that needs no data, then a ``csv:`` dataset's files and
the memory the run will take.
"""

from __future__ import annotations

from securevfl.context import (
    RunSpec,
)
from securevfl.data import check_rows
from securevfl.data.custom import (
    CSV_KEYS,
    FILE_PREFIXES,
    is_csv_dataset,
    register_csv_parties,
)
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.registry import create
from securevfl.run.dp_ranges import dp_ranges_of
from securevfl.run.steps import (
    OWN_CSV,
)
from securevfl.run_options import check_common
from securevfl.runtime.resources import check_memory


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
    from securevfl.run.resident import check_resident, resident_run

    if resident_run(spec, method):  # each party reads its own source, on its engine
        check_resident(spec)
    elif isinstance(spec.dataset, str) and spec.dataset.startswith(FILE_PREFIXES):
        opts = spec.dataset_options or {}
        spec.partition = register_csv_parties(
            spec.dataset,
            id_column=spec.id_column,
            label_column=opts.get("label_column"),
            categories=opts.get("categories"),
            bounds=spec.bounds,
            dp=dp_ranges_of(spec, method),
            feature_column=opts.get("feature_column"),
        )
        if len(spec.partition) != spec.parties:
            raise ConfigError(
                f"parties must equal the number of CSV files "
                f"({len(spec.partition)}), got {spec.parties}"
            )
    check_memory(spec, spec.parties)  # before anything is allocated
    return method
