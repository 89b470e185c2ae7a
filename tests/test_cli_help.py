"""`securevfl run M --help` (issue 28): a paragraph on M first, then its options in six groups
(data, privacy, model, training, protocol, output), each with its default."""

from __future__ import annotations

import re

import pytest

import baselines
import securevfl.methods
from bench.cli import main
from bench.option_groups import GROUP_TITLES, METHOD_OPTION_GROUP
from securevfl.registry import lookup, names

GROUPS = ("data", "privacy", "model", "training", "protocol", "output")


def _help(capsys, *argv: str) -> str:
    assert main(["run", *argv, "--help"]) == 0
    return capsys.readouterr().out


def _sections(out: str) -> dict[str, str]:
    """Help text per group, keyed by the group's name (the title's first word)."""
    titles = {GROUP_TITLES[g] + ":": g for g in GROUPS}
    found, current = {}, None
    for line in out.splitlines():
        if line in titles:
            current = titles[line]
            found[current] = ""
        elif current is not None and line and not line.startswith(" "):
            current = None  # the epilog or another section
        elif current is not None:
            found[current] += line + "\n"
    return found


def test_afe_vfl_help_leads_with_its_description_then_six_groups(capsys):
    out = _help(capsys, "afe-vfl")
    before_args = out[: out.index("positional arguments:")]
    assert "afe-vfl: VFL-AFE" in before_args and "privacy unit 'party-row'" in before_args
    order = [out.index(GROUP_TITLES[g] + ":") for g in GROUPS]
    assert order == sorted(order)  # in the stated order
    sec = _sections(out)
    assert set(sec) == set(GROUPS)
    placed = {
        "data": ("--dataset", "--parties", "--active-features"),
        "privacy": ("--epsilon", "--delta", "--clip", "--variant", "--release-schedule"),
        "model": ("--model", "--embedding-dim", "--hidden"),
        "training": ("--epochs", "--batch-size", "--lr", "--lam-kl", "--head-epochs"),
        "protocol": ("--timeout", "--processes"),
        "output": ("--json", "--save", "--record-view"),
    }
    for group, flags in placed.items():
        for flag in flags:
            assert re.search(rf"^\s+{flag}\b", sec[group], re.M), (flag, group)
            for other in set(GROUPS) - {group}:
                assert not re.search(rf"^\s+{flag}\b", sec[other], re.M), (flag, other)


def test_every_method_option_shows_its_default(capsys):
    out = _help(capsys, "afe-vfl")
    for key in lookup("method", "afe-vfl").options:
        flag = "--" + key.replace("_", "-")
        text = " ".join(out[out.index(f"  {flag} ") :].split("\n  --")[0].split())
        assert "default " in text, flag
    assert "[integer in [1, 100000]; default 10]" in " ".join(out.split())  # --epochs


def test_party_help_files_the_network_options_under_protocol(capsys):
    assert main(["party", "pbm-vfl", "--help"]) == 0
    sec = _sections(capsys.readouterr().out)
    for flag in ("--index", "-P", "--ssl", "--certs", "--run-id"):
        assert re.search(rf"^\s+{flag}\b", sec["protocol"], re.M), flag
    assert re.search(r"^\s+--b\b", sec["privacy"], re.M)  # PBM's trials: the mechanism


@pytest.mark.parametrize("method", ["fm-vfl", "he-vfl", "vafl", "local"])
def test_other_methods_get_the_same_groups(capsys, method):
    out = _help(capsys, method)
    assert out.index(f"{method}: ") < out.index("positional arguments:")
    assert set(_sections(out)) == set(GROUPS)


def test_every_built_in_method_option_is_filed_in_a_group():
    securevfl.methods.load_all()
    baselines.load_all()
    missing = set()
    for m in names("method"):
        cls = lookup("method", m)
        if cls.__module__.split(".")[0] in ("securevfl", "baselines"):
            missing |= set(cls.options) - set(METHOD_OPTION_GROUP)
    assert not missing, f"options with no --help group (bench/option_groups.py): {missing}"
    assert set(METHOD_OPTION_GROUP.values()) <= set(GROUPS)


COMMANDS = ("run", "party", "attack", "audit", "bench", "align", "predict", "datasets", "methods",
            "certs", "demo")  # fmt: skip


def test_the_top_level_help_and_every_commands_help_print(capsys):
    """`securevfl --help` lists every command (a '%' in a command's help once made it raise)."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in COMMANDS) and "95% confidence" in out
    for command in COMMANDS:
        assert main([command, "--help"]) == 0, command
        assert f"usage: securevfl {command}" in capsys.readouterr().out


def test_commands_that_use_no_method_import_none():
    """predict, align, certs and datasets build their parser without the method commands: no
    method module, torch or accountant is imported (~3 s a start), yet they still work."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from bench.cli import main\n"
        "for argv in (['predict', '--help'], ['align', '--help'], ['datasets']):\n"
        "    try:\n"
        "        assert main(argv) == 0, argv\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, argv\n"
        "heavy = ('torch', 'dp_accounting', 'baselines.vfl', 'securevfl.methods.hdp_vfl')\n"
        "print('loaded:', [m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "loaded: []", out.stdout[-500:]
