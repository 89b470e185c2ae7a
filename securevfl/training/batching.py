"""Minibatches agreed through a shared seed: every party derives the same index sequence."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from securevfl.data.split import positions_dtype
from securevfl.rng import make_rng


def minibatches(n: int, batch_size: int, *, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """Yield the row indices of each minibatch of ``epoch`` (a fresh permutation per epoch).

    A trailing batch smaller than ``batch_size`` is kept; with ``batch_size >= n`` there is one
    full batch per epoch.
    """
    order = make_rng(seed, purpose=f"minibatch/{epoch}").permutation(n).astype(positions_dtype(n))
    b = min(batch_size, n)
    for start in range(0, n, b):
        yield order[start : start + b]


def n_batches(n: int, batch_size: int) -> int:
    """Number of minibatches per epoch."""
    b = min(batch_size, n)
    return -(-n // b)


def balanced_batch_size(n: int, batch_size: int) -> int:
    """The batch size giving the same number of batches r but near-equal sizes.

    Sensitivity bounds that scale with 1/b (HDP-VFL's Lemma 2: a drift of 2ηL/b per epoch for the
    batch holding the changed row) are ruled by the smallest batch: a short trailing batch (456
    rows in batches of 64 leave 8) would inflate them by b/8. With r = ceil(n/b) batches of
    ceil(n/r) rows the smallest batch is at least n/r - r + 1.
    """
    r = n_batches(n, batch_size)
    return -(-n // r)
