"""docs/EXTENDING.md as a test: its toy split-NN method, added as a plugin in a temporary
directory with its own suite fragment, passes the contract checks and shows up in
`securevfl methods`, `run toy-splitnn --help` and the default report's tables and plots."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import matplotlib.axes
import pytest
from test_contract import check_contract

import bench.plugins as plugins
from bench.cli import main
from bench.report import render_report
from bench.suites import SUITES_DIR, load_suite
from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.registry import _REGISTRIES

DOC = Path(__file__).resolve().parents[1] / "docs" / "EXTENDING.md"
TOY = "toy-splitnn"


def doc_file(name: str) -> str:
    """The fenced block that follows ``<!-- file: NAME -->`` in EXTENDING.md."""
    m = re.search(rf"<!-- file: {re.escape(name)} -->\n```\w+\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"EXTENDING.md has no block for {name}"
    return m.group(1)


@pytest.fixture()
def toy_plugin(tmp_path, monkeypatch):
    """The doc's method as a plugin module in tmp_path, loaded the way a user loads it."""
    (tmp_path / "toy_splitnn.py").write_text(doc_file("toy_splitnn.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.PLUGINS_ENV, "toy_splitnn")
    plugins.load_plugins()
    yield tmp_path
    _REGISTRIES["method"].pop(TOY, None)  # leave the registry as the other tests know it
    plugins._loaded.discard("toy_splitnn")
    sys.modules.pop("toy_splitnn", None)


def test_the_docs_toy_plugin_is_a_method_like_any_other(toy_plugin, capsys, monkeypatch):
    assert main(["methods"]) == 0
    assert TOY in capsys.readouterr().out
    assert main(["run", TOY, "--help"]) == 0
    helptext = capsys.readouterr().out
    assert "--weight" in helptext and "in (0, 10]" in helptext and "default 1.0" in helptext
    assert "--b " not in helptext and "--paillier-bits" not in helptext  # others' options
    assert main(["run", TOY, "--weight", "11"]) == 2
    assert "weight must be <= 10 (method 'toy-splitnn'), got 11.0" in capsys.readouterr().err

    rec = check_contract(TOY)
    assert rec["capabilities"]["architecture"] == "split-nn" and rec["family"] == "plain"

    # its fragment joins a copy of the default suite; its cells render in the default report
    suites = toy_plugin / "suites"
    (suites / "default.d").mkdir(parents=True)
    shutil.copy(SUITES_DIR / "default.toml", suites / "default.toml")
    (suites / "default.d" / f"{TOY}.toml").write_text(doc_file("default.d/toy-splitnn.toml"))
    cells = [c for c in load_suite(str(suites / "default.toml")).cells if c.spec.method == TOY]
    assert {c.spec.options["weight"] for c in cells} == {0.5, 1.0}
    records = [run_experiment(c.spec) for c in cells[:2]]
    records.append(run_experiment(RunSpec(method="vfl", epochs=1, seed=0)))
    bars: list[str] = []
    real_barh = matplotlib.axes.Axes.barh

    def barh(self, labels, *args, **kwargs):
        bars.extend(labels)
        return real_barh(self, labels, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "barh", barh)
    report = render_report(records, toy_plugin / "out").read_text()
    assert any(line.startswith(f"| breast | {TOY} |") for line in report.splitlines())
    assert f"{TOY}/mlp" in bars  # the time and bytes plots have a bar for it
    assert (toy_plugin / "out" / "breast_time_per_method.png").exists()
