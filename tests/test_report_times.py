"""A run timed on its first minibatches reports its extrapolated training time, not what it ran."""

import pytest

from bench.record_keys import train_seconds
from securevfl.context import RunSpec
from securevfl.experiment import run_experiment


def test_a_truncated_paillier_run_counts_its_extrapolated_epochs():
    spec = RunSpec(
        method="he-vfl", dataset="breast", parties=2, epochs=2, seed=0,
        options={"scheme": "paillier", "paillier_bits": 512, "timed_batches": 1, "timed_epochs": 1},
    )  # fmt: skip
    rec = run_experiment(spec)
    secs, extrapolated = train_seconds(rec)
    ex = rec["extra"]
    assert extrapolated and ex["batches_run_per_epoch"] == 1 < ex["batches_per_epoch"]
    assert ex["epochs_run"] == 1 and len(ex["epoch_s"]) == 1  # one epoch ran, two are counted
    assert secs == pytest.approx(ex["epoch_s_extrapolated"] * 2)
    assert secs > rec["time"]["train_s"]  # it ran one minibatch of one epoch
    full = run_experiment(RunSpec(method="vfl", dataset="breast", parties=2, epochs=1, seed=0))
    assert train_seconds(full) == (full["time"]["train_s"], False)
