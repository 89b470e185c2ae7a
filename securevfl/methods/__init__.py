"""Methods of securevfl. Each module in this package registers its methods on import;
:func:`load_all` imports them all (the CLI and the contract tests call it, and the registry
does on a method name not registered yet)."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from securevfl.methods.base import Method, register_method
from securevfl.registry import add_loader


@functools.cache  # once per process: the registry keeps what the first call registered
def load_all() -> None:
    """Import every module of this package so that its methods register."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in ("base", "afe_options"):
            importlib.import_module(f"{__name__}.{mod.name}")


add_loader("method", load_all)


__all__ = ["Method", "load_all", "register_method"]
