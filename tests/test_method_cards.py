"""The commands that only show the methods read their cards (issue 41): `securevfl --help`,
`securevfl methods` and `securevfl run M --help` import no method module, no torch, no
accountant; the cards equal what the classes say, and a changed source makes them stale."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import method_cards
from bench.method_cards import _path, _read, card_of, catalogue
from securevfl.registry import lookup, names

# what a command that only shows the methods must not load: the methods' code and what it needs
HEAVY = ("torch", "dp_accounting", "sklearn", "scipy", "tenseal", "mpyc", "securevfl.experiment")
HEAVY_PREFIXES = ("securevfl.methods.", "baselines.", "securevfl.attacks.", "securevfl.training")


@pytest.fixture()
def cached():
    """The cards are in the session's cache directory (made from the classes if not)."""
    method_cards._stored.cache_clear()
    catalogue()
    assert _path() is not None and _path().is_file()
    return _path()


@pytest.mark.parametrize("argv", [["--help"], ["methods"], ["run", "hdp-vfl", "--help"]])
def test_commands_that_show_the_methods_import_none(cached, argv):
    code = (
        "import sys\n"
        "from bench.cli import main\n"
        f"rc = main({argv!r})\n"
        "assert rc == 0, rc\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}\n"
        f"         or m.startswith({HEAVY_PREFIXES!r})]\n"
        "print('loaded:', sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "loaded: []", out.stdout[-800:]


def test_a_command_that_runs_one_method_imports_that_method_only(cached):
    """`securevfl run vfl` (as `securevfl party vfl`) imports vfl's module, not every method's:
    no torch, no accountant (~3 CPU-s a process); a baseline it names still loads on demand."""
    code = (
        "import sys\n"
        "from bench.cli import main\n"
        "rc = main(['run', 'vfl', '--dataset', 'breast', '--n', '120', '--epochs', '1'])\n"
        "assert rc == 0, rc\n"
        "from securevfl.registry import lookup\n"
        "loaded = sorted(m for m in ('torch', 'dp_accounting', 'securevfl.methods.hdp_vfl',\n"
        "                            'baselines.centralized') if m in sys.modules)\n"
        "lookup('method', 'centralized')\n"
        "print('loaded:', loaded, 'baselines.centralized' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "loaded: [] True", out.stdout[-800:]


def test_the_cached_cards_are_the_classes_cards(cached):
    cat = _read()
    assert cat is not None
    for name in names("method"):
        cls = lookup("method", name)
        if cls.__module__.split(".")[0] in ("securevfl", "baselines"):
            assert cat.methods[name] == card_of(cls), name
    assert cat.names["loss"] == names("loss") and "logistic" in cat.names["loss"]
    assert "label-norm" in cat.names["attack"]


def test_a_changed_source_or_a_new_method_file_makes_the_cards_stale(cached):
    doc = json.loads(cached.read_text())
    some = next(p for p in doc["sources"] if p.endswith("hdp_vfl.py"))
    stale = dict(doc, sources={**doc["sources"], some: "0" * 64})
    cached.write_text(json.dumps(stale))
    assert _read() is None
    grown = dict(doc, package_files=doc["package_files"][:-1])  # one file more than it knew
    cached.write_text(json.dumps(grown))
    assert _read() is None
    cached.write_text("{not json")
    assert _read() is None
    cached.write_text(json.dumps(doc))
    assert _read() is not None
