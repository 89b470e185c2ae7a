"""A bank's and an insurer's CSVs for the deployment tests and docs/deploy.md.

The bank's file: text customer IDs, a categorical column, blank cells and the label
``default_12m``; the insurer's: partly overlapping IDs in another order. ``new`` files hold
rows neither party trained on (for ``predict``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SEGMENTS = ["retail", "sme", "private"]


def write_pair(bank_dir: Path, insurer_dir: Path, *, n: int = 300, seed: int = 0) -> dict:
    """Write bank.csv + categories.json + bank_new.csv into ``bank_dir`` and insurer.csv +
    insurer_new.csv into ``insurer_dir``; return the facts a test checks against."""
    rng = np.random.default_rng(seed)
    m = n + 60  # customers: n train-time rows per party, 60 new ones
    ids = [f"C-{i:05d}" for i in rng.permutation(np.arange(10_000, 10_000 + 2 * m))[: m + 80]]
    income = rng.normal(50, 15, size=len(ids))
    seg = rng.choice(SEGMENTS, size=len(ids))
    claims = rng.poisson(1.5, size=len(ids))
    premium = rng.normal(900, 200, size=len(ids))
    logit = -0.05 * (income - 50) + 0.9 * (claims - 1.5) + 1.2 * (seg == "sme") - 0.3
    default = (logit + rng.logistic(size=len(ids)) > 0).astype(int)
    bank_old, bank_new = list(range(0, n)), list(range(n, m))
    # the insurer knows 80 % of the bank's customers and 80 others the bank never saw
    ins_old = [i for i in bank_old if rng.random() < 0.8] + list(range(m, m + 80))
    ins_new = [i for i in bank_new if rng.random() < 0.8]
    rng.shuffle(ins_old)

    def bank_rows(rows: list[int], label: bool) -> str:
        head = "customer_id,income,segment" + (",default_12m" if label else "")
        out = [head]
        for i in rows:
            inc = "" if i % 11 == 0 else f"{income[i]:.2f}"  # blank cells
            out.append(f"{ids[i]},{inc},{seg[i]}" + (f",{default[i]}" if label else ""))
        return "\n".join(out) + "\n"

    def insurer_rows(rows: list[int]) -> str:
        out = ["customer_id,claims,premium"]
        out += [f"{ids[i]},{claims[i]},{premium[i]:.1f}" for i in rows]
        return "\n".join(out) + "\n"

    bank_dir.mkdir(parents=True, exist_ok=True)
    insurer_dir.mkdir(parents=True, exist_ok=True)
    (bank_dir / "bank.csv").write_text(bank_rows(bank_old, True))
    (bank_dir / "bank_new.csv").write_text(bank_rows(bank_new, False))
    (bank_dir / "categories.json").write_text(json.dumps({"segment": SEGMENTS}))
    (insurer_dir / "insurer.csv").write_text(insurer_rows(ins_old))
    (insurer_dir / "insurer_new.csv").write_text(insurer_rows(ins_new))
    both = sorted(ids[i] for i in set(bank_old) & set(ins_old))
    new_both = sorted(ids[i] for i in set(bank_new) & set(ins_new))
    labels = {ids[i]: int(default[i]) for i in bank_old}
    return {"intersection": both, "new_intersection": new_both, "labels": labels}


if __name__ == "__main__":  # python tests/deploy_data.py BANK_DIR INSURER_DIR
    import sys

    facts = write_pair(Path(sys.argv[1]), Path(sys.argv[2]))
    print(
        f"wrote the bank's and the insurer's files: {len(facts['intersection'])} shared customers"
    )
