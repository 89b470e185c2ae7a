"""File names built from run labels (dataset names, settings), safe on every filesystem.

A ``csv:`` dataset is named by its files' paths (``csv:/data/bank.csv,/data/insurer.csv``):
``/``, ``:`` and ``,`` cannot go into a plot's file name as they are.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePath

_PLAIN = re.compile(r"[A-Za-z0-9._-]{1,64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def name_part(text: str) -> str:
    """``text`` as one part of a file name: as it is where it is plain (letters, digits, ``._-``:
    every catalogue dataset name); otherwise its safe characters (a ``csv:`` dataset: its
    files' stems), shortened, and a digest of the whole text, so two labels never share a name."""
    text = str(text)
    if _PLAIN.fullmatch(text) and not text.startswith("."):
        return text
    base = text
    if text.startswith(("csv:", "parquet:")):
        kind, _, files = text.partition(":")
        base = f"{kind}-" + "-".join(PurePath(p.strip()).stem for p in files.split(",") if p)
    base = _UNSAFE.sub("_", base).strip("._-")[:48]
    return f"{base or 'x'}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def plot_file(*parts: str, ext: str = ".png") -> str:
    """A file name joining ``parts`` with ``_``, each through :func:`name_part`."""
    return "_".join(name_part(p) for p in parts) + ext
