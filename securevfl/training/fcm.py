"""Fuzzy c-means (Bezdek, Ehrlich & Full 1984), VFL-AFE's Eq. 7: pseudo-labels from gradients.

Memberships u_ic = 1 / Σ_j (||g_i - c_c|| / ||g_i - c_j||)^(2/(m-1)), centres
c_c = Σ_i u_ic^m g_i / Σ_i u_ic^m (fuzzifier m = 2, the usual choice; the paper's Eq. 7 is
garbled and names none), alternated from a deterministic farthest-point start (no
randomness: the same gradients give the same clusters in every runtime). Memberships depend on
distance *ratios* only, so the gradients' overall scale does not matter. Eq. 7's output is the
most probable cluster of each row and its membership (the confidence the threshold filters).
The number of clusters is the number of classes (public, as the paper presumes).
"""

from __future__ import annotations

import numpy as np


def _farthest_points(x: np.ndarray, c: int) -> np.ndarray:
    """c rows of x: the largest-norm row first, then repeatedly the row farthest from those."""
    first = int(np.argmax(np.einsum("ij,ij->i", x, x)))
    chosen = [first]
    dist = np.linalg.norm(x - x[first], axis=1)
    for _ in range(1, c):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, np.linalg.norm(x - x[nxt], axis=1))
    return x[chosen].copy()


def fuzzy_cmeans(
    x: np.ndarray, c: int, *, m: float = 2.0, iters: int = 20, tol: float = 1e-4
) -> tuple[np.ndarray, np.ndarray]:
    """(memberships (n, c), centres (c, d)) of fuzzy c-means with fuzzifier ``m`` > 1."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or not 1 <= c <= len(x) or m <= 1:
        raise ValueError(f"fuzzy_cmeans needs (n, d) data with 1 <= c <= n and m > 1, got c={c}")
    scale = float(np.abs(x).max()) or 1.0
    x = x / scale  # memberships are scale-free; this only keeps the arithmetic in range
    centres = _farthest_points(x, c)
    u = np.full((len(x), c), 1.0 / c)
    sq = np.einsum("ij,ij->i", x, x)[:, None]
    for _ in range(iters):
        # squared distances as |x|² + |c|² - 2 x·c: O(n·c) memory, one matrix product
        d2 = np.maximum(sq + np.einsum("ij,ij->i", centres, centres)[None] - 2 * x @ centres.T, 0)
        inv = (d2 + 1e-24) ** (-1.0 / (m - 1.0))
        new_u = inv / inv.sum(axis=1, keepdims=True)
        w = new_u**m
        centres = (w.T @ x) / w.sum(axis=0)[:, None]
        done = float(np.abs(new_u - u).max()) < tol
        u = new_u
        if done:
            break
    return u, centres * scale


def pseudo_labels(grads: np.ndarray, c: int, *, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 7 and its filter: (cluster id per row, mask of rows whose membership >= threshold)."""
    u, _ = fuzzy_cmeans(grads, c)
    return u.argmax(axis=1), u.max(axis=1) >= threshold
