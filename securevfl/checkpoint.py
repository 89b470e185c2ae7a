"""Checkpoints of long runs: ``--checkpoint-every N --checkpoint DIR`` and ``--resume DIR``.

Every N epochs each local party writes its own state (``DIR/party_<k>/``: ``.npy`` arrays with
their sha256 in ``state.json``, written to a temporary directory and renamed, so a kill leaves
the previous checkpoint whole). A resumed run loads it and trains the remaining epochs; with the
same ``--seed`` the minibatch order is the same, so it ends with the same model as a run that was
never interrupted. Built for the GLM trainer's plain runs (vfl, local with ``--model glm``):
a method whose hooks hold state of their own (noise streams, an accountant's releases) refuses,
since resuming it without that state would forget releases.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, DataError

_ACTIVE: contextvars.ContextVar[Checkpoints | None] = contextvars.ContextVar(
    "securevfl_checkpoints", default=None
)


@dataclass
class Checkpoints:
    """Where a run writes its checkpoints (``every`` epochs) and whether it resumes from them."""

    root: Path
    every: int
    resume: bool
    run_key: str  # the spec's digest: a checkpoint only resumes the run it came from
    used: bool = False  # a trainer took the settings (else the method cannot checkpoint)

    def check_method(self, plain: bool, method: str) -> None:
        self.used = True
        if not plain:
            raise ConfigError(
                f"--checkpoint-every/--resume do not apply to method {method!r} yet: its hooks "
                "hold state (noise streams, releases) a checkpoint does not keep"
            )

    def save(self, k: int, epoch: int, arrays: dict[str, np.ndarray], extra: dict) -> None:
        """Party ``k``'s state after ``epoch`` epochs: written in a directory of its own, then
        ``latest.json`` is replaced atomically to point at it (a kill at any moment leaves a
        whole checkpoint), then the older directories go."""
        party = self.root / f"party_{k}"
        tmp = party / f"e{epoch}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        files = {}
        for name, a in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(a), allow_pickle=False)
            files[f"{name}.npy"] = hashlib.sha256((tmp / f"{name}.npy").read_bytes()).hexdigest()
        doc = {"run_key": self.run_key, "epoch": epoch, "files": files, **extra}
        (tmp / "state.json").write_text(json.dumps(doc))
        (party / "latest.tmp").write_text(json.dumps({"dir": tmp.name}))
        os.replace(party / "latest.tmp", party / "latest.json")
        for old in party.glob("e*"):
            if old.name != tmp.name:
                shutil.rmtree(old, ignore_errors=True)

    def load(self, k: int) -> tuple[dict, dict[str, np.ndarray]] | None:
        """Party ``k``'s checkpoint (hash-checked), None when resuming is off."""
        if not self.resume:
            return None
        party = self.root / f"party_{k}"
        latest = party / "latest.json"
        if not latest.is_file():
            raise ConfigError(f"--resume must name a checkpoint directory, no {str(latest)!r}")
        try:
            name = str(json.loads(latest.read_text())["dir"])
            if not re.fullmatch(r"e\d+", name):
                raise ValueError(f"a checkpoint directory is e<epoch>, got {name!r}")
            d = party / name
            path = d / "state.json"
            doc = json.loads(path.read_text())
        except (ValueError, KeyError, OSError) as exc:
            raise DataError(
                f"checkpoint {str(latest)!r} must point at a whole state: {exc}"
            ) from None
        if doc.get("run_key") != self.run_key:
            raise ConfigError(
                f"checkpoint {str(path)!r} must come from this run's settings (same method, "
                "dataset, options and --seed), got another run's"
            )
        arrays = {}
        from securevfl.model_io import _load_array

        for name, digest in doc["files"].items():
            arrays[name[: -len(".npy")]] = _load_array(d / name, digest)
        return doc, arrays


def active() -> Checkpoints | None:
    """The run's checkpoint settings (set by ``run_experiment``), None when off."""
    return _ACTIVE.get()


def activate(ck: Checkpoints | None) -> contextvars.Token:
    return _ACTIVE.set(ck)


def deactivate(token: contextvars.Token) -> None:
    _ACTIVE.reset(token)


def make_checkpoints(
    spec: Any, *, every: int | None, directory: str | None, resume: str | None
) -> Checkpoints | None:
    """The settings of ``--checkpoint-every N --checkpoint DIR`` / ``--resume DIR``."""
    if every is None and resume is None and directory is None:
        return None
    if spec.seed is None:
        raise ConfigError(
            "--checkpoint-every/--resume need --seed (a resumed run replays the minibatch order)"
        )
    if every is not None and every < 1:
        raise ConfigError(f"--checkpoint-every must be >= 1, got {every}")
    root = resume or directory
    if root is None:
        raise ConfigError("--checkpoint-every needs --checkpoint DIR (or --resume DIR)")
    if every is None and directory is not None and resume is None:
        raise ConfigError("--checkpoint DIR needs --checkpoint-every N")
    if spec.model != "glm":
        raise ConfigError(
            f"--checkpoint-every/--resume apply to --model glm runs (the GLM trainer), got "
            f"--model {spec.model}"
        )
    key = json.dumps({"spec": spec.to_config(), "m": spec.method, "d": spec.dataset}, default=str)
    return Checkpoints(
        Path(root),
        every or 0,
        resume is not None,
        hashlib.sha256(key.encode()).hexdigest()[:16],
    )
