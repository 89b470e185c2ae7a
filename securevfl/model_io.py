"""Saved models: each party writes only its own trained part, and loading never runs code.

Layout: ``DIR/party_<k>/`` per party, holding ``card.json`` (the model card) and one ``.npy``
per array. Arrays are written with ``allow_pickle=False`` and read with ``allow_pickle=False``
after their sha256 (listed in the card) matched, so a file cannot execute code, and one whose
bytes were altered is refused before it is parsed. The card records the method, its settings,
the party's column names and order, the preprocessing a new row needs (scaling ranges, centring),
the training run's privacy record, the library version and the format version.
"""

from __future__ import annotations

import hashlib
import json
import re
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
    text = json.dumps({"spec": spec.to_config(), "d": spec.dataset, "m": spec.method}, default=str)
    return hashlib.sha256(f"{shared_seed}/{text}".encode()).hexdigest()[:16]


def _columns(k: int, views: dict, info: Any, facts: dict, spec: Any) -> dict[str, Any]:
    """Party ``k``'s columns: global indices, names, and how a raw value becomes an input."""
    from securevfl.data.custom import CSV_PREFIX, schema_of

    if k >= info.data_parties:
        return {"indices": [], "names": []}
    cols = [int(c) for c in views[k].columns]
    names = facts.get("feature_names") or []
    out: dict[str, Any] = {
        "indices": cols,
        "names": [names[c] if c < len(names) else f"x{c}" for c in cols],
    }
    schema = schema_of(spec.dataset) if spec.dataset.startswith(CSV_PREFIX) else None
    if schema is not None:  # a user CSV: raw names, and each column's min/max scaling range
        out["names"] = list(schema["headers"][k])
        out["scaling"] = [schema["scaling"][c] for c in cols]
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
) -> list[Path]:
    """Write every local party's part of ``fit.model`` under ``root``; return the directories."""
    from securevfl.data.custom import CSV_PREFIX, schema_of

    if fit.model is None and fit.model_refusal is None and not here_label:
        return []  # nothing lives here (a local-only baseline's passive party)
    if fit.model is None:
        why = fit.model_refusal or "it returns no model to save"
        raise ConfigError(f"--save does not apply to method {spec.method!r} yet: {why}")
    schema = schema_of(spec.dataset) if spec.dataset.startswith(CSV_PREFIX) else None
    written = []
    mid = model_id(spec, shared_seed)
    for k, part in sorted(fit.model.items()):
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
                "steps": "raw -> min/max scaling to [-1, 1] (clipped) -> centring (clipped to "
                "[-1, 1]) where recorded -> divided by sqrt(row_norm_bound_sq)",
            },
            "meta": part.meta,
            "privacy": fit.privacy.to_dict() if fit.privacy is not None else None,
            "noise_seeded": spec.seed is not None,
            # the label holder's check: a reloaded model must predict these test classes
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


def _load_array(path: Path, expected: str) -> np.ndarray:
    """A verified .npy: its sha256 matches the card, its header is plain, no pickle."""
    data = path.read_bytes()
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
    except (ValueError, SyntaxError) as exc:
        raise ModelFileError(f"model file {str(path)!r} must be a .npy array: {exc}") from None
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
    if not card_path.is_file():
        raise ModelFileError(f"model directory {str(d)!r} must hold card.json, not found")
    try:
        card = json.loads(card_path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
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
        if not path.is_file():
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
    """Every field scoring reads is there with its type (a KeyError would be a traceback)."""
    for key, kind in _FIELDS.items():
        if not isinstance(card.get(key), kind):
            raise ModelFileError(
                f"model card {str(path)!r} must have {key!r} of type {kind.__name__}, got "
                f"{type(card.get(key)).__name__}"
            )
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
