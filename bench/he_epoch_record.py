"""Bench-only: what each HE-VFL party process already holds in the clear, kept for a check.

``python -m bench.he_epoch_bench --processes`` runs he-vfl with one OS process per party, as
``securevfl run he-vfl --processes`` does, and names this module among the party processes'
plugins with ``SECUREVFL_HE_RECORD_DIR`` set. Each process's scheme then also keeps, in memory,
its own party's plain values of every minibatch (passive party: its IR; party 0: its plain part
of the residual; every data party: its minibatch features and its unmasked gradient) and writes
them to ``DIR/party<k>.npz`` when the process exits, with its training block for the peer. No
byte more crosses the channel and the method's code is unchanged: the bench recombines the
files after the clock stopped (:func:`verify`). Never imported by securevfl or a user's run.
"""

from __future__ import annotations

import atexit
import os
import re
from typing import Any

import numpy as np

from baselines import he_schemes
from securevfl.training.batching import minibatches
from securevfl.training.glm_trainer import default_lr, resolve_loss

RECORD_ENV = "SECUREVFL_HE_RECORD_DIR"
STEP = re.compile(r"^(ir|plain|X|g)_[0-9]+$")  # per-minibatch records, not block parts


def block_parts(ctx: Any, k: int) -> dict[str, np.ndarray]:
    """Party k's share of the peer's inputs: its training block (party 0 also the labels in
    {-1, +1}, the epoch's minibatch order, the batch size and the learning rate)."""
    out = {f"X{k}": np.asarray(ctx.views[k].X_train)}
    if k == 0:
        loss, spec, n = resolve_loss(ctx), ctx.spec, ctx.info.n_train
        order = np.concatenate(list(minibatches(n, spec.batch_size, seed=ctx.shared_seed, epoch=0)))
        out.update(
            y=np.asarray(loss.encode_labels(ctx.views[0].y_train), dtype=np.float64),
            order=order.astype(np.int64),
            batch_size=np.int64(min(spec.batch_size, n)),
            lr=np.float64(spec.lr if spec.lr is not None else default_lr(loss)),
        )
    return out


def recording(base: type, out_dir: str) -> type:
    """``base`` scheme that also keeps this process's parties' plain values per minibatch."""

    class Recording(base):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            super().setup()
            self.rec: dict[int, dict[str, list]] = {}
            for k in self.ctx.rt.local_parties:
                if k < self.K:
                    self.rec[k] = {"ir": [], "plain": [], "X": [], "g": []}
            atexit.register(self.write)

        def encrypt_ir(self, k, v):
            self.rec[k]["ir"].append(np.array(v, dtype=np.float64))
            return super().encrypt_ir(k, v)

        def combine(self, k, payloads, plain):
            self.rec[k]["plain"].append(np.array(plain, dtype=np.float64))
            return super().combine(k, payloads, plain)

        def gradient_message(self, k, d_payload, X, rng):
            self.rec[k]["X"].append(X)  # a fresh row selection: kept, not copied
            return super().gradient_message(k, d_payload, X, rng)

        def unmask(self, k, opened, mask):
            g = super().unmask(k, opened, mask)
            self.rec[k]["g"].append(np.array(g, dtype=np.float64))
            return g

        def write(self) -> None:
            for k, rec in self.rec.items():
                arrays = {f"{name}_{t}": a for name, seq in rec.items() for t, a in enumerate(seq)}
                arrays.update(block_parts(self.ctx, k))
                np.savez(os.path.join(out_dir, f"party{k}.npz"), **arrays)

    Recording.__name__ = f"Recording{base.__name__}"
    return Recording


def load_all() -> None:
    """In a party process started by the bench: record with every scheme."""
    out_dir = os.environ.get(RECORD_ENV, "")
    if out_dir:
        for name, cls in list(he_schemes.SCHEMES.items()):
            he_schemes.SCHEMES[name] = recording(cls, out_dir)


def verify(out_dir: str, K: int, tolerance: Any) -> tuple[int, float]:
    """(gradients checked, largest error / tolerance) of every opened gradient in the records:
    party k's ``g / 4b`` against the plaintext ``X^T (4d) / 4b``, d = party 0's plain part plus
    every passive IR of the same minibatch; ``tolerance(d, b)`` is the scheme's bound."""
    parts = []
    for k in range(K):
        with np.load(os.path.join(out_dir, f"party{k}.npz")) as f:
            parts.append({name: f[name] for name in f.files})
    checked, worst, t = 0, 0.0, 0
    while f"plain_{t}" in parts[0]:
        d = parts[0][f"plain_{t}"] + sum(parts[k][f"ir_{t}"] for k in range(1, K))
        b = len(d)
        for k in range(K):
            X, g = parts[k][f"X_{t}"], parts[k][f"g_{t}"]
            err = float(np.max(np.abs(g / (4.0 * b) - X.T @ d / (4.0 * b)), initial=0.0))
            worst = max(worst, err / max(tolerance(d, b), 1e-300))
            checked += 1
        t += 1
    return checked, worst


def blocks(out_dir: str, K: int) -> dict[str, np.ndarray]:
    """The peer's inputs, joined from the parties' records (see :func:`block_parts`)."""
    out: dict[str, np.ndarray] = {}
    for k in range(K):
        with np.load(os.path.join(out_dir, f"party{k}.npz")) as f:
            out.update({n: f[n] for n in f.files if not STEP.match(n)})
    return out
