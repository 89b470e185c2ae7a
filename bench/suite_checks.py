"""Checks on suite files before any cell runs: every malformed file is one ConfigError line.

A suite file is read as UTF-8 TOML (a binary file, a directory named ``*.toml`` or bad TOML is
refused naming the path) and its shape is checked: ``seeds`` a list of integers, ``defaults`` a
table, ``cells`` an array of tables, ``report.extras`` names of report modules that exist, and
each RunSpec field of the right type (``epsilon = "1"`` is a string, not a number). Method
options are checked by the method's own option declarations when the spec is validated.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from securevfl.context import RunSpec
from securevfl.errors import ConfigError

REPORTS_DIR = Path(__file__).parent / "reports"
TOP_KEYS = {"name", "description", "seeds", "defaults", "cells", "report"}
FRAGMENT_KEYS = {"cells", "report", "description"}
# RunSpec field -> the Python types a suite value may have (from the dataclass annotations)
_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "None": ()}


def _field_types() -> dict[str, tuple[tuple[type, ...], bool]]:
    out = {}
    for f in fields(RunSpec):
        names = [t.strip() for t in str(f.type).split("|")]
        if not all(n in _TYPES for n in names):
            continue  # dict-valued fields are built from other keys, not given directly
        kinds = tuple(t for n in names for t in _TYPES[n])
        out[f.name] = (kinds, "None" in names)
    return out


FIELD_TYPES = _field_types()


def read_suite_toml(path: Path) -> dict[str, Any]:
    """Parse one suite file, or raise a one-line ConfigError naming it and the rule."""
    if path.is_dir():
        raise ConfigError(f"suite file must be a TOML file, got the directory {str(path)!r}")
    try:
        text = path.read_bytes().decode("utf-8")
        return tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(
            f"suite file {str(path)!r} must be UTF-8 TOML text, got binary data"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"suite file {str(path)!r} must be valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"suite file {str(path)!r} must be readable: {exc.strerror}") from None


def check_suite_doc(doc: dict[str, Any], path: Path, *, fragment: bool = False) -> None:
    """The shape of a suite file (or a ``NAME.d/`` fragment)."""
    where = f"suite file {str(path)!r}"
    allowed = FRAGMENT_KEYS if fragment else TOP_KEYS
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ConfigError(f"{where}: keys must be among {sorted(allowed)}, got {unknown}")
    for key in ("name", "description"):
        if key in doc and not isinstance(doc[key], str):
            raise ConfigError(f"{where}: {key} must be a string, got {doc[key]!r}")
    if "seeds" in doc:
        check_seeds(doc["seeds"], where)
    if "defaults" in doc and not isinstance(doc["defaults"], dict):
        raise ConfigError(f"{where}: [defaults] must be a table, got {doc['defaults']!r}")
    cells = doc.get("cells", [])
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise ConfigError(f"{where}: cells must be an array of tables ([[cells]]), got {cells!r}")
    for c in cells:
        if "seeds" in c:
            check_seeds(c["seeds"], where)
    report = doc.get("report", {})
    if not isinstance(report, dict):
        raise ConfigError(f"{where}: [report] must be a table, got {report!r}")
    extras = report.get("extras", [])
    if not isinstance(extras, list) or not all(isinstance(e, str) for e in extras):
        raise ConfigError(f"{where}: report.extras must be a list of names, got {extras!r}")
    known = sorted(p.stem for p in REPORTS_DIR.glob("*.py") if p.stem != "__init__")
    for e in extras:
        if e not in known:
            raise ConfigError(f"{where}: report extra must be one of {known}, got {e!r}")


def check_seeds(seeds: Any, where: str) -> None:
    ok = isinstance(seeds, list) and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds
    )
    if not ok or not seeds:
        raise ConfigError(
            f"{where}: seeds must be a non-empty list of integers >= 0, got {seeds!r}"
        )


def check_params(params: dict[str, Any]) -> None:
    """Each RunSpec field of a cell (after expansion) has a value of its declared type."""
    for key, value in params.items():
        if key not in FIELD_TYPES:
            continue
        kinds, optional = FIELD_TYPES[key]
        if key == "partition" and isinstance(value, list):
            continue  # explicit column lists
        if value is None and optional:
            continue
        if isinstance(value, bool) and bool not in kinds:
            kinds = ()
        if not isinstance(value, kinds):
            want = " or ".join(sorted({k.__name__ for k in kinds})) or "a table"
            raise ConfigError(f"suite value {key} must be {want}, got {value!r}")
