"""What the CLI shows of each method without importing it (issue 41): a card per method.

A method's class is its one declaration (name, family, models, summary, options). Its card is
derived from the class (:func:`card_of`): the text ``securevfl methods``, ``securevfl --help`` and
``securevfl run M --help`` print, and the defaults a run of M really gets. Importing the methods
loads torch, the accountant and scikit-learn (~4 s of CPU); the cards are kept in one JSON file
in the cache directory (``$SECUREVFL_CACHE_DIR``, as the calibrations), so a command that only
shows them starts in a fraction of a second, and the method's module is imported only to run it.

The file names every first-party source file that was loaded when the cards were made, with its
SHA-256. A command re-hashes those files (a few milliseconds): any change, a new file of the
method packages, another ``SECUREVFL_PLUGINS`` list or another Python makes the cards stale, and
they are made again from the classes (one slow start) and rewritten. A cache file is data, never
code: JSON, size-checked, and what does not parse is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.option_groups import method_description
from bench.plugins import load_plugins, plugin_modules
from securevfl.privacy.calibration_cache import cache_dir
from securevfl.registry import registered

MAX_BYTES = 1 << 20  # the cards of ~20 methods are ~60 kB
FIRST_PARTY = ("securevfl", "baselines", "bench", "protocols")
# registries whose names the help lists (--loss, --penalty choices; attack names)
LISTED = ("loss", "penalty", "attack")


@dataclass(frozen=True)
class MethodCard:
    """One method as the CLI shows it: the listing line, ``run M --help`` and its defaults."""

    name: str
    module: str
    family: str
    models: tuple[str, ...]
    summary: str
    description: str  # the paragraph that leads ``run M --help``
    options: dict[str, str]  # option -> its help text (``Option.describe``), in declared order
    defaults: dict[str, Any]  # the common options' defaults a run of M really gets
    own_defaults: dict[str, Any]  # M's ``common_defaults({})``: shown in the help's epilog


def real_defaults(cls: Any) -> dict[str, Any]:
    """The common options' defaults a run of ``cls`` really gets, where not RunSpec's: its
    ``common_defaults`` (for a run that gives nothing else), its first model, and the δ its
    module falls back on (``DEFAULT_DELTA``) when a run gives none."""
    out: dict[str, Any] = {"model": cls.models[0]}
    delta = getattr(sys.modules.get(cls.__module__), "DEFAULT_DELTA", None)
    if delta is not None and cls.capabilities().get("accepts_epsilon", True):
        out["delta"] = delta
    out.update(cls.common_defaults({}))
    return out


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists), so a card read from the cache
    equals the card made from the class."""
    return json.loads(json.dumps(value, allow_nan=False))


def card_of(cls: Any) -> MethodCard:
    """The card of a registered method class."""
    return MethodCard(
        name=cls.name,
        module=cls.__module__,
        family=cls.family,
        models=tuple(cls.models),
        summary=cls.summary,
        description=method_description(cls),
        options={k: opt.describe() for k, opt in cls.options.items()},
        defaults=_plain(real_defaults(cls)),
        own_defaults=_plain(cls.common_defaults({})),
    )


@dataclass(frozen=True)
class Catalogue:
    """The cards of every method, and the names of the registries the help lists."""

    methods: dict[str, MethodCard]
    names: dict[str, list[str]]


def catalogue() -> Catalogue:
    """The cards, from the cache when it is current (else made from the classes and cached),
    plus whatever this process has registered already (a class in memory is its own truth)."""
    cat = _stored(_key())
    methods = dict(cat.methods)
    for name, cls in registered("method").items():
        methods[name] = _card_in_memory(cls)
    names = {k: sorted(set(cat.names.get(k, ())) | set(registered(k))) for k in LISTED}
    return Catalogue(dict(sorted(methods.items())), names)


@functools.cache  # a class's card is fixed once it is registered; the parser asks for the
def _card_in_memory(cls: Any) -> MethodCard:  # catalogue ~15 times while it is built
    return card_of(cls)


@functools.cache  # once per process and key: a command asks several times while it parses
def _stored(key: str) -> Catalogue:
    return _read() or _build()


def cards() -> dict[str, MethodCard]:
    """Method name -> card, sorted by name."""
    return catalogue().methods


def _ours(obj: Any, modules: tuple[str, ...]) -> bool:
    """Whether ``obj`` comes from a plugin module (not, say, a test that registered a toy)."""
    mod = getattr(obj, "__module__", "") or ""
    return any(mod == m or mod.startswith(m + ".") for m in modules)


def _build() -> Catalogue:
    """Import every plugin (and the attacks), make the cards, and cache them."""
    import securevfl.attacks  # noqa: F401  (registers the attacks the help names)
    from securevfl.registry import lookup, names

    load_plugins()
    mods = plugin_modules() + ("securevfl.attacks", "securevfl.models")
    methods = {n: card_of(lookup("method", n)) for n in names("method")}
    cat = Catalogue(
        {n: c for n, c in methods.items() if _ours(lookup("method", n), mods)},
        {k: [n for n in names(k) if _ours(lookup(k, n), mods)] for k in LISTED},
    )
    _write(cat)
    return cat


def _sources() -> dict[str, str]:
    """path -> SHA-256 of every loaded first-party or plugin module's file."""
    tops = set(FIRST_PARTY) | {m.split(".")[0] for m in plugin_modules()}
    out = {}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if name.split(".")[0] in tops and path and path.endswith(".py"):
            out[path] = _sha(path)
    return dict(sorted(out.items()))


def _sha(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _key() -> str:
    """What the file is for: this Python, these plugins, this tree (one file per checkout)."""
    doc = json.dumps([sys.version, plugin_modules(), str(Path(__file__).resolve().parent)])
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def _path() -> Path | None:
    root = cache_dir()
    return None if root is None else root / "cli" / f"cards-{_key()}.json"


def _read() -> Catalogue | None:
    """The cached catalogue if its file parses and every source it names is unchanged."""
    path = _path()
    if path is None:
        return None
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        doc = json.loads(raw.decode("utf-8"))
        if any(_sha(p) != h for p, h in doc["sources"].items()):
            return None
        if doc["package_files"] != _package_files(doc["plugins"]):
            return None
        methods = {
            n: MethodCard(**{**c, "models": tuple(c["models"])}) for n, c in doc["methods"].items()
        }
        return Catalogue(methods, {k: list(doc["names"][k]) for k in LISTED})
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _package_files(plugins: list[str]) -> list[str]:
    """The modules of the method packages (a new one, a new method, makes the cards stale),
    found without importing them."""
    out = []
    for name in plugins:
        spec = _find(name)
        for folder in spec.submodule_search_locations or () if spec is not None else ():
            out += sorted(str(p) for p in Path(folder).glob("*.py"))
    return out


def _find(name: str) -> Any:
    import importlib.util

    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _write(cat: Catalogue) -> None:
    """Cache ``cat`` (atomically; a cache that cannot be written costs only time)."""
    path = _path()
    if path is None:
        return
    doc = {
        "plugins": list(plugin_modules()),
        "package_files": _package_files(list(plugin_modules())),
        "sources": _sources(),
        "methods": {n: asdict(c) for n, c in cat.methods.items()},
        "names": cat.names,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, allow_nan=False)
        os.replace(tmp, path)
    except (OSError, ValueError):
        return
