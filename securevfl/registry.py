"""One string-keyed registry for methods, baselines, datasets, suites and demos.

``register`` rejects duplicates and ``create`` rejects unknown names, with the known names listed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from securevfl.errors import ConfigError, UnknownNameError

_REGISTRIES: dict[str, dict[str, Any]] = {}
# per kind, the functions that register the rest of it (a package's ``load_all``): a process
# imports only the modules it uses (a party process: its method's), the rest on demand
_LOADERS: dict[str, list[Callable[[], None]]] = {}


def add_loader(kind: str, loader: Callable[[], None]) -> None:
    """``loader`` registers every ``kind`` it provides; :func:`lookup` calls it for a name not
    registered yet, :func:`names` before listing. It must be cheap to call again."""
    if loader not in _LOADERS.setdefault(kind, []):
        _LOADERS[kind].append(loader)


def loads_on_demand(loader: Callable[[], None]) -> bool:
    """Whether ``loader`` was added for some kind (so nobody need call it ahead of a lookup)."""
    return any(loader in fns for fns in _LOADERS.values())


def load_all_of(module: Any, *, on_demand: bool = False) -> bool:
    """Call ``module.load_all`` where it has one, unless ``on_demand`` and the registry runs it
    for a name it lacks (then this process imports only the modules it names). True when the
    module's registrations are all made."""
    load_all = getattr(module, "load_all", None)
    if load_all is None:
        return True
    if on_demand and loads_on_demand(load_all):
        return False
    load_all()
    return True


def _load(kind: str) -> None:
    for loader in list(_LOADERS.get(kind, ())):
        loader()


def register(kind: str, name: str, obj: Any) -> Any:
    """Register ``obj`` under ``name`` in the registry of ``kind``; duplicates raise."""
    table = _REGISTRIES.setdefault(kind, {})
    if name in table and table[name] is not obj:
        raise ConfigError(f"{kind} name must be unique, {name!r} is already registered")
    table[name] = obj
    return obj


def lookup(kind: str, name: str) -> Any:
    """Return the object registered under ``name``; unknown names raise with the known ones."""
    if name not in _REGISTRIES.get(kind, {}):
        _load(kind)
    table = _REGISTRIES.get(kind, {})
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise UnknownNameError(f"unknown {kind} {name!r}; known: {known}")
    return table[name]


def create(kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """Instantiate the class (or call the factory) registered under ``name``."""
    return lookup(kind, name)(*args, **kwargs)


def registered(kind: str) -> dict[str, Any]:
    """What is registered for ``kind`` now, without running its loaders (for a listing that
    must not import every method: ``bench.method_cards``)."""
    return dict(_REGISTRIES.get(kind, {}))


def names(kind: str) -> list[str]:
    """Sorted names registered for ``kind`` (its loaders run first: the list is complete)."""
    _load(kind)
    return sorted(_REGISTRIES.get(kind, {}))
