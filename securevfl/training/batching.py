"""Minibatches agreed through a shared seed: every party derives the same index sequence."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from securevfl.rng import make_rng


def minibatches(n: int, batch_size: int, *, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """Yield the row indices of each minibatch of ``epoch`` (a fresh permutation per epoch).

    A trailing batch smaller than ``batch_size`` is kept; with ``batch_size >= n`` there is one
    full batch per epoch.
    """
    order = make_rng(seed, purpose=f"minibatch/{epoch}").permutation(n)
    b = min(batch_size, n)
    for start in range(0, n, b):
        yield order[start : start + b]


def n_batches(n: int, batch_size: int) -> int:
    """Number of minibatches per epoch."""
    b = min(batch_size, n)
    return -(-n // b)
