"""Issue 42 item 1: a record does not tell neighbouring datasets apart outside the noise.

Every DP method's relation is replace-one (n public): the neighbour of a training set is the
same set with one row changed. For every DP method two runs with the same seed, one with training
row 0's label flipped and one with row 0 replaced by row 1 (every block and the label), are
neighbours of each other; their records must agree on every field except the ones listed in
:data:`NOISY`: values that depend on the noise (or on the CSPRNG-drawn split) by design.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_privacy_boundaries import SMALL

from securevfl.experiment import run_experiment
from securevfl.run_options import build_spec

# what may differ between two runs of the same spec: outputs of the noisy model on test rows
# (metrics; the test split's class share; the accuracy ceiling, from the test rows' classes),
# run times and memory, the outcome warnings about the noisy model, the timestamp
NOISY = {
    "metrics",
    "majority_class_rate",
    "time",
    "timestamp",
    "stats",
    "extra.auprc",
    "extra.accuracy_ceiling",
    "extra.head_s",
    "extra.mpc_s",
    "extra.mpc.secure_s",
    "extra.mpc.cpu_s",
    "extra.mpc.peak_rss_mb",
    "extra.mpc.wall_s",
    "extra.mpc.phases_s",
    "extra.mpc.entry_spread_s",
    "extra.phases_s",
    "extra.pbm_party_ms_median",
    "extra.secagg_server_ms",
}


# per method: secureboost-dp's trees (node count, splits per party, and the bytes that follow
# them) are picked on the partners' noisy sums and the label holder's own exact gradients, and
# the row partitions go back exactly: its record lists the label holder's labels and the
# partitions outside its party-row guarantee
ALSO_NOISY = {
    "secureboost-dp": frozenset({"comm", "extra.nodes", "extra.splits_by_party"}),
}


def neighbour(kind: str):
    """A ``views_hook`` changing training row 0: ``label`` flips its label, ``row`` replaces
    its columns (every block) and label by row 1's."""

    def change(X: np.ndarray | None, y: np.ndarray | None):
        if X is not None and kind == "row":
            X = X.copy()
            X[0] = X[1]
        if y is not None:
            y = np.array(y, copy=True)
            y[0] = y[1] if kind == "row" else 1 - y[0]
        return X, y

    def hook(info, views, pooled):
        for v in views.values():
            v.X_train, v.y_train = change(v.X_train, v.y_train)
        try:
            X, y, Xt, yt = pooled()
        except Exception:  # a federated method may not see pooled data
            return info, views, pooled
        X1, y1 = change(X, y)
        return info, views, lambda: (X1, y1, Xt, yt)

    return hook


def _run(method: str, kind: str) -> dict:
    params = {"method": method, "dataset": "breast", "parties": 2, "epsilon": 4.0, "seed": 0}
    return run_experiment(build_spec({**params, **SMALL[method]}), views_hook=neighbour(kind))


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """``d`` as {dotted path: leaf}."""
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def differing(a: dict, b: dict, also: frozenset[str] = frozenset()) -> list[str]:
    fa, fb = flat(a), flat(b)
    keys = set(fa) | set(fb)
    noisy = NOISY | also
    return sorted(
        k
        for k in keys
        if not any(k == n or k.startswith(n + ".") for n in noisy) and fa.get(k) != fb.get(k)
    )


@pytest.mark.parametrize("method", sorted(SMALL))
def test_one_label_flipped_or_one_row_replaced_gives_the_same_record(method):
    flipped, replaced = _run(method, "label"), _run(method, "row")
    assert differing(flipped, replaced, ALSO_NOISY.get(method, frozenset())) == []
    assert flipped["privacy"]["relation"].startswith("replace-one")


def test_the_comparison_can_fail():
    """A field outside NOISY that moves is reported (the check is not vacuous)."""
    a = {"n_train": 456, "metrics": {"accuracy": 0.9}, "comm": {"bytes_total": 74410}}
    b = {"n_train": 455, "metrics": {"accuracy": 0.8}, "comm": {"bytes_total": 74258}}
    assert differing(a, b) == ["comm.bytes_total", "n_train"]
