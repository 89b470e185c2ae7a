"""No import circles among first-party modules (issue 28).

The graph is read from the AST of every module of securevfl, baselines, bench, protocols and tools.
An edge is any ``import`` / ``from ... import`` naming another first-party module, at module level
*inside functions* and *under ``if TYPE_CHECKING:``* (issue 41): a function-level import that
closes a circle only moves the failure from import time to call time, and an annotation-only import
still says that each module needs the other to be understood; both are circles in a drawing of the
imports, and the fix is to move the shared piece down a layer, not to hide the import. Importing
``a.b`` also runs ``a/__init__``; that implicit parent edge is not counted (import-linter does not
either), so a package's ``__init__`` may re-export its own submodules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("securevfl", "baselines", "bench", "protocols", "tools")


def first_party_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the first-party packages."""
    mods = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def imports_of(name: str, source: str, mods: dict[str, Path], *, is_pkg: bool) -> set[str]:
    """First-party modules that module ``name`` imports (module-level, in functions, and under
    ``if TYPE_CHECKING:``)."""

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(filter(None, (resolve(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    target = sub if sub in mods else resolve(base)
                    if target:
                        found.add(target)
            visit(ast.iter_child_nodes(node))

    visit(ast.parse(source).body)
    found.discard(name)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = first_party_modules(root)
    return {
        m: imports_of(m, f.read_text(), mods, is_pkg=f.name == "__init__.py")
        for m, f in mods.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle_among_first_party_modules():
    graph = import_graph()
    assert len(graph) > 150  # every package was read (a wrong root finds nothing, and no cycle)
    found = cycles(graph)
    detail = [" <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c)
              for c in found]  # fmt: skip
    assert not found, "import circles:\n" + "\n".join(detail)


def test_the_check_sees_function_level_and_relative_imports():
    mods = {"p": Path("p/__init__.py"), "p.a": Path("p/a.py"), "p.b": Path("p/b.py")}
    a = "def f():\n    from p.b import g\n"
    b = "from . import a\n"
    graph = {
        "p": set(),
        "p.a": imports_of("p.a", a, mods, is_pkg=False),
        "p.b": imports_of("p.b", b, mods, is_pkg=False),
    }
    assert graph["p.a"] == {"p.b"} and graph["p.b"] == {"p.a"}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_type_checking_imports_are_edges():
    mods = {"p.a": Path("p/a.py"), "p.b": Path("p/b.py")}
    src = "import typing\nif typing.TYPE_CHECKING:\n    from p.b import X\nelse:\n    X = None\n"
    assert imports_of("p.a", src, mods, is_pkg=False) == {"p.b"}
    assert cycles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": set()}) == []


def test_the_package_top_keeps_a_few_modules():
    """Issue 41: the top level of securevfl/ keeps only the modules a reader needs first (at
    most 15); the rest lives in its subpackages."""
    top = sorted(p.name for p in (ROOT / "securevfl").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 15, top
