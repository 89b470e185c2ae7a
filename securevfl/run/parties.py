"""The parties of a run as they live in a process: each one's record (:class:`Party`), the
process's share of the table (:class:`LocalData`), who holds the labels, the column blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from securevfl.context import PartyView, RunSpec
from securevfl.data import partition_columns
from securevfl.data.datasets import Dataset
from securevfl.methods.base import Method

OWN_CSV = "csv"  # spec.dataset when each party names only its own file (spec.data)


@dataclasses.dataclass
class PartyKeys:
    """Handles to the key material one party holds, set where it is made (never a copy):

    ``identity``: its TLS certificate and key files (a run on hosts with ``--certs``);
    ``he``: its side of the run's homomorphic encryption: the key holder's key pair, a data
    party's public key; ``secagg``: its secure-aggregation side (a client's or the server's,
    holding its X25519 key-agreement key). None: the party has none in this run."""

    identity: tuple[str, str] | None = None
    he: Any = None
    secagg: Any = None


@dataclasses.dataclass
class Party:
    """One party as it lives in this process: the data it owns, its view of the run, its keys
    and, after training, its part of the model (what ``--save`` writes for it). The same record
    in one process, in ``--processes`` and on a host of its own: a process holds only the
    records of the parties that live there."""

    index: int
    source: str  # where its data comes from: a catalogue block, its own file, nothing (server)
    columns: np.ndarray  # global indices of its columns
    holds_labels: bool
    view: PartyView | None = None
    keys: PartyKeys = dataclasses.field(default_factory=PartyKeys)
    model: Any = None  # its ModelPart (securevfl.training.export) once trained; None: none


@dataclasses.dataclass
class LocalData:
    """This process's share of the table: its parties' columns in one array (``ds.columns``),
    labels only where the label holder lives; the public column blocks of every data party."""

    ds: Dataset
    blocks: list[np.ndarray]
    parties: dict[int, Party]
    alignment: dict | None = None


def label_holder(spec: RunSpec, method: Method) -> int:
    """The party that holds the labels: the server for a method whose labels live there."""
    if method.labels_at_server and method.has_server(spec):
        return spec.parties
    return 0


def own_files(spec: RunSpec) -> bool:
    """Whether each party names only its own data file (``--data``)."""
    return spec.dataset == OWN_CSV


def party_blocks(groups: list[list[int]], spec: RunSpec, seed: int) -> list[np.ndarray]:
    """Each data party's columns (global indices): one block for a pooled one-party run."""
    if spec.parties == 1:  # a pooled baseline run with one party: it holds every column
        return [np.arange(sum(len(g) for g in groups))]
    scheme: Any = spec.partition
    if scheme == "roles":  # the dataset's declared holders (a public declaration)
        from securevfl.data.datasets import role_blocks

        scheme = role_blocks(
            spec.dataset, spec.dataset_options.get("encoding"), groups, spec.parties
        )
    return partition_columns(groups, spec.parties, scheme=scheme, seed=seed)


def _parties(wanted: list[int], blocks: list[np.ndarray], holder: int, source: str) -> dict:
    """The local parties' records: a data party's source and columns, a server's none."""
    K = len(blocks)
    return {
        k: Party(
            index=k,
            source=source if k < K else "none (server)",
            columns=blocks[k] if k < K else np.arange(0, dtype=int),
            holds_labels=k == holder,
        )
        for k in wanted
    }
