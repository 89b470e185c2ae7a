"""The decision section's constant-predictor rule (issue 43): only warnings that say a model
answers one class or carries no signal mark a setting constant, and a row where every DP
option is constant names the options that ran (the default report's breast ε = 100 row: only
afe-vfl's split-schedule ablation runs there, and it answers one class on most seeds)."""

from __future__ import annotations

from bench.floors import verdicts
from bench.method_choice import choices, settings

CONSTANT = (
    "constant predictor: every test row is predicted class 1: afe-vfl at ε = 100 on 455 "
    "training rows (the noise calibrated to this ε swamps the signal)"
)


def _record(method: str, acc: float, seed: int, eps: float | None, **kw) -> dict:
    dp = eps is not None
    return {
        "method": method,
        "capabilities": {"guarantees": ["dp"] if dp else [], "data": kw.pop("data", "vertical")},
        "dataset": "breast",
        "parties": 2,
        "metrics": {"accuracy": acc, "auc": kw.pop("auc", 0.9)},
        "majority_class_rate": 0.636,
        "n_test": 114,
        "time": {"train_s": 0.1, "total_s": 0.2, "cpu_s": 0.2},
        "comm": {"bytes_total": 1000},
        "privacy": {"epsilon": eps, "unit": "party-row", "accountant": "pld", "delta": 1e-5}
        if dp
        else None,
        "config": {"seed": seed, "epsilon": eps, **kw.pop("config", {})},
        "runtime": "inprocess",
        "stats": {"warnings": kw.pop("warnings")} if "warnings" in kw else {},
        "extra": {},
    }


def test_only_constant_warnings_mark_a_constant_predictor():
    """An audit variant's or a resumed checkpoint's warning says nothing about predictions."""
    recs = []
    for seed in (0, 1):
        recs.append(
            _record("hdp-vfl", 0.93, seed, 100.0, warnings=["audit variant: noise divided by 4"])
        )
        recs.append(_record("afe-vfl", 0.667, seed, 100.0, warnings=[CONSTANT], auc=0.85))
    by_label = {s.label: s for s in settings(recs)}
    assert not by_label["hdp-vfl"].constant
    assert by_label["afe-vfl"].constant
    row = next(c for c in choices(recs) if c.row.startswith("ε = 100"))
    assert row.best.label == "hdp-vfl"


def test_an_all_constant_row_names_what_ran():
    recs = []
    for seed in (0, 1, 2):
        local = _record("local", 0.944, seed, None, data="label-party", config={"model": "best"})
        recs.append(local)
        for variant, auc in (("vanilla", 0.85), ("full", 0.66)):
            recs.append(
                _record(
                    "afe-vfl",
                    0.667,
                    seed,
                    100.0,
                    auc=auc,
                    warnings=[CONSTANT],
                    config={"variant": variant},
                )
            )
    said = [v for v in verdicts(recs) if "ε = 100" in v]
    assert len(said) == 1
    line = said[0]
    assert "every DP option run at this ε answers one class" in line
    assert "afe-vfl (variant=full): accuracy 0.667, AUC 0.66" in line
    assert "afe-vfl (variant=vanilla): accuracy 0.667, AUC 0.85" in line
    assert line.endswith("the label holder alone, local, reaches 0.944.")
