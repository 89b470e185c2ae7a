"""The digest every party of a networked run must share: run spec, run ID and code version.

Parties started with different ``--seed``, ``--lr``, ``--partition`` or code would otherwise
train together and produce a wrong record; two runs on the same ports would cross-connect. The
handshake (:func:`protocols.mpyc_net.handshake`) compares these digests in the first round.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any

# how long a party may wait is its own business, and so is its own data file and how it reads
# it (--data, --label-column, --categories, --bounds: each party names only its own); everything
# else defines the run
_LOCAL_FIELDS = frozenset({"timeout", "data", "bounds", "engine", "dask_scheduler"})
_LOCAL_DATASET_OPTIONS = frozenset({"label_column", "categories"})
PARTY_OWN = _LOCAL_FIELDS | _LOCAL_DATASET_OPTIONS  # a flat config's keys each party sets


def _shared(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """The spec without the fields each party sets for itself."""
    spec = {k: v for k, v in spec_dict.items() if k not in _LOCAL_FIELDS}
    opts = spec.get("dataset_options") or {}
    spec["dataset_options"] = {k: v for k, v in opts.items() if k not in _LOCAL_DATASET_OPTIONS}
    return spec


@functools.cache
def code_version() -> str:
    """Package version plus a hash of the sources every party runs (protocols, core, baselines)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("securevfl")
    except PackageNotFoundError:
        ver = "unknown"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    h = hashlib.sha256()
    for pkg in ("protocols", "securevfl", "baselines"):
        for dirpath, dirnames, files in os.walk(os.path.join(root, pkg)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return f"{ver}+{h.hexdigest()[:16]}"


def run_digest(spec_dict: dict[str, Any], *, run_id: str = "", n_parties: int) -> bytes:
    """SHA-256 over the canonical run spec (seed policy included), run ID, party count, code."""
    spec = _shared(spec_dict)
    spec["seed_policy"] = "os-entropy" if spec.get("seed") is None else "seeded"
    doc = {"spec": spec, "run_id": run_id, "parties": n_parties, "code": code_version()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).digest()


def run_digest_parts(
    spec_dict: dict[str, Any], *, run_id: str = "", n_parties: int
) -> dict[str, bytes]:
    """The digest's parts by the name a user would change: one short hash per option (``--seed``,
    a method option's ``--name``), ``--run-id``, the party count and the code version. Sent to
    the peers only when the digests differ, so the error names the option that differs."""
    flat = _shared(spec_dict)
    for nested in ("options", "dataset_options"):
        flat.update(flat.pop(nested, None) or {})
    named: dict[str, Any] = {f"--{k.replace('_', '-')}": v for k, v in flat.items()}
    named["--seed"] = [flat.get("seed"), "os-entropy" if flat.get("seed") is None else "seeded"]
    named.update({"--run-id": run_id, "the party count (-P)": n_parties})
    named["the code version"] = code_version()
    return {
        name: hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).digest()[:8]
        for name, v in named.items()
    }
