"""A party's Gaussian noise drawn in chunks from its own generator (HDP-VFL's noise stream)."""

from __future__ import annotations

import numpy as np


class NoiseStream:
    """σ·N(0, 1) draws from one party's generator, produced in chunks.

    Drawing a chunk of standard normals and slicing it yields exactly the variates that
    per-step calls would (the generator is consumed in order); it only saves per-call overhead.
    """

    def __init__(self, rng: np.random.Generator, sigma: float, chunk: int) -> None:
        self.rng, self.sigma, self.chunk = rng, sigma, max(1, chunk)
        self.buf = np.empty(0)
        self.pos = 0
        self.taken = 0  # values handed out: the stream's position (what a checkpoint keeps)

    def take(self, m: int) -> np.ndarray:
        """The next ``m`` noise values (a read-only view: callers add it, never modify it)."""
        if self.pos + m > len(self.buf):
            fresh = self.sigma * self.rng.standard_normal(max(self.chunk, m))
            self.buf = np.concatenate([self.buf[self.pos :], fresh])
            self.pos = 0
        out = self.buf[self.pos : self.pos + m]
        self.pos += m
        self.taken += m
        return out

    def skip(self, n: int) -> None:
        """Continue as a stream that has handed out ``n`` values (a seeded generator resumed
        from a checkpoint): the values are the generator's normals in order, whatever the
        chunking, so discarding ``n`` of them puts the next ``take`` where it was."""
        from securevfl.model.checkpoint_privacy import skip_normals

        skip_normals(self.rng, n)
        self.buf, self.pos, self.taken = np.empty(0), 0, n
