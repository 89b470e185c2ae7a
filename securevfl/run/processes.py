"""A run with one local OS process per party (``--processes``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from securevfl.context import (
    RunSpec,
)
from securevfl.data.custom import (
    FILE_PREFIXES,
    file_sources,
)
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.run.checks import check_spec, validate_spec
from securevfl.run.steps import (
    OWN_CSV,
)
from securevfl.runtime.resources import check_memory


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
    keep = opts.pop("feature_column", None)
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
                **({"feature_column": keep} if keep else {}),
            },
        }
        for k, p in enumerate(paths)
    }
    return shared, own
