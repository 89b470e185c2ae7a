"""DESIGN's one-way imports hold: the import-linter contracts in pyproject.toml are kept."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(config: Path) -> subprocess.CompletedProcess:
    # a subprocess: import-linter's console output does not survive pytest's capture
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_import_contracts_are_kept():
    p = _lint(ROOT / "pyproject.toml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout


def test_a_reversed_layer_order_is_caught(tmp_path):
    # the contracts can fail: securevfl does import protocols, so "protocols above" is broken
    cfg = tmp_path / "reversed.toml"
    cfg.write_text(
        '[tool.importlinter]\nroot_packages = ["securevfl", "protocols"]\n'
        '[[tool.importlinter.contracts]]\nname = "reversed"\ntype = "layers"\n'
        'layers = ["protocols", "securevfl"]\n'
    )
    p = _lint(cfg)
    assert p.returncode == 1 and "BROKEN" in p.stdout


def test_the_benchmarks_page_lists_every_suite():
    from bench.suites import suite_names

    readme = (ROOT / "docs" / "benchmarks.md").read_text()  # moved from the README (issue 28)
    missing = [s for s in suite_names() if f"`{s}`" not in readme]
    assert not missing, f"docs/benchmarks.md's suite list misses {missing}"
