"""Every registered method and baseline runs on a pair of CSV files as a user brings them (text
IDs aligned by PSI, a categorical column, blank cells), saves its model, and scores new rows of
the same kind with ``predict``: a finite metric, a finite ε for every DP method, a finite score
for every new customer both files hold."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from bench.cli import main
from securevfl.registry import lookup, names
from tests._csv_pair import csv_args, write_csv_pair

# the ones that take more than a few seconds here (a calibration, or in-process MPC / PBM)
SLOW = {"afe-vfl", "fm-vfl", "opacus-dpsgd", "pbm-vfl"}
METHODS = [pytest.param(m, marks=[pytest.mark.slow] if m in SLOW else []) for m in names("method")]
# the same code paths at small sizes: SecureBoost's defaults are 20 trees under a 2048-bit
# Paillier key (minutes), pbm-vfl's calibration at b = 64 trials searches for minutes
FAST = {
    "secureboost": ["--trees", "2", "--paillier-bits", "256"],
    "secureboost-dp": ["--trees", "2", "--paillier-bits", "256"],
    "pbm-vfl": ["--b", "8"],
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path, Path, Path]:
    """(bank, insurer, categories, new bank rows, new insurer rows)."""
    root = tmp_path_factory.mktemp("pair")
    bank, insurer, cats = write_csv_pair(root, n=300)
    new_bank, new_insurer, _ = write_csv_pair(root, n=40, seed=9, prefix="new_", label=False)
    return bank, insurer, cats, new_bank, new_insurer


def _ids(path: Path) -> set[str]:
    with path.open(newline="") as f:
        return {r["customer_id"] for r in csv.DictReader(f)}


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_saves_and_predicts_on_a_csv_pair(method, pair, tmp_path, capsys):
    bank, insurer, cats, new_bank, new_insurer = pair
    m = lookup("method", method)
    argv = ["run", method, *csv_args(bank, insurer, cats), "--seed", "0", "--epochs", "1"]
    argv += FAST.get(method, [])
    if m.requires_epsilon or m.accepts_epsilon:
        argv += ["--epsilon", "2", "--delta", "1e-5"]
    model = tmp_path / "model"
    rc = main([*argv, "--json", "--save", str(model)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    rec = json.loads(captured.out.strip().splitlines()[-1])
    assert rec["alignment"]["kept"] == 290  # 300 customers, 5 missing from each file
    assert all(math.isfinite(v) for v in rec["metrics"].values()), rec["metrics"]
    if "dp" in m.family:
        eps = rec["privacy"]["epsilon"]
        assert math.isfinite(eps) and 0 < eps <= 2.0 + 1e-6, rec["privacy"]
    out = tmp_path / "scores.csv"
    rc = main(
        ["predict", "--model", str(model), "--dataset", f"csv:{new_bank},{new_insurer}"]
        + ["--id-column", "customer_id", "--out", str(out)]
    )
    assert rc == 0, capsys.readouterr().err
    with out.open(newline="") as f:
        scored = list(csv.DictReader(f))
    assert sorted(r["id"] for r in scored) == sorted(_ids(new_bank) & _ids(new_insurer))
    assert all(math.isfinite(float(r["score"])) for r in scored)
