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
            fresh = self._draw(max(self.chunk, m))
            rest = self.buf[self.pos :]
            self.buf = np.concatenate([rest, fresh]) if len(rest) else fresh
            self.pos = 0
        out = self.buf[self.pos : self.pos + m]
        self.pos += m
        self.taken += m
        if self.pos == len(self.buf):  # spent: held no longer than the caller holds ``out``
            self.buf, self.pos = np.empty(0), 0
        return out

    def added(self, x: np.ndarray) -> np.ndarray:
        """``x`` plus the next ``len(x)`` noise values, as a new array: the numbers of
        ``x + take(len(x))``. Where the buffer is spent and ``x`` takes at least a chunk (a full
        batch), the draws are made in the result itself: one n-vector, not two."""
        m = len(x)
        if self.pos < len(self.buf) or m < self.chunk:
            return x + self.take(m)
        out = self._draw(m)  # what take(m) would draw: max(chunk, m) = m values
        out += x  # addition commutes: the same sums as x + noise
        self.taken += m
        return out

    def _draw(self, m: int) -> np.ndarray:
        z = self.rng.standard_normal(m)
        z *= self.sigma  # in place: the same products as sigma * z
        return z

    def skip(self, n: int) -> None:
        """Continue as a stream that has handed out ``n`` values (a seeded generator resumed
        from a checkpoint): the values are the generator's normals in order, whatever the
        chunking, so discarding ``n`` of them puts the next ``take`` where it was."""
        from securevfl.model.checkpoint_privacy import skip_normals

        skip_normals(self.rng, n)
        self.buf, self.pos, self.taken = np.empty(0), 0, n
