"""The compare and default suites cover every method; compare's ε axis is one grid."""

from __future__ import annotations

from bench.suites import load_suite
from securevfl.registry import lookup, names

GRID = {0.5, 1.0, 2.0, 4.0, 8.0}
NOT_IN_COMPARE: set[str] = set()  # every registered method runs in compare


def test_default_suite_shows_every_registered_method():
    cells = load_suite("default").cells
    assert set(names("method")) <= {c.spec.method for c in cells}


def test_compare_covers_every_method_and_dataset_on_one_grid():
    cells = load_suite("compare").cells
    assert set(names("method")) - NOT_IN_COMPARE <= {c.spec.method for c in cells}
    assert {"breast", "adult", "phishing", "digits"} <= {c.spec.dataset for c in cells}
    for c in cells:
        dp = "dp" in lookup("method", c.spec.method).capabilities(c.spec.model).get("guarantees")
        if dp:  # every DP cell on the grid, at one δ
            assert c.spec.epsilon in GRID and c.spec.delta == 1e-5, c.spec
        else:  # other kinds run once per dataset and seed, never on the ε axis
            assert c.spec.epsilon is None, c.spec
    dp_cells = [c for c in cells if c.spec.epsilon is not None]
    per_setting = {
        (c.spec.method, c.spec.dataset, c.spec.parties, c.spec.epsilon, repr(c.spec.options))
        for c in dp_cells
    }
    assert len(dp_cells) == 3 * len(per_setting)  # 3 seeds each
