"""Which modules register methods, and loading each of them once per process.

The project's own are :data:`PLUGINS`; a user's method lives in any importable module named in
the environment variable ``SECUREVFL_PLUGINS`` (comma-separated), e.g. a file ``my_method.py``
on ``PYTHONPATH`` with ``SECUREVFL_PLUGINS=my_method``. Party processes import the same list.
"""

from __future__ import annotations

import importlib
import os

# modules whose import (and ``load_all``, where they have one) registers methods
PLUGINS = ("securevfl.methods", "baselines")
PLUGINS_ENV = "SECUREVFL_PLUGINS"
_loaded: set[str] = set()


def plugin_modules() -> tuple[str, ...]:
    """The project's plugin modules, then the user's from ``SECUREVFL_PLUGINS``."""
    user = (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))
    return PLUGINS + tuple(m for m in user if m and m not in PLUGINS)


def load_plugins(*, on_demand: bool = False) -> None:
    """Register every method and baseline; each module is imported once per process.

    ``on_demand``: a package whose ``load_all`` the registry runs for a name it lacks is only
    imported (a command that names no method then never loads torch or the accountant)."""
    from securevfl.registry import load_all_of

    for name in plugin_modules():
        if name in _loaded:
            continue
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            from securevfl.errors import ConfigError

            raise ConfigError(
                f"{PLUGINS_ENV} must name importable modules, got {name!r} ({exc})"
            ) from None
        if load_all_of(module, on_demand=on_demand):  # else a later full load still calls it
            _loaded.add(name)
