"""docs/threat-model.md has a section per registered method, and every record points to it."""

from __future__ import annotations

import re
from pathlib import Path

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.methods import load_all
from securevfl.registry import names

DOC = Path(__file__).resolve().parents[1] / "docs" / "threat-model.md"


def _anchors() -> set[str]:
    """GitHub's anchors of the page's headings (lower case, spaces to dashes, punctuation out)."""
    heads = re.findall(r"^#{2,3} (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_method_has_a_threat_model_section():
    load_all()
    from baselines import load_all as load_baselines

    load_baselines()
    assert set(names("method")) <= _anchors()
    for link in re.findall(r"\]\(#([^)]+)\)", DOC.read_text(encoding="utf-8")):
        assert link in _anchors(), link  # in-page links resolve


def test_records_point_to_their_section():
    rec = run_experiment(RunSpec(method="hdp-vfl", epsilon=1.0, delta=1e-5, epochs=2, seed=0))
    assert rec["privacy"]["threat_model"] == "docs/threat-model.md#hdp-vfl"
    assert rec["threat_model"] == "docs/threat-model.md#hdp-vfl"
    assert 0.5 < rec["majority_class_rate"] < 1.0  # breast's test split: the larger class
    plain = run_experiment(RunSpec(method="vfl", epochs=1, seed=0))
    assert plain["privacy"] is None and plain["threat_model"].endswith("#vfl")
