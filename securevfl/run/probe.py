"""Tests only: what a process holds once its views are built and once it has trained
(``$SECUREVFL_PROBE_DIR``): a test reads these files to check a data party holds no other
party's block, no labels, and no other party's keys or model part."""

from __future__ import annotations

import numpy as np

from securevfl.data.datasets import Dataset
from securevfl.run.parties import LocalData, Party

PROBE_ENV = "SECUREVFL_PROBE_DIR"  # tests: where each process writes what it holds


def write_probe(data: LocalData, train: Dataset, test: Dataset) -> None:
    """Tests only (``$SECUREVFL_PROBE_DIR`` set): write what this process holds once its views
    are built: each local party's columns and whether it holds labels, and the sha256 of every
    numeric array reachable from a live object, so a test can check that a data party's
    process holds no label vector and no other party's block."""
    import json
    import os

    where = os.environ.get(PROBE_ENV)
    if not where:
        return
    arrays = _live_arrays()
    doc = {
        "parties": {
            str(k): {
                "source": p.source,
                "columns": [int(c) for c in p.columns],
                "holds_labels": p.holds_labels,
                "view_labels": p.view is not None and p.view.y_train is not None,
            }
            for k, p in data.parties.items()
        },
        "train_labels": train.y is not None,
        "arrays": arrays,
    }
    name = "_".join(str(k) for k in data.parties) or "none"
    with open(os.path.join(where, f"probe_{name}.json"), "w") as f:
        json.dump(doc, f)


# the objects that hold key material, found by type name (this module imports no protocol)
KEY_TYPES = ("SecAggParty", "SecAggServer", "PaillierPrivateKey", "PaillierPublicKey", "KeyHolder")


def write_trained_probe(parties: dict[int, Party]) -> None:
    """Tests only: after training, each local party's keys (as :func:`key_facts`) and the sha256
    of its model part's arrays; every key-holding object alive in the process; the sha256 of
    every numeric array reachable from a live object."""
    import gc
    import json
    import os

    where = os.environ.get(PROBE_ENV)
    if not where:
        return
    held = [key_facts(o) for o in gc.get_objects() if type(o).__name__ in KEY_TYPES]
    doc = {
        "parties": {
            str(k): {
                "identity": p.keys.identity is not None,
                "he": None if p.keys.he is None else key_facts(p.keys.he),
                "secagg": None if p.keys.secagg is None else key_facts(p.keys.secagg),
                "model": None
                if p.model is None
                else {n: _sha(np.asarray(a)) for n, a in p.model.arrays.items()},
            }
            for k, p in parties.items()
        },
        "keys_held": held,
        "arrays": _live_arrays(),
    }
    name = "_".join(str(k) for k in parties) or "none"
    with open(os.path.join(where, f"trained_{name}.json"), "w") as f:
        json.dump(doc, f)


def key_facts(obj: object) -> dict:
    """What names a key-holding object without its secret: its type, whether it holds a private
    key (decrypts, unmasks), the sha256 of its public key, a secure-aggregation index."""
    import hashlib

    name = type(obj).__name__
    if isinstance(obj, tuple):  # (Paillier public key, private key or None): he-vfl's key holder
        obj, private = obj[0], obj[1] is not None
    else:
        private = name in ("SecAggParty", "SecAggServer", "PaillierPrivateKey", "KeyHolder")
        private = private or getattr(obj, "priv", None) is not None  # secureboost's Crypto
    public: bytes | None = None
    if name in ("SecAggParty", "SecAggServer"):
        public = obj.public_key  # type: ignore[attr-defined]
    else:  # a Paillier public key, a private key's, or a Crypto's: its modulus n
        pk = getattr(obj, "pub", None) or getattr(obj, "public_key", None) or obj
        n = getattr(pk, "n", None)
        public = None if n is None else str(n).encode()
    return {
        "type": name,
        "private": private,
        "public": None if public is None else hashlib.sha256(public).hexdigest(),
        "index": getattr(obj, "index", None),
    }


def _sha(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _live_arrays() -> dict[str, list[int]]:
    """sha256 -> shape of every non-empty numeric array reachable from a live object."""
    import gc
    import warnings

    arrays: dict[str, list[int]] = {}
    with warnings.catch_warnings():  # touching some modules' deprecated names warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            for a in gc.get_referents(obj):
                if isinstance(a, np.ndarray) and a.dtype.kind in "iuf" and a.size:
                    arrays[_sha(a)] = list(a.shape)
    return arrays
