"""Two small parties' CSVs as a new user brings them: text IDs (partly overlapping), a
categorical column, blank cells and a text-free binary label (shared by the CSV tests)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

JOBS = ["employed", "retired", "student"]


def write_csv_pair(
    root: Path, *, n: int = 300, seed: int = 0, prefix: str = "", label: bool = True
) -> tuple[Path, Path, Path]:
    """``(bank, insurer, categories)``: the bank (party 0) holds ``income`` (blanks),
    ``job`` (categorical, blanks) and label ``default_12m``; the insurer ``claims`` and ``age``
    (blanks). Each file lists its rows in its own order and holds a few IDs the other lacks."""
    rng = np.random.default_rng(seed)
    income = rng.normal(50, 10, n)
    job = rng.integers(0, len(JOBS), n)
    claims = rng.integers(0, 6, n)
    age = rng.integers(18, 81, n)
    logit = (income - 50) / 6 + 1.5 * (job == 1) - 0.4 * claims + (age - 50) / 30
    y = (logit + rng.logistic(size=n) > 0).astype(int)
    ids = [f"cust-{i:05d}" for i in rng.permutation(10 * n)[:n]]
    bank, insurer = root / f"{prefix}bank.csv", root / f"{prefix}insurer.csv"
    with bank.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["customer_id", "income", "job", *(["default_12m"] if label else [])])
        for i in rng.permutation(n)[: n - 5]:
            inc = "" if rng.random() < 0.1 else f"{income[i]:.2f}"
            jb = "" if rng.random() < 0.05 else JOBS[job[i]]
            w.writerow([ids[i], inc, jb, *([y[i]] if label else [])])
    with insurer.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["customer_id", "claims", "age"])
        for i in rng.permutation(n)[5:]:
            w.writerow([ids[i], claims[i], "NA" if rng.random() < 0.1 else age[i]])
    cats = root / "categories.json"
    cats.write_text(json.dumps({"job": JOBS}))
    return bank, insurer, cats


def csv_args(bank: Path, insurer: Path, cats: Path) -> list[str]:
    """The ``securevfl run`` options of the pair."""
    return [
        "--dataset",
        f"csv:{bank},{insurer}",
        "--id-column",
        "customer_id",
        "--label-column",
        "default_12m",
        "--categories",
        str(cats),
    ]
