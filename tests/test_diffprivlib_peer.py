"""The optional diffprivlib reference: its split export (securevfl's own rows, arrays only) and
its report section (empty when the peer has not run). The peer's own venv is never needed."""

from __future__ import annotations

import json

import numpy as np

from bench.peers.diffprivlib_lr import export_split
from bench.reports.diffprivlib import render
from securevfl.experiment import run_experiment
from securevfl.run_options import build_spec


def test_the_export_is_the_split_every_method_trains_on(tmp_path):
    meta = export_split("breast", 1, None, tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        X, y, Xt = z["X"], z["y"], z["Xt"]
    rec = run_experiment(build_spec({"method": "centralized", "dataset": "breast", "seed": 1}))
    assert (meta["n_train"], meta["n_test"]) == (rec["n_train"], rec["n_test"]) == (len(y), len(Xt))
    assert np.linalg.norm(X, axis=1).max() <= 1 + 1e-9  # data_norm 1 is the public bound
    assert meta["task"] == "binary"


def test_the_report_section_appears_only_with_the_peer_file(tmp_path):
    assert render([], tmp_path) == ""
    (tmp_path / "peers").mkdir()
    line = {
        "method": "diffprivlib-lr",
        "dataset": "breast",
        "seed": 0,
        "epsilon": 1.0,
        "accuracy": 0.75,
        "accountant": "diffprivlib 0.6.6 LogisticRegression",
    }
    (tmp_path / "peers" / "diffprivlib.jsonl").write_text(
        json.dumps(line) + "\n" + json.dumps({**line, "seed": 1, "accuracy": 0.85}) + "\n"
    )
    rec = run_experiment(
        build_spec({"method": "fm-central", "dataset": "breast", "seed": 0, "epsilon": 1.0})
    )
    md = render([rec], tmp_path)
    assert "| breast · 1 | 0.800 |" in md and "fm-central" in md
