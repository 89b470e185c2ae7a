"""Baselines: centralized, local (active party only), non-private VFL, and HE/DP comparators.

Each module registers its baselines in the method registry on import; :func:`load_all` imports
them all (the registry calls it on a method name not registered yet, once this package is
imported).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from securevfl.registry import add_loader


@functools.cache  # once per process: the registry keeps what the first call registered
def load_all() -> None:
    """Import every module of this package so that its baselines register."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


add_loader("method", load_all)


__all__ = ["load_all"]
