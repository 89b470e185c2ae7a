"""What a run is and what each party is handed: the spec, the party views, the public facts.

These types sit below every layer that runs a method (training, methods, experiment, bench), so
none of them has to import upward to learn what a run looks like.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from securevfl.options import Option, parse_bool
from securevfl.registry import lookup
from securevfl.rng import UnderNoised, make_noise_rng, make_rng

if TYPE_CHECKING:  # annotations only: the run types sit below the runtime
    from securevfl.runtime.base import Runtime

__all__ = [
    "AuditTap",
    "Option",
    "PartyView",
    "PublicInfo",
    "RunContext",
    "RunSpec",
    "fingerprint",
    "has_budget",
    "is_private",
    "noise_seed",
    "parse_bool",
]


class HasOptions(Protocol):
    """What :meth:`RunSpec.option` reads of a method: its table of options (``Method.options``)."""

    options: dict[str, Option]


@dataclass
class RunSpec:
    """Everything that defines one run; built from flat values by ``run_options.build_spec``."""

    method: str
    dataset: str = "breast"
    parties: int = 2
    model: str = "glm"
    epochs: int = 10
    batch_size: int = 64
    lr: float | None = None  # None: the trainer's default (GLM 4.0, split-NN Adam 0.01)
    seed: int | None = None
    # draw DP noise from ``seed`` (a named reproduction mode: the record then prints no ε)
    reproducible_noise: bool = False
    epsilon: float | None = None
    delta: float | None = None
    partition: str = "contiguous"
    loss: str | None = None
    penalty: str = "l2"
    lam: float = 0.0
    embedding_dim: int = 8
    hidden: int = 32
    aggregation: str = "sum"
    center: bool = False  # centre numeric columns on their training mean (see experiment.py)
    id_column: str | None = None  # csv: datasets: align the parties' rows by PSI on this column
    bounds: str | None = None  # csv: datasets: a file of public column domains (data/bounds.py)
    # csv: datasets without --bounds in a run with an ε: the budget's share for DP ranges
    # (privacy/dp_bounds.py); None: its default
    bounds_share: float | None = None
    data: str | None = None  # this party's own CSV file (dataset "csv"): it names no other's
    engine: str = "numpy"  # where a party's own products run (engine.py); its own
    dask_scheduler: str | None = None  # --engine dask: this party's scheduler (default: local)
    dataset_options: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    timeout: float = 120.0

    def option(self, name: str, method: HasOptions) -> Any:
        """The value of a method option, its default when not given."""
        return self.options.get(name, method.options[name].default)

    def to_config(self) -> dict[str, Any]:
        out = {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("method", "dataset", "parties", "options", "dataset_options")
            # records of runs without --data (or --bounds-share) keep their keys
            and not (k in ("data", "bounds_share") and v is None)
        }
        out.update(self.dataset_options)
        out.update(self.options)
        return out


def has_budget(spec: RunSpec) -> bool:
    """Whether the run is calibrated to a privacy budget (``--epsilon``)."""
    return spec.epsilon is not None


def is_private(spec: RunSpec) -> bool:
    """Whether the run reports an ε: a budget, or a DP method (PBM/LDP noise from options)."""
    if has_budget(spec):
        return True
    try:
        return "dp" in str(lookup("method", spec.method).family)
    except Exception:  # an unknown method is refused elsewhere, with its own message
        return False


def noise_seed(spec: RunSpec) -> int | None:
    """The seed of a run's noise generators: ``--seed`` in the reproduction mode or in a run
    that reports no ε (its randomness protects nothing DP: ZO directions, quantisation); in a
    private run None (the CSPRNG)."""
    return spec.seed if spec.reproducible_noise or not is_private(spec) else None


@dataclass
class PartyView:
    """What one party holds: its own columns, and the labels only if it is the label holder."""

    index: int
    columns: np.ndarray
    X_train: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray | None = None
    y_test: np.ndarray | None = None


@dataclass(frozen=True)
class PublicInfo:
    """Facts every party knows: sizes and schema, never values."""

    dataset: str
    task: str
    n_classes: int | None
    n_train: int
    n_test: int
    n_features: int
    features_per_party: tuple[int, ...]
    data_parties: int
    n_parties: int
    label_party: int
    server: int | None
    row_norm_bound_sq: float
    # values the loader computed from the rows (``Dataset.fitted``; empty: public scaling)
    fitted: tuple[str, ...] = ()
    # the data parties that released DP scaling ranges (``Dataset.dp_bounds``)
    dp_bounds: tuple[int, ...] = ()


@dataclass(frozen=True)
class AuditTap:
    """How ``securevfl audit`` runs a trial: fresh noise each trial, and ``noise_divisor`` > 1
    for a deliberately under-noised variant (its record says so: its ε is then false).
    ``seen`` collects ``(ctx, hooks)`` from the trainers (``saw``): the release-step audit draws
    more releases from the very hooks the run used (``securevfl.audit.release``)."""

    noise_divisor: float = 1.0
    # the variant divides only the noise generators whose purpose contains this (one release
    # family, e.g. "release-once/bottom"); None: every generator
    family: str | None = None
    seen: list[tuple[Any, Any]] = field(default_factory=list, compare=False)
    facts: dict[str, Any] = field(default_factory=dict, compare=False)

    def saw(self, ctx: Any, hooks: Any, **facts: Any) -> None:
        """A trainer's call: the hooks (and context) that make this run's releases, and the
        schedule's settings the whole-run view needs (e.g. the release-once ``plan``)."""
        self.seen.append((ctx, hooks))
        self.facts.update(facts)


@dataclass
class RunContext:
    """Handed to ``Method.fit``: the runtime, the spec, local party views, seeds."""

    rt: Runtime
    spec: RunSpec
    info: PublicInfo
    views: dict[int, PartyView]
    shared_seed: int
    pooled: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None
    audit: AuditTap | None = None  # set by ``securevfl audit`` only, never by ``run``
    # the local parties' records (securevfl.run.parties.Party): where their keys are kept
    parties: dict[int, Any] = field(default_factory=dict)

    def hold_key(self, party: int, kind: str, key: Any) -> None:
        """Keep ``key`` (a handle, not a copy) on ``party``'s record as its ``kind`` key
        ("he", "secagg"); nothing where the party does not live in this process."""
        p = self.parties.get(party)
        if p is None:
            return
        if not hasattr(p.keys, kind):
            raise ValueError(f"key kind must be one of identity, he, secagg, got {kind!r}")
        setattr(p.keys, kind, key)

    engines: dict[int, Any] = field(default_factory=dict)  # --engine dask: a party's cluster

    def engine(self, party: int) -> Any:
        """Where party ``party`` computes its own products (:mod:`securevfl.engine`)."""
        from securevfl.engine import NUMPY

        return self.engines.get(party, NUMPY)

    def noise_rng(self, party: int, purpose: str) -> np.random.Generator:
        """Noise generator of one party: in a private run the AES-CTR CSPRNG whatever ``--seed``
        is, unless the run names the reproduction mode (``reproducible_noise``: noise from the
        seed); in a run with no ε, ``--seed`` (:func:`noise_seed`)."""
        if self.audit is None:
            return make_noise_rng(noise_seed(self.spec), purpose=f"noise/{purpose}", party=party)
        # an audit trial: the public randomness (split, init, batch order) stays seeded while
        # the noise is fresh each trial; an under-noised variant divides the noise
        rng = make_noise_rng(None, purpose=f"noise/{purpose}", party=party)
        if self.audit.noise_divisor == 1.0 or (
            self.audit.family is not None and self.audit.family not in purpose
        ):
            return rng
        return UnderNoised(rng, self.audit.noise_divisor)  # type: ignore[return-value]

    def shared_rng(self, purpose: str) -> np.random.Generator:
        """A generator every party can reproduce (minibatch order, public initialisation)."""
        return make_rng(self.shared_seed, purpose=purpose)

    @property
    def data_parties(self) -> range:
        return range(self.info.data_parties)


def fingerprint(*arrays: np.ndarray) -> str:
    """sha256 of parameter arrays: compares models across runtimes without moving them."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]
