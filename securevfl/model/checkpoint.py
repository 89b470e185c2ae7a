"""Checkpoints of long runs: ``--checkpoint-every N --checkpoint DIR`` and ``--resume DIR``.

Every N epochs each local party writes its own state (``DIR/party_<k>/``: ``.npy`` arrays with
their sha256 in ``state.json``, written to a temporary directory and renamed, so a kill leaves
the previous checkpoint whole). A resumed run loads it and trains the remaining epochs; with the
same ``--seed`` the minibatch order is the same, so it ends with the same model as a run that was
never interrupted. Built for the GLM trainer (vfl, local with ``--model glm``, hdp-vfl) and the
split-NN trainer (vfl, local with ``--model mlp``: parameters and Adam moments; ldp-vfl and
afe-vfl): a DP method's releases, write-ahead log and hook state are kept by
``securevfl.model.checkpoint_privacy``; a method whose hooks hold state a checkpoint does not keep
refuses, naming why.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
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
    dataset: str = ""  # a csv: dataset's encoders and scaling must be the same on resume
    used: bool = False  # a trainer took the settings (else the method cannot checkpoint)
    loaded: dict = field(default_factory=dict)  # party -> its loaded checkpoint (read once)
    centrings_again: int = 0  # earlier runs' centring releases the record composes too

    def check_method(self, refusal: str | None, method: str) -> None:
        """``refusal``: why the method's hooks cannot resume (None: they can)."""
        self.used = True
        if refusal is not None:
            raise ConfigError(
                f"--checkpoint-every/--resume do not apply to method {method!r} yet: {refusal}"
            )

    def save(self, k: int, epoch: int, arrays: dict[str, np.ndarray], extra: dict) -> None:
        """Party ``k``'s state after ``epoch`` epochs: written in a directory of its own, then
        ``latest.json`` is replaced atomically to point at it (a kill at any moment leaves a
        whole checkpoint), then all but the previous one go."""
        party = self.root / f"party_{k}"
        tmp = party / f"e{epoch}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        files = {}
        for name, a in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(a), allow_pickle=False)
            files[f"{name}.npy"] = hashlib.sha256((tmp / f"{name}.npy").read_bytes()).hexdigest()
        doc = {"run_key": self.run_key, "epoch": epoch, "files": files, **extra}
        if self.data_key() is not None:  # a csv: dataset's encoding (nothing else has one)
            doc["data_key"] = self.data_key()
        (tmp / "state.json").write_text(json.dumps(doc))
        (party / "latest.tmp").write_text(json.dumps({"dir": tmp.name}))
        os.replace(party / "latest.tmp", party / "latest.json")
        # keep the previous checkpoint too: the parties of one process write one after the
        # other, so a kill between them leaves some a checkpoint ahead (resume uses the newest
        # epoch every party has)
        for old in _whole_epochs(party)[:-2]:
            shutil.rmtree(party / f"e{old}", ignore_errors=True)

    def data_key(self) -> str | None:
        """A digest of a ``csv:`` dataset's encoders and scaling ranges as registered now
        (None for a catalogue dataset): the same files' paths may hold other rows on resume,
        and a model trained on one encoding must not continue on another."""
        from securevfl.data.custom import schema_of

        schema = schema_of(self.dataset) if self.dataset.startswith(("csv:", "parquet:")) else None
        if schema is None:
            return None
        return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]

    def _common_epoch(self, latest: int) -> int:
        """The newest epoch whose checkpoint every party directory holds (at most ``latest``,
        this party's own pointer): a kill between two parties' saves leaves one ahead."""
        held = [set(_whole_epochs(p)) for p in sorted(self.root.glob("party_*"))]
        common = set.intersection(*held) if held else set()
        common = {e for e in common if e <= latest}
        if not common:
            raise DataError(
                f"checkpoint {str(self.root)!r} must hold one epoch saved by every party, got "
                f"{[sorted(h) for h in held]}"
            )
        return max(common)

    def load(self, k: int) -> tuple[dict, dict[str, np.ndarray]] | None:
        """Party ``k``'s checkpoint (hash-checked), None when resuming is off."""
        if not self.resume:
            return None
        if k not in self.loaded:
            self.loaded[k] = self._load(k)
        return self.loaded[k]

    def _load(self, k: int) -> tuple[dict, dict[str, np.ndarray]]:
        party = self.root / f"party_{k}"
        latest = party / "latest.json"
        if not latest.is_file():
            raise ConfigError(f"--resume must name a checkpoint directory, no {str(latest)!r}")
        try:
            name = str(json.loads(latest.read_text())["dir"])
            if not re.fullmatch(r"e\d+", name):
                raise ValueError(f"a checkpoint directory is e<epoch>, got {name!r}")
            d = party / f"e{self._common_epoch(int(name[1:]))}"
            path = d / "state.json"
            doc = json.loads(path.read_text())
        except (ValueError, KeyError, OSError) as exc:
            raise DataError(
                f"checkpoint {str(latest)!r} must point at a whole state: {exc}"
            ) from None
        if doc.get("run_key") != self.run_key:
            raise ConfigError(
                f"checkpoint {str(path)!r} must come from this run's settings (same method, "
                "dataset, options, --seed and --reproducible-noise), got another run's"
            )
        if doc.get("data_key") != self.data_key():
            raise ConfigError(
                f"checkpoint {str(path)!r} must come from the same CSV encoding (columns, "
                "categories, missing-value indicators, scaling ranges), got another: the files "
                "changed since the checkpoint was written"
            )
        arrays = {}
        from securevfl.model.files import _load_array

        for name, digest in doc["files"].items():
            arrays[name[: -len(".npy")]] = _load_array(d / name, digest)
        return doc, arrays


def _whole_epochs(party: Path) -> list[int]:
    """The epochs of a party's whole checkpoints (``state.json`` is written last), ascending."""
    out = []
    for d in party.glob("e*"):
        if re.fullmatch(r"e\d+", d.name) and (d / "state.json").is_file():
            out.append(int(d.name[1:]))
    return sorted(out)


def epoch_stats(stats: Any) -> dict[str, list]:
    """The per-epoch statistics a checkpoint keeps (a resumed run reports every epoch)."""
    keys = ("epoch_s", "epoch_cpu_s", "epoch_loss", "epoch_accuracy")
    return {k: list(getattr(stats, k)) for k in keys}


def restore_stats(stats: Any, doc: dict) -> None:
    for key, values in (doc.get("stats") or {}).items():
        setattr(stats, key, list(values))


def torch_arrays(prefix: str, module: Any, opt: Any) -> dict[str, np.ndarray]:
    """A torch module's parameters and its Adam optimiser's moments and step counts, as
    arrays named ``<prefix>p<i>``, ``<prefix>m<i>``, ``<prefix>v<i>``, ``<prefix>t<i>`` (the
    optimiser's state resumes too: without it the updates after a resume would differ)."""
    out: dict[str, np.ndarray] = {}
    for i, p in enumerate(module.parameters()):
        out[f"{prefix}p{i}"] = p.detach().numpy().copy()
    for i, st in opt.state_dict()["state"].items():
        out[f"{prefix}m{i}"] = st["exp_avg"].numpy().copy()
        out[f"{prefix}v{i}"] = st["exp_avg_sq"].numpy().copy()
        out[f"{prefix}t{i}"] = np.asarray([float(st["step"])], dtype=np.float64)
    return out


def load_torch(prefix: str, module: Any, opt: Any, arrays: dict[str, np.ndarray]) -> None:
    """Put :func:`torch_arrays`'s arrays back into ``module`` and ``opt`` (shapes checked)."""
    import torch

    params = list(module.parameters())
    with torch.no_grad():
        for i, p in enumerate(params):
            a = arrays.get(f"{prefix}p{i}")
            if a is None or tuple(a.shape) != tuple(p.shape):
                raise ConfigError(
                    f"checkpoint must hold {prefix}p{i} of shape {tuple(p.shape)}, got "
                    f"{None if a is None else tuple(a.shape)} (another model's checkpoint?)"
                )
            p.copy_(torch.from_numpy(np.asarray(a, dtype=np.float32)))
    sd = opt.state_dict()
    state = {}
    for i in range(len(params)):
        if f"{prefix}m{i}" not in arrays:
            continue  # a parameter the optimiser never stepped
        state[i] = {
            "step": torch.tensor(float(np.asarray(arrays[f"{prefix}t{i}"]).reshape(-1)[0])),
            "exp_avg": torch.from_numpy(np.array(arrays[f"{prefix}m{i}"], dtype=np.float32)),
            "exp_avg_sq": torch.from_numpy(np.array(arrays[f"{prefix}v{i}"], dtype=np.float32)),
        }
    opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})


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
    if spec.model not in ("glm", "mlp"):
        raise ConfigError(
            f"--checkpoint-every/--resume apply to --model glm or mlp runs (the GLM and "
            f"split-NN trainers), got --model {spec.model}"
        )
    key = json.dumps({"spec": spec.to_config(), "m": spec.method, "d": spec.dataset}, default=str)
    return Checkpoints(
        Path(root),
        every or 0,
        resume is not None,
        hashlib.sha256(key.encode()).hexdigest()[:16],
        dataset=str(spec.dataset),
    )
