"""A numpy ``Generator`` whose bits come from AES-256-CTR keyed from OS entropy.

Unseeded runs draw DP noise, PBM randomness and HE masks from it (``make_noise_rng``); seeded
runs keep numpy's PCG64 so results stay reproducible bit for bit. The keystream is
``cryptography``'s AES-256 in CTR mode under a 256-bit key and a 128-bit initial counter from
``os.urandom``: outputs are indistinguishable from uniform without the key, and earlier outputs
cannot be recomputed from later ones (unlike PCG64, whose state follows from a few outputs).

Every numpy call site keeps working: the bit generator is a randomgen ``UserBitGenerator`` fed
from a buffered keystream (numpy's C samplers pull 64-bit words through it), and the hot paths
draw whole arrays of words at once: ``bit_generator.random_raw`` (PBM's sampler), ``random``,
``uniform`` (HE masks), ``bytes`` (Paillier masks), and ``normal`` / ``standard_normal`` /
``laplace``, which go through the floating-point-hardened samplers of
:mod:`securevfl.privacy.samplers` (same distributions, see there for the accounting).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from randomgen import UserBitGenerator

from protocols.keystream import AESCTRStream
from securevfl.privacy.samplers import secure_gaussian, secure_laplace, uniform_from_words

NAME = "aes-ctr-csprng"
_SCALAR = (float, int, np.float64)
_BUFFER_WORDS = 4096  # words kept for numpy's one-word-at-a-time C samplers


class AESCTRBitGenerator(UserBitGenerator):
    """randomgen bit generator over :class:`AESCTRStream`; ``random_raw`` is vectorized."""

    def __init__(self, stream: AESCTRStream | None = None) -> None:
        self.stream = stream or AESCTRStream()
        buf: list[Any] = [[], 0]

        def next_raw(_voidp: Any) -> int:
            # called from C for every word: must never raise (randomgen ignores exceptions)
            words, i = buf
            if i == len(words):
                words, i = self.stream.words(_BUFFER_WORDS).tolist(), 0
                buf[0] = words
            buf[1] = i + 1
            return words[i]

        super().__init__(next_raw, 64)

    def random_raw(self, size: Any = None, output: bool = True) -> Any:
        """Uniform uint64 words straight from the keystream (a scalar int when size is None)."""
        n = 1 if size is None else int(np.prod(size))
        w = self.stream.words(n)
        if not output:
            return None
        return int(w[0]) if size is None else w.reshape(size)


class _Pool:
    """Ready draws of one sampler, made in blocks: a small request costs a slice, not the ~15
    numpy calls of the sampler (what dominates DP-SGD's 31-value draws)."""

    def __init__(self, draw: Any, first: int = 256, most: int = 8192) -> None:
        # blocks grow from ``first`` to ``most``: a short run pays for little it never uses
        self._draw, self._block, self._most = draw, first, most
        self._buf, self._pos = np.empty(0), 0

    def take(self, n: int) -> np.ndarray:
        if n > self._most:  # in cache-sized pieces: large temporaries cost page faults
            out = np.empty(n)  # filled piece by piece: one n-vector, not a list and its join
            for i in range(0, n, self._most):
                out[i : i + self._most] = self._draw(min(self._most, n - i))
            return out
        if self._pos + n > len(self._buf):
            while self._block < n:
                self._block *= 2
            self._buf, self._pos = self._draw(self._block), 0
            self._block = min(2 * self._block, self._most)
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out.copy()  # callers may write into it; the pool's values are used once


class CryptoGenerator(np.random.Generator):
    """``np.random.Generator`` over :class:`AESCTRBitGenerator` with vectorized hot paths."""

    cryptographic = True
    name = NAME

    def __init__(self) -> None:
        super().__init__(AESCTRBitGenerator())
        self._words = self.bit_generator.stream.words
        self._gauss = _Pool(lambda n: secure_gaussian(self._uniform, sigma=1.0, size=n))
        self._lap = _Pool(lambda n: secure_laplace(self._uniform, scale=1.0, size=n))

    def _draw(self, pool: _Pool, size: Any) -> Any:
        if size is None:
            return float(pool.take(1)[0])
        n = int(size) if isinstance(size, int | np.integer) else math.prod(size)
        return pool.take(n).reshape(size)

    def _uniform(self, n: int) -> np.ndarray:
        return uniform_from_words(self._words(n))

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        if out is not None or np.dtype(dtype) != np.float64:
            return super().random(size, dtype, out)
        u = self._uniform(1 if size is None else int(np.prod(size)))
        return float(u[0]) if size is None else u.reshape(size)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
        shape = np.broadcast_shapes(lo.shape, hi.shape) if size is None else size
        u = self.random(shape if shape != () else None)
        return lo + (hi - lo) * u

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        if out is not None or np.dtype(dtype) != np.float64:
            return super().standard_normal(size, dtype, out)
        return self._draw(self._gauss, size)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        if type(loc) in _SCALAR and type(scale) in _SCALAR and size is not None and scale >= 0:
            z = self._draw(self._gauss, size)  # the common case, fast
            return z * scale + loc if (scale != 1 or loc != 0) else z
        loc_a, scale_a = np.asarray(loc, dtype=float), np.asarray(scale, dtype=float)
        if np.any(scale_a < 0):
            raise ValueError("scale < 0")
        shape = np.broadcast_shapes(loc_a.shape, scale_a.shape) if size is None else size
        z = self._draw(self._gauss, shape if shape != () else None)
        return loc_a + scale_a * z if shape != () else float(loc_a + scale_a * z)

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        if type(loc) in _SCALAR and type(scale) in _SCALAR and size is not None and scale >= 0:
            z = self._draw(self._lap, size)
            return z * scale + loc if (scale != 1 or loc != 0) else z
        loc_a, scale_a = np.asarray(loc, dtype=float), np.asarray(scale, dtype=float)
        if np.any(scale_a < 0):
            raise ValueError("scale < 0")
        shape = np.broadcast_shapes(loc_a.shape, scale_a.shape) if size is None else size
        z = self._draw(self._lap, shape if shape != () else None)
        return loc_a + scale_a * z if shape != () else float(loc_a + scale_a * z)

    def bytes(self, length: int) -> bytes:
        return self.bit_generator.stream.bytes(int(length))
