"""Randomness is always passed in, never global.

DP noise, PBM randomness and HE masks (``make_noise_rng``) default to a cryptographic generator
(AES-256-CTR keyed from OS entropy, :mod:`securevfl.csprng`, with floating-point-hardened
Gaussian and Laplace samplers). In a private run ``--seed`` never reaches them: only the named
reproduction mode (``--reproducible-noise``) seeds them with numpy's PCG64, and its record then
prints no ε ("not a guarantee"; ``securevfl.context.noise_seed`` decides). Streams are
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


def make_noise_rng(
    seed: int | None, *, purpose: str, party: int | None = None
) -> np.random.Generator:
    """The generator of DP noise, PBM sampling or HE masks: AES-CTR CSPRNG unless seeded."""
    if seed is None:
        from securevfl.csprng import CryptoGenerator

        return CryptoGenerator()
    return make_rng(seed, purpose=purpose, party=party)


def noise_generator_name(seed: int | None) -> str:
    """What the run record says drew the noise: ``aes-ctr-csprng`` or ``pcg64`` (seeded)."""
    return "aes-ctr-csprng" if seed is None else "pcg64"


def derive_seed(seed: int, *, purpose: str) -> int:
    """A 63-bit integer seed derived from ``seed`` for one purpose (e.g. torch initialisation)."""
    return int(make_rng(seed, purpose=purpose).integers(0, 2**63 - 1))


class UnderNoised:
    """A noise generator whose continuous noise is divided by ``divisor`` (audits only).

    ``securevfl audit`` runs a method with its DP noise deliberately shrunk, to show that the
    audit would catch a method that adds too little noise; ``securevfl run`` never builds one.
    Location-scale draws (normal, standard_normal, laplace, gamma's scale, exponential) are
    scaled; discrete draws (PBM's binomials, from the bit generator) pass through unchanged.
    """

    def __init__(self, rng: np.random.Generator, divisor: float) -> None:
        self._rng, self._div = rng, float(divisor)

    def __getattr__(self, name: str) -> object:
        return getattr(self._rng, name)

    def standard_normal(self, *args: object, **kw: object) -> object:
        return np.divide(self._rng.standard_normal(*args, **kw), self._div)

    def normal(self, loc: object = 0.0, scale: object = 1.0, size: object = None) -> object:
        return self._rng.normal(loc, np.divide(scale, self._div), size)

    def laplace(self, loc: object = 0.0, scale: object = 1.0, size: object = None) -> object:
        return self._rng.laplace(loc, np.divide(scale, self._div), size)

    def gamma(self, shape: object, scale: object = 1.0, size: object = None) -> object:
        return self._rng.gamma(shape, np.divide(scale, self._div), size)

    def exponential(self, scale: object = 1.0, size: object = None) -> object:
        return self._rng.exponential(np.divide(scale, self._div), size)
