"""Malformed suite files are one-line errors (exit 2) before any run starts."""

import pytest

from bench.cli import main

GOOD_CELL = '[[cells]]\nmethod = "vfl"\nepochs = 1\n'


@pytest.mark.parametrize(
    "text, needle",
    [
        ("seeds = 5\n" + GOOD_CELL, "seeds in suite file"),
        ('seeds = ["a"]\n' + GOOD_CELL, "seeds in suite file"),
        ('cells = "vfl"\n', "cells in suite file"),
        ("defaults = 3\n" + GOOD_CELL, "defaults in suite file"),
        ('[defaults]\nepsilon = "x"\n' + GOOD_CELL, "epsilon must be a number"),
        ("[[cells]]\nmethod = 'vfl'\nb = 64\n", "option --b does not apply to method 'vfl'"),
        ("[report]\nextras = ['nope']\n" + GOOD_CELL, "report extras in suite file"),
        ('name = "empty"\n', "a suite must have at least one cell"),
        ("seeds = [\n", "must be UTF-8 TOML"),
    ],
)
def test_a_malformed_suite_is_one_line_and_exit_2(tmp_path, capsys, text, needle):
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert main(["bench", "--suite", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err


def test_bad_files_and_fragments_are_one_line(tmp_path, capsys):
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    (tmp_path / "d.toml").mkdir()
    good = tmp_path / "g.toml"
    good.write_text(GOOD_CELL)
    (tmp_path / "g.d").mkdir()
    (tmp_path / "g.d" / "bad.toml").write_text("[[cells]]\nmethod = 'nope'\n")
    for path, needle in (
        (binary, "must be UTF-8 TOML"),
        (tmp_path / "d.toml", "must be a regular file"),
        (good, "unknown method 'nope'"),
    ):
        assert main(["bench", "--suite", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    (tmp_path / "g.d" / "bad.toml").unlink()
    assert main(["bench", "--suite", str(good), "--out", str(binary)]) == 2
    assert "--out must be a directory" in capsys.readouterr().err


def test_every_shipped_cell_passes_its_methods_rules():
    """A cell a method would refuse at run time (e.g. --epsilon for he-vfl) fails here, not in
    the middle of a long bench run."""
    from bench.suites import load_suite, suite_names
    from securevfl.experiment import check_spec

    for name in suite_names():
        for cell in load_suite(name).cells:
            check_spec(cell.spec)
