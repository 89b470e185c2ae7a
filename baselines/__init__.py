"""Baselines: centralized, local (active party only), non-private VFL, and HE/DP comparators.

Each module registers its baselines in the method registry on import; :func:`load_all` imports
them all.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    """Import every module of this package so that its baselines register."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


__all__ = ["load_all"]
