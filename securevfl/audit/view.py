"""What the auditor sees, per method: which party's recorded view, and which numbers of it.

Three kinds of view, all read from the runtime's recorded party view (what the runtime
delivered, so they survive changes to a method's schedule):

- ``per-row``: the numbers a receiver got about the canary row from the canary's party (HDP-VFL's
  noisy intermediate results, a split-NN's noisy embeddings), in delivery order;
- ``payloads``: FM-VFL's released model, through the passive party's score on the canary row
  (it is appended to the test rows) and the active party's own;
- ``outputs``: the released model's score on the canary row (pooled baselines: the model is
  the release);
- ``scores``: the label holder's output on the canary row (pbm-vfl: secure aggregation leaves
  no per-party message to read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.methods.base import Method
from securevfl.runtime.view import View

CANARY_ROW = 0  # the training row the audit changes (any fixed row will do)
CANARY_PARTY = 1  # party-row canaries live in this data party's block


@dataclass(frozen=True)
class AuditorView:
    """Who audits and what it reads; ``whole_row``: the canary changes the whole row and its
    label (sample unit), else only party ``CANARY_PARTY``'s block (party-row unit)."""

    kind: str  # per-row | payloads | outputs | scores
    party: int
    sender: int | None
    whole_row: bool
    describe: str


def auditor_view(method: Method, spec: Any) -> AuditorView:
    """The auditor's view for ``method`` (see the module docstring)."""
    if method.pooled_data:
        return AuditorView(
            "outputs", 0, None, True, "the released model's log-odds on the canary row"
        )
    if method.name.startswith("fm-"):
        return AuditorView(
            "payloads",
            0,
            None,
            True,
            "the model solved from the released noisy objective: the passive party's score "
            "x_B·w_B on the canary row and the active party's output on it",
        )
    server = method.n_parties(spec) - 1 if method.has_server(spec) else None
    if method.name == "pbm-vfl":  # secure aggregation hides party 1's own message
        return AuditorView(
            "scores",
            0 if server is None else server,
            None,
            False,
            "the label holder's (the server's) output on the canary row (party 1's block of it "
            "released through PBM and secure aggregation, summed, and scored by the head): "
            "secure aggregation hides party 1's own message",
        )
    party = 0 if server is None else server
    what = "intermediate results" if spec.model == "glm" else "embeddings"
    return AuditorView(
        "per-row",
        party,
        CANARY_PARTY,
        False,
        f"the noisy {what} of the canary row that passive party {CANARY_PARTY} released to "
        f"party {party}" + (" (the server)" if server is not None else ""),
    )


def _array(payload: Any) -> np.ndarray | None:
    """A payload as a float array: numeric arrays as they are, the compressed byte messages of
    split learning decoded as the receiver decodes them; None for anything else."""
    if isinstance(payload, np.ndarray) and payload.dtype.kind in "fiub":
        return payload.astype(np.float64)
    if isinstance(payload, bytes | bytearray):
        from protocols.compress import decode

        try:
            out = decode(bytes(payload))
        except ValueError:  # not a compressed array (a mask's bookkeeping, a key): not per-row
            return None
        return out.astype(np.float64) if isinstance(out, np.ndarray) else None
    return None


def canary_score(outputs: np.ndarray) -> np.ndarray:
    """The released model's score on the canary (the last test row) as log-odds: linear in a
    GLM's weights, so a shift of the weights along the canary moves it linearly."""
    p = np.clip(np.asarray(outputs, dtype=np.float64)[-1].ravel(), 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def observe(view: View, av: AuditorView, n_train: int) -> np.ndarray:
    """The auditor's numbers from one trial, as a flat vector."""
    if av.kind in ("outputs", "scores"):
        return canary_score(view.outputs)
    if av.kind == "payloads":  # the other party's test score on the canary, and the model's
        parts = [
            a[-1:]
            for r in view.received
            if r.phase == "eval" and (a := _array(r.payload)) is not None and a.ndim == 1
        ]
        return np.concatenate([*parts, canary_score(view.outputs)])
    batches = {b.id: b for b in view.batches}
    got = []
    for r in view.received:
        if r.sender != av.sender or r.phase == "eval":
            continue
        a = _array(r.payload)
        if a is None or a.ndim == 0:
            continue
        b = batches.get(r.batch) if r.batch is not None else None
        if b is not None and b.phase == r.phase and a.shape[0] == len(b.rows):
            hit = np.flatnonzero(b.rows == CANARY_ROW)
            if hit.size:
                got.append(a[hit[0]].ravel())
        elif a.shape[0] == n_train:  # a release of every training row at once
            got.append(a[CANARY_ROW].ravel())
    return np.concatenate(got) if got else np.zeros(0)
