"""Saved models: each party writes only its own trained part, and loading never runs code.

Layout: ``DIR/party_<k>/`` per party, holding ``card.json`` (the model card) and one ``.npy``
per array. Arrays are written with ``allow_pickle=False`` and read with ``allow_pickle=False``
after their sha256 (listed in the card) matched, so a file cannot execute code, and one whose
bytes were altered is refused before it is parsed. A model folder is a closed world: no symlink
inside it is followed (files are opened with ``O_NOFOLLOW`` and must be regular files directly
in their party's folder), every card field is checked for type and range before use, and no
error message quotes a file's content. The card records the method, its settings,
the party's column names and order, the preprocessing a new row needs (a CSV's encoder:
categories, missing-value indicators, column order; scaling ranges, centring),
the training run's privacy record, the library version and the format version.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, DataError
from securevfl.version import __version__

FORMAT = "securevfl-model"
FORMAT_VERSION = 1
KINDS = ("linear", "splitnn", "trees")
_NAME = re.compile(r"^[A-Za-z0-9_.]+$")  # array names become file names: nothing else
MAX_ARRAY_BYTES = 1 << 31  # a card may not announce more than this per array
MAX_CARD_BYTES = 16 << 20  # a card (settings, encoders, privacy record) longer is refused unread
MAX_PARTIES = 1024
TASKS = ("binary", "multiclass", "regression")


class ModelFileError(DataError):
    """A saved model that fails a rule (altered file, unknown version, wrong party)."""


def party_dir(root: str | Path, k: int) -> Path:
    return Path(root) / f"party_{k}"


def check_save(root: str | Path, parties: list[int], spec: Any, method: Any) -> None:
    """Before training: the method can export this model (what is known before it runs; a
    method class may say why not in ``model_export_refusal``), ``root`` is a directory (or
    absent) and no local party's part exists."""
    why = getattr(method, "model_export_refusal", None)
    refusal_of = getattr(method, "export_refusal", None)  # one that depends on the options
    if why is None and callable(refusal_of):
        why = refusal_of(spec)
    if why is not None:
        raise ConfigError(f"--save does not apply to method {spec.method!r} yet: {why}")
    p = Path(root)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"--save must name a directory, got the file {str(p)!r}")
    for k in parties:
        d = party_dir(p, k)
        if d.exists() and any(d.iterdir()):
            raise ConfigError(
                f"--save must not overwrite a saved model, got {str(d)!r} (not empty)"
            )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def model_id(spec: Any, shared_seed: int) -> str:
    """The same on every party of one run (spec and shared seed), different across runs."""
    from securevfl.runtime.runspec import PARTY_OWN

    # each party's own file and how it reads it differ between the parties of one run
    shared = {k: v for k, v in spec.to_config().items() if k not in PARTY_OWN}
    text = json.dumps({"spec": shared, "d": spec.dataset, "m": spec.method}, default=str)
    return hashlib.sha256(f"{shared_seed}/{text}".encode()).hexdigest()[:16]


def _columns(k: int, views: dict, info: Any, facts: dict, spec: Any) -> dict[str, Any]:
    """Party ``k``'s columns: global indices, names, and how a raw value becomes an input."""
    from securevfl.data.custom import is_csv_dataset, schema_of

    if k >= info.data_parties:
        return {"indices": [], "names": []}
    cols = [int(c) for c in views[k].columns]
    names = facts.get("feature_names") or []
    out: dict[str, Any] = {
        "indices": cols,
        "names": [names[c] if c < len(names) else f"x{c}" for c in cols],
    }
    schema = schema_of(spec.dataset) if is_csv_dataset(spec.dataset) else None
    if schema is not None:  # a user CSV: its encoder (raw columns -> inputs), scaling ranges
        flat = [n for ns in schema["names"] for n in ns]
        out["names"] = [flat[c] for c in cols]
        out["scaling"] = [schema["scaling"][c] for c in cols]
        out["encoder"] = schema["encoders"][k]
    centre = facts.get("center") or {}
    out["center"] = [list(centre[c]) if c in centre else None for c in cols]
    return out


def save_parts(
    root: str | Path,
    spec: Any,
    method: Any,
    info: Any,
    views: dict,
    fit: Any,
    facts: dict,
    *,
    shared_seed: int,
    here_label: bool = True,
    parts: dict[int, Any] | None = None,
) -> list[Path]:
    """Write every local party's part under ``root``; return the directories. ``parts``: party
    -> its part, from the parties' records (``securevfl.run.parties.Party.model``); None: the
    parts of ``fit.model``."""
    from securevfl.data.custom import is_csv_dataset, schema_of

    if fit.model is None and fit.model_refusal is None and not here_label:
        return []  # nothing lives here (a local-only baseline's passive party)
    if fit.model is None:
        why = fit.model_refusal or "it returns no model to save"
        raise ConfigError(f"--save does not apply to method {spec.method!r} yet: {why}")
    schema = schema_of(spec.dataset) if is_csv_dataset(spec.dataset) else None
    written = []
    mid = model_id(spec, shared_seed)
    for k, part in sorted((fit.model if parts is None else parts).items()):
        d = party_dir(root, k)
        d.mkdir(parents=True, exist_ok=True)
        files = {}
        for name, arr in sorted(part.arrays.items()):
            if not _NAME.match(name):  # pragma: no cover - names come from the export hooks
                raise ValueError(f"array name must match {_NAME.pattern}, got {name!r}")
            path = d / f"{name}.npy"
            np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
            files[path.name] = _sha256(path)
        card = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model_id": mid,
            "party": k,
            "n_parties": info.n_parties,
            "data_parties": info.data_parties,
            "label_party": info.label_party,
            # the data parties whose columns the model reads (a local-only baseline: party 0)
            "scoring_parties": [0] if method.label_party_only else list(range(info.data_parties)),
            "method": spec.method,
            "kind": part.kind,
            "settings": {"dataset": spec.dataset, "parties": spec.parties, **spec.to_config()},
            "task": info.task,
            "n_classes": info.n_classes,
            "classes": _labels((schema or {}).get("classes")),
            "features_per_party": list(info.features_per_party),
            "columns": _columns(k, views, info, facts, spec),
            # a pooled baseline's one part reads every data party's columns
            "pooled_columns": [
                _columns(j, views, info, facts, spec) for j in range(info.data_parties)
            ]
            if part.meta.get("pooled")
            else None,
            "spec": {k2: v for k2, v in spec.__dict__.items()},
            "preprocessing": {
                "row_norm_bound_sq": info.row_norm_bound_sq,
                "steps": "raw CSV cells -> columns.encoder where recorded (one-hot levels, "
                "missing indicators; a blank numeric cell stays blank) -> scaling to [-1, 1] by "
                "columns.scaling (clipped; a blank becomes 0, the range midpoint) -> centring "
                "(clipped to [-1, 1]) where recorded -> divided by sqrt(row_norm_bound_sq)",
            },
            "meta": part.meta,
            "privacy": fit.privacy.to_dict() if fit.privacy is not None else None,
            "noise_seeded": spec.seed is not None,
            # the label holder's check: a reloaded model must predict these test classes
            # the test split's row positions (label-independent, drawn by the label holder)
            "test_rows": facts.get("test_rows"),
            "test_classes_sha256": classes_digest(info.task, fit.test_scores)
            if k == info.label_party
            else None,
            "version": __version__,
            "files": files,
        }
        (d / "card.json").write_text(json.dumps(card, indent=1, default=_plain) + "\n")
        written.append(d)
    return written


def classes_digest(task: str, scores: Any) -> str | None:
    """sha256 of the predicted class ids of test scores (what a reloaded model must match)."""
    if scores is None:
        return None
    s = np.asarray(scores, dtype=float)
    if task == "regression":
        ids = s
    elif s.ndim == 1:
        ids = (s >= 0.5).astype(np.int64)
    elif task == "binary":
        ids = (s[:, 1] >= 0.5).astype(np.int64)
    else:
        ids = s.argmax(axis=1).astype(np.int64)
    return hashlib.sha256(np.ascontiguousarray(ids).tobytes()).hexdigest()


def _labels(classes: list | None) -> list | None:
    """Class labels as the CSV wrote them: 1.0 is written 1."""
    if classes is None:
        return None
    return [int(c) if isinstance(c, float) and c.is_integer() else c for c in classes]


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


@dataclass
class Part:
    """One party's loaded part: its card and its arrays."""

    card: dict[str, Any]
    arrays: dict[str, np.ndarray]
    path: Path

    @property
    def party(self) -> int:
        return int(self.card["party"])

    @property
    def meta(self) -> dict[str, Any]:
        return self.card.get("meta") or {}


def _read_inside(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file that is not a symlink (``O_NOFOLLOW``: a link to a
    file outside the model folder is refused, never read), of at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        why = "a symlink" if path.is_symlink() else (exc.strerror or "unreadable")
        raise ModelFileError(
            f"model file {str(path)!r} must be a regular file, got {why}"
        ) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ModelFileError(f"model file {str(path)!r} must be a regular file")
        if st.st_size > limit:
            raise ModelFileError(
                f"model file {str(path)!r} must be at most {limit} bytes, got {st.st_size}"
            )
        return fh.read(limit + 1)


def _load_array(path: Path, expected: str) -> np.ndarray:
    """A verified .npy: its sha256 matches the card, its header is plain, no pickle."""
    data = _read_inside(path, MAX_ARRAY_BYTES + 65536)
    if hashlib.sha256(data).hexdigest() != expected:
        raise ModelFileError(
            f"model file {str(path)!r} must match the sha256 in its card.json, got a different "
            "hash (the file was altered)"
        )
    import io

    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read(f)
    except (ValueError, SyntaxError, TypeError):  # their text quotes the header: never shown
        raise ModelFileError(f"model file {str(path)!r} must be a .npy array") from None
    if dtype.hasobject or dtype.kind not in "fiu":
        raise ModelFileError(f"model file {str(path)!r} must hold numbers, got dtype {dtype}")
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if need > MAX_ARRAY_BYTES or len(data) - f.tell() != need:
        raise ModelFileError(
            f"model file {str(path)!r} must hold exactly the bytes its header announces "
            f"({need}), got {len(data) - f.tell()}"
        )
    return np.load(io.BytesIO(data), allow_pickle=False)


def load_part(d: str | Path) -> Part:
    """Load and check one party's directory (card, hashes, format version)."""
    d = Path(d)
    card_path = d / "card.json"
    if not card_path.is_file() and not card_path.is_symlink():
        raise ModelFileError(f"model directory {str(d)!r} must hold card.json, not found")
    try:
        card = json.loads(_read_inside(card_path, MAX_CARD_BYTES).decode("utf-8"))
    except UnicodeDecodeError:
        raise ModelFileError(f"model card {str(card_path)!r} must be UTF-8 JSON") from None
    except RecursionError:
        raise ModelFileError(f"model card {str(card_path)!r} nests too deeply") from None
    except ValueError as exc:  # the position only: JSON errors do not quote the text
        raise ModelFileError(f"model card {str(card_path)!r} must be JSON: {exc}") from None
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise ModelFileError(f"model card {str(card_path)!r} must have format {FORMAT!r}")
    if card.get("format_version") != FORMAT_VERSION or card.get("kind") not in KINDS:
        raise ModelFileError(
            f"model card {str(card_path)!r} must have format_version {FORMAT_VERSION} and kind "
            f"in {list(KINDS)}, got {card.get('format_version')!r} / {card.get('kind')!r} "
            "(saved by another version)"
        )
    files = card.get("files")
    if not isinstance(files, dict):
        raise ModelFileError(f"model card {str(card_path)!r} must list its files with sha256")
    arrays = {}
    for name, digest in files.items():
        if not isinstance(name, str) or not _NAME.match(name) or not name.endswith(".npy"):
            raise ModelFileError(f"model card {str(card_path)!r} lists a bad file name {name!r}")
        path = d / name
        if not path.is_file() and not path.is_symlink():
            raise ModelFileError(f"model file {str(path)!r} listed in its card must exist")
        arrays[name[: -len(".npy")]] = _load_array(path, str(digest))
    _check_fields(card, arrays, card_path)
    return Part(card, arrays, d)


_FIELDS = {
    "model_id": str,
    "party": int,
    "n_parties": int,
    "data_parties": int,
    "label_party": int,
    "method": str,
    "task": str,
    "columns": dict,
    "preprocessing": dict,
    "meta": dict,
    "spec": dict,
}


def _check_fields(card: dict, arrays: dict, path: Path) -> None:
    """Every field scoring reads is there with its type and range (a KeyError, a math domain
    error or a matmul ValueError would be a traceback)."""
    for key, kind in _FIELDS.items():
        if not isinstance(card.get(key), kind) or isinstance(card.get(key), bool):
            raise ModelFileError(
                f"model card {str(path)!r} must have {key!r} of type {kind.__name__}, got "
                f"{type(card.get(key)).__name__}"
            )
    _check_ranges(card, arrays, path)
    meta, head = card["meta"], bool(card["meta"].get("head"))
    need = ["columns.indices", "columns.names", "preprocessing.row_norm_bound_sq"]
    if card["kind"] == "linear":
        need += ["array w"] + (["array bias", "meta link"] if head else [])
    elif card["kind"] == "trees":  # secureboost: every party its lookup table, L the skeleton
        need += ["array lookup_column", "array lookup_bin", "meta bins", "meta depth"]
        tree = ["tree_owner", "tree_record", "tree_left", "tree_right", "tree_value"]
        need += [f"array {a}" for a in (*tree, "tree_roots", "tree_base")] if head else []
        need += ["meta link"] if head else []
    else:
        own_columns = (meta.get("head_input") or {}).get("own_columns")  # no bottom of its own
        bottom = (card["party"] < card["data_parties"] and not own_columns) or meta.get("pooled")
        need += ["meta bottom_layers"] if bottom else []
        need += ["meta head_layers", "meta aggregation", "meta link"] if head else []
    for item in need:
        where, _, key = item.replace(".", " ").partition(" ")
        holder = {"array": arrays, "meta": meta}.get(where, card.get(where, {}))
        if key not in holder:
            raise ModelFileError(f"model card {str(path)!r} must have {item}, not found")
    pooled = card.get("pooled_columns")
    for cols in [card["columns"], *(pooled if isinstance(pooled, list) else [])]:
        check_columns(cols, f"model card {str(path)!r}")


def _finite(values: list) -> bool:
    return all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


def check_columns(cols: Any, where: str) -> None:
    """A card's column record is consistent before anything reads it: indices and names of
    one length, a scaling range ``[lo, hi]`` per input, an encoder (a CSV's) whose columns
    become exactly those inputs (ModelFileError naming the rule)."""
    from securevfl.data.saved_encoder import rules_from_json

    if not isinstance(cols, dict):
        raise ModelFileError(f"{where} must have columns as an object, got {type(cols).__name__}")
    idx, names = cols.get("indices"), cols.get("names")
    if not (
        isinstance(idx, list)
        and isinstance(names, list)
        and len(idx) == len(names)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in idx)
        and all(isinstance(n, str) for n in names)
    ):
        raise ModelFileError(
            f"{where} must have columns.indices (integers >= 0) and columns.names (strings) "
            "of one length"
        )
    scaling = cols.get("scaling")
    if scaling is not None and not (
        isinstance(scaling, list)
        and len(scaling) == len(idx)
        and all(
            isinstance(r, list) and len(r) == 2 and _finite(r) and r[0] <= r[1] for r in scaling
        )
    ):
        raise ModelFileError(
            f"{where} must have columns.scaling as one finite [lo, hi] (lo <= hi) per input "
            f"({len(idx)})"
        )
    center = cols.get("center")
    if center is not None and not (
        isinstance(center, list)
        and len(center) == len(idx)
        and all(c is None or (isinstance(c, list) and len(c) == 2 and _finite(c)) for c in center)
    ):
        raise ModelFileError(
            f"{where} must have columns.center as null or [mean, scale] per input ({len(idx)})"
        )
    if "encoder" not in cols:
        return
    try:
        rules = rules_from_json(cols["encoder"], where)
    except DataError as exc:
        raise ModelFileError(str(exc)) from None
    outputs = [n for r in rules for n in r.outputs]
    if outputs != names or scaling is None:
        raise ModelFileError(
            f"{where} must have an encoder whose columns become its inputs {names} (with a "
            f"scaling range each), got {outputs}"[:300]
        )


def _check_ranges(card: dict, arrays: dict, path: Path) -> None:
    """Counts, indices, the task and the row-norm bound within their ranges, and the arrays of
    a linear part of the width its columns give."""

    def bad(what: str, got: Any) -> ModelFileError:
        return ModelFileError(f"model card {str(path)!r} must have {what}, got {str(got)[:80]!r}")

    n = card["n_parties"]
    if not 1 <= n <= MAX_PARTIES:
        raise bad(f"n_parties in [1, {MAX_PARTIES}]", n)
    for key in ("party", "label_party"):
        if not 0 <= card[key] < n:
            raise bad(f"{key} in [0, {n})", card[key])
    if not 1 <= card["data_parties"] <= n:
        raise bad(f"data_parties in [1, {n}]", card["data_parties"])
    if card["task"] not in TASKS:
        raise bad(f"task in {list(TASKS)}", card["task"])
    classes = card.get("n_classes")
    if card["task"] == "regression" and classes is not None:
        raise bad("no n_classes for task regression", classes)
    if card["task"] != "regression" and (type(classes) is not int or not 2 <= classes <= 1 << 16):
        raise bad(f"n_classes in [2, 65536] for task {card['task']}", classes)
    link = card["meta"].get("link")
    if link is not None and (link == "identity") != (card["task"] == "regression"):
        raise bad(f"a link that fits task {card['task']} (identity for regression only)", link)
    bound = card["preprocessing"].get("row_norm_bound_sq")
    if type(bound) not in (int, float) or not (0 < bound and math.isfinite(bound)):
        raise bad("preprocessing.row_norm_bound_sq a finite number > 0", bound)
    cols = card["columns"]
    indices, names = cols.get("indices"), cols.get("names")
    if not isinstance(indices, list) or not all(type(c) is int and c >= 0 for c in indices):
        raise bad("columns.indices a list of column numbers", indices)
    if not isinstance(names, list) or len(names) != len(indices):
        raise bad(f"columns.names a list of {len(indices)} names", names)
    w = arrays.get("w")
    if card["kind"] == "linear" and w is not None:
        pooled = card.get("pooled_columns")
        width = (
            sum(len(c.get("indices") or []) for c in pooled if isinstance(c, dict))
            if isinstance(pooled, list)
            else len(indices)
        )
        extra = 1 if card["meta"].get("head") and card["meta"].get("intercept") else 0
        if w.ndim not in (1, 2) or w.shape[0] not in (width, width + extra) or not w.size:
            raise bad(f"array w of {width} rows (one per column)", w.shape)


def load_parts(root: str | Path) -> dict[int, Part]:
    """Every party's part under ``root`` (``party_<k>/``), or ``root`` itself if it is one."""
    root = Path(root)
    if not root.is_dir():
        raise ModelFileError(f"--model must be a directory, got {str(root)!r}")
    if (root / "card.json").is_file():
        part = load_part(root)
        return {part.party: part}
    parts = {}
    for d in sorted(root.glob("party_*")):
        if d.is_symlink() or not d.is_dir():  # a link out of the model folder is not followed
            raise ModelFileError(f"model part {str(d)!r} must be a directory, not a link")
        part = load_part(d)
        if d.name != f"party_{part.party}":
            raise ModelFileError(
                f"model card {str(d / 'card.json')!r} must belong to party {d.name[6:]}, "
                f"got party {part.party} (a party's model used for another party)"
            )
        parts[part.party] = part
    if not parts:
        raise ModelFileError(f"--model must hold party_<k>/card.json, none in {str(root)!r}")
    ids = {p.card.get("model_id") for p in parts.values()}
    if len(ids) != 1:
        raise ModelFileError(
            f"model parts under {str(root)!r} must come from one training run, got model ids "
            f"{sorted(map(str, ids))}"
        )
    return parts
