"""Tests only: what a process holds once its views are built (``$SECUREVFL_PROBE_DIR``)."""

from __future__ import annotations

import numpy as np

from securevfl.data.datasets import Dataset
from securevfl.run.parties import LocalData

PROBE_ENV = "SECUREVFL_PROBE_DIR"  # tests: where each process writes what it holds


def write_probe(data: LocalData, train: Dataset, test: Dataset) -> None:
    """Tests only (``$SECUREVFL_PROBE_DIR`` set): write what this process holds once its views
    are built: each local party's columns and whether it holds labels, and the sha256 of every
    numeric array reachable from a live object, so a test can check that a data party's
    process holds no label vector and no other party's block."""
    import gc
    import hashlib
    import json
    import os

    where = os.environ.get(PROBE_ENV)
    if not where:
        return
    arrays: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        for a in gc.get_referents(obj):
            if isinstance(a, np.ndarray) and a.dtype.kind in "iuf" and a.size:
                h = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
                arrays[h] = list(a.shape)
    doc = {
        "parties": {
            str(k): {
                "source": p.source,
                "columns": [int(c) for c in p.columns],
                "holds_labels": p.holds_labels,
                "view_labels": p.view is not None and p.view.y_train is not None,
            }
            for k, p in data.parties.items()
        },
        "train_labels": train.y is not None,
        "arrays": arrays,
    }
    name = "_".join(str(k) for k in data.parties) or "none"
    with open(os.path.join(where, f"probe_{name}.json"), "w") as f:
        json.dump(doc, f)
