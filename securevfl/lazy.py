"""A package's public names, imported on first use (PEP 562).

A party process imports only what its method uses: a package whose ``__init__`` imported every
public name eagerly would load torch (~1.8 s) or dp_accounting (~1.4 s) for a method that needs
neither. The package keeps the same names (``from pkg import name`` works), and lists them in a
``TYPE_CHECKING`` block for type checkers and IDEs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each name to its module."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value  # once: later lookups do not come here
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
