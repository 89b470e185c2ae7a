"""The label holder's per-row work of a GLM step, done in row chunks.

At one full batch per epoch (hdp-vfl's default) every per-row quantity of a step is an n-vector:
at 24M training rows each float64 one is 192 MB, and forming θ, the derivative and the loss as
whole-array expressions holds four or five of them at once beside the received messages. Here
each chunk of :data:`ROW_CHUNK` rows is formed, used and dropped: the results are the same
numbers (every operation is per row; the mean loss is taken over the whole vector of values),
the temporaries one chunk each. Labels the loss encodes as small integers (±1) are kept as int8
and widened to float64 a chunk at a time (the same values).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from securevfl.models.glm import GLMLoss

ROW_CHUNK = 1 << 20  # rows per chunk: 8 MiB a float64 temporary


def compact_labels(y: np.ndarray) -> np.ndarray:
    """Encoded labels as int8 where that holds them exactly (±1, 0/1, class ids), else as
    given: 1 byte a row instead of 8."""
    if y.dtype.kind != "f" or not len(y):
        return y
    small = y.astype(np.int8)
    return small if np.array_equal(small, y) else y


def _theta(own: np.ndarray, received: Sequence[np.ndarray], s: int, e: int) -> np.ndarray:
    """θ of rows s:e: own + Σ received, summed in the order ``own + sum(received)`` sums."""
    return own[s:e] + sum(r[s:e] for r in received)


def derivatives_and_loss(
    loss: GLMLoss, own: np.ndarray, received: Sequence[np.ndarray], y: np.ndarray
) -> tuple[np.ndarray, float]:
    """(∂ℓ/∂θ per row, the mean loss) at θ = own + Σ received."""
    n = len(own)
    exact, values = np.empty(n), np.empty(n)
    for s in range(0, n, ROW_CHUNK):
        e = min(n, s + ROW_CHUNK)
        theta, yc = _theta(own, received, s, e), np.asarray(y[s:e], dtype=np.float64)
        exact[s:e] = loss.derivative(theta, yc)
        values[s:e] = loss.value(theta, yc)
    return exact, float(np.mean(values))


def positive(own: np.ndarray, received: Sequence[np.ndarray]) -> np.ndarray:
    """θ > 0 per row (the forward pass's class for the epoch's accuracy), as booleans."""
    n = len(own)
    out = np.empty(n, dtype=bool)
    for s in range(0, n, ROW_CHUNK):
        e = min(n, s + ROW_CHUNK)
        out[s:e] = _theta(own, received, s, e) > 0
    return out
