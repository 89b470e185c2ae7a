"""Randomness is always passed in, never global.

DP noise defaults to a generator seeded from OS entropy; a run with ``seed`` set is reproducible
and its record says the noise was seeded (fine for research, not for deployment). Streams are
separated by a purpose string so that, e.g., minibatch order and party 2's noise never share draws.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _stream_key(purpose: str) -> int:
    return int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:8], "little")


def make_rng(seed: int | None, *, purpose: str, party: int | None = None) -> np.random.Generator:
    """A generator for one purpose (and one party): seeded from ``seed`` or from OS entropy."""
    if seed is None:
        return np.random.default_rng()  # OS entropy
    words = [int(seed) & 0xFFFFFFFFFFFFFFFF, _stream_key(purpose)]
    if party is not None:
        words.append(int(party))
    return np.random.default_rng(np.random.SeedSequence(words))


def derive_seed(seed: int, *, purpose: str) -> int:
    """A 63-bit integer seed derived from ``seed`` for one purpose (e.g. torch initialisation)."""
    return int(make_rng(seed, purpose=purpose).integers(0, 2**63 - 1))
