"""Protocol demos (``securevfl demo NAME``): each module here defines ``NAME``, ``HELP`` and
``main(args: list[str]) -> int`` and is found automatically."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def available() -> dict[str, ModuleType]:
    """Demo name -> module."""
    out = {}
    for mod in pkgutil.iter_modules(__path__):
        m = importlib.import_module(f"{__name__}.{mod.name}")
        out[m.NAME] = m
    return out
