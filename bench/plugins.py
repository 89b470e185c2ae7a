"""Which packages register methods, and loading them once per process."""

from __future__ import annotations

import functools
import importlib

# modules whose ``load_all`` registers methods; party processes import the same list
PLUGINS = ("securevfl.methods", "baselines")


@functools.cache  # once per process: every entry point calls it, the registry keeps the rest
def load_plugins() -> None:
    """Register every method and baseline."""
    for name in PLUGINS:
        importlib.import_module(name).load_all()
