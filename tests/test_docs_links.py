"""The README is a five-minute front page and every link in it and in docs/ resolves (issue 28).

A relative link must name a file of the repository; a ``#fragment`` must name a heading of the
target page (GitHub's anchors: lower case, punctuation dropped, spaces as dashes). Links inside
code blocks are not links. The README's Python example is run as written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
NEW_PAGES = ("getting-started", "methods", "multi-host", "benchmarks", "attacks")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` that name no file, or no heading of their target."""
    bad = []
    for m in LINK.finditer(prose(page.read_text())):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or ROOT not in (dest, *dest.parents):
            bad.append(f"{page.name}: {target} (no such file in the repository)")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{page.name}: {target} (no heading #{frag})")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Top part\n\n[ok](b.md#the-end) [x](nope.md) [y](b.md#nope)\n")
    (tmp_path / "b.md").write_text("## The end\n\n```\n[not a link](gone.md)\n```\n")
    assert broken_links(tmp_path / "a.md") == [
        "a.md: nope.md (no such file in the repository)",
        "a.md: b.md#nope (no heading #nope)",
    ]
    assert anchors(tmp_path / "a.md") == {"top-part"}


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.encode()) <= 15_000, f"README.md is {len(text.encode())} bytes"
    first = "\n".join(text.splitlines()[:40])
    assert "make bench" in first and "make test" in first
    assert "```python" in text and "## Methods" in text and "## Where to go next" in text
    for page in NEW_PAGES:  # each docs page reachable from the front page
        assert f"(docs/{page}.md" in text, page


def test_docs_pages_say_what_the_reader_can_do():
    for name in NEW_PAGES:
        head = (ROOT / "docs" / f"{name}.md").read_text().split("\n\n")[1]
        assert head.startswith("After reading this page you can"), name


@pytest.mark.slow
def test_the_readme_python_example_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    first = p.stdout.splitlines()[0].split()
    assert 0.5 < float(first[0]) <= 1 and 0 < float(first[1]) <= 10 and first[2] == "party-row"
    assert (tmp_path / "model").is_dir()
