"""Gaussian and Laplace noise hardened against floating-point attacks (Mironov, CCS 2012).

Textbook samplers (numpy's ``normal``/``laplace``: one uniform pushed through a log or a
ziggurat) leave output floats whose low-order bits depend on the noiseless value, so an output
can reveal the input it was added to. Holohan & Braghin ("Secure random sampling in differential
privacy", ESORICS 2021) combine several independent draws so that no single uniform can be read
back from the output; Opacus's ``secure_mode`` uses the Gaussian construction, diffprivlib the
Laplace one. Both are implemented here on top of 53-bit uniforms from a caller-given source (the
AES-CTR generator of :mod:`securevfl.csprng` in unseeded runs):

* :func:`secure_gaussian`: (Z_1 + Z_2 + Z_3 + Z_4) / 2 with Z_i ~ N(0, 1) (Box-Muller), times
  sigma. A sum of 4 independent N(0, 1) is N(0, 4), so the output is N(0, sigma^2) exactly.
* :func:`secure_laplace`: b (ln(U_1) cos(pi U_2) + ln(U_3) cos(pi U_4)). ln(U) cos(pi U') has
  the law of a product N N' of two independent standard normals (Box-Muller, with sin 2t ~
  cos(pi U')); the characteristic function of N N' is (1 + s^2)^(-1/2), so the sum of two
  independent copies has (1 + s^2)^(-1): exactly Laplace(0, 1), times b.

Accounting impact (for the accountants in ``securevfl.privacy``): in exact arithmetic both
samplers output exactly the N(0, sigma^2) / Laplace(b) the accountants assume, so no (epsilon,
delta) adjustment applies and the same events (GaussianEvent / LaplaceEvent with the same sigma
or scale) stay correct: :func:`accounting_adjustment` returns the figures unchanged. This is the
same guarantee Opacus's secure_mode gives: a mitigation of the floating-point attack, not a proof
about IEEE-754 outputs (no float sampler has that; the proven alternatives are discrete
mechanisms with their own epsilon: the snapping mechanism of Mironov 2012 or discrete
Laplace/Gaussian noise on a grid, which would change the release, not just the sampler).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from securevfl.errors import check_positive

Uniform = Callable[[int], np.ndarray]  # n -> n float64 uniforms in [0, 1), 53 random bits each
N_GAUSSIANS = 4  # Opacus secure_mode: 4 draws, their sum halved
_TWO_PI = 2.0 * math.pi
_SHIFT = np.uint64(11)
_ULP = 1.0 / (1 << 53)


def uniform_from_words(words: np.ndarray) -> np.ndarray:
    """Uniform float64 in [0, 1) from uint64 words: the top 53 bits times 2^-53 (exact)."""
    # < 2^53 after the shift: int64 -> float64 is exact, and much faster than uint64 -> float64
    u = (np.asarray(words, dtype=np.uint64) >> _SHIFT).view(np.int64).astype(np.float64)
    u *= _ULP
    return u


def _count(size: int | tuple[int, ...] | None) -> int:
    # math.prod, not np.prod: this runs for every small noise draw (np.prod costs ~4 us)
    if size is None:
        return 1
    return int(size) if isinstance(size, int | np.integer) else math.prod(size)


def standard_normal_box_muller(uniform: Uniform, n: int) -> np.ndarray:
    """n independent N(0, 1) by Box-Muller: R cos T and R sin T with R = sqrt(-2 ln(1 - U)),
    T = 2 pi U' are two independent N(0, 1) per pair of uniforms."""
    m = -(-n // 2)
    u = uniform(2 * m)
    r = np.log1p(-u[:m])  # 1 - U in (0, 1]: never ln(0)
    r *= -2.0
    np.sqrt(r, out=r)
    t = u[m:]
    t *= _TWO_PI
    out = np.empty(2 * m)
    np.cos(t, out=out[:m])
    np.sin(t, out=out[m:])
    out[:m] *= r
    out[m:] *= r
    return out[:n]


def secure_gaussian(
    uniform: Uniform, *, sigma: float = 1.0, size: int | tuple[int, ...] | None = None
) -> np.ndarray | float:
    """N(0, sigma^2) noise as (Z_1 + ... + Z_4) / 2 * sigma (Holohan & Braghin; Opacus)."""
    check_positive("sigma", sigma, strict=False)
    n = _count(size)
    z = standard_normal_box_muller(uniform, N_GAUSSIANS * n).reshape(N_GAUSSIANS, n)
    out = z.sum(axis=0) * (sigma / math.sqrt(N_GAUSSIANS))
    return float(out[0]) if size is None else out.reshape(size)


def secure_laplace(
    uniform: Uniform, *, scale: float = 1.0, size: int | tuple[int, ...] | None = None
) -> np.ndarray | float:
    """Laplace(0, scale) noise as scale (ln U_1 cos(pi U_2) + ln U_3 cos(pi U_4))."""
    check_positive("scale", scale, strict=False)
    n = _count(size)
    u = uniform(4 * n).reshape(4, n)
    # ln(1 - U): U in [0, 1), so the argument is in (0, 1]
    x = np.log1p(-u[0]) * np.cos(np.pi * u[1]) + np.log1p(-u[2]) * np.cos(np.pi * u[3])
    out = x * scale
    return float(out[0]) if size is None else out.reshape(size)


def accounting_adjustment(*, epsilon: float, delta: float) -> tuple[float, float]:
    """The (epsilon, delta) of a release made with these samplers, given the figures the
    accountant computed for ideal Gaussian/Laplace noise: unchanged (the law is the same)."""
    return float(epsilon), float(delta)
