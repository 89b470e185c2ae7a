"""One string-keyed registry for methods, baselines, datasets, suites and demos.

``register`` rejects duplicates and ``create`` rejects unknown names, with the known names listed.
"""

from __future__ import annotations

from typing import Any

from securevfl.errors import ConfigError, UnknownNameError

_REGISTRIES: dict[str, dict[str, Any]] = {}


def register(kind: str, name: str, obj: Any) -> Any:
    """Register ``obj`` under ``name`` in the registry of ``kind``; duplicates raise."""
    table = _REGISTRIES.setdefault(kind, {})
    if name in table and table[name] is not obj:
        raise ConfigError(f"{kind} name must be unique, {name!r} is already registered")
    table[name] = obj
    return obj


def lookup(kind: str, name: str) -> Any:
    """Return the object registered under ``name``; unknown names raise with the known ones."""
    table = _REGISTRIES.get(kind, {})
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise UnknownNameError(f"unknown {kind} {name!r}; known: {known}")
    return table[name]


def create(kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """Instantiate the class (or call the factory) registered under ``name``."""
    return lookup(kind, name)(*args, **kwargs)


def names(kind: str) -> list[str]:
    """Sorted names registered for ``kind``."""
    return sorted(_REGISTRIES.get(kind, {}))
