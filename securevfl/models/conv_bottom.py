"""A small CNN bottom model for a party holding some pixels of a flattened image.

A party's columns are global pixel indices of a row-major image (h x w). The model puts its
pixels back where they lie: it takes the band of image rows its pixels cover (all w columns,
a slice may start or end mid-row), scatters its pixels into that band and leaves zeros where
it holds nothing, then runs conv(1->c1, 3x3, pad 1) -> ReLU -> maxpool 2 -> conv(c1->c2, 3x3,
pad 1) -> ReLU -> adaptive average pool to a grid of at most GRID x GRID cells (never finer
than the max-pooled band) -> Linear -> embedding.

The pipeline hands a party its rows scaled by 1/sqrt(B), B the public bound on a row's squared
norm (``PublicInfo.row_norm_bound_sq``): a 28x28 image's pixels arrive in [-1/28, 1/28]. The
model multiplies them back by sqrt(B) (``input_scale``, a public constant): with inputs that
small the convolutions' biases swamp the pixels and the CNN learned far slower (measured on
fashion-mnist, vfl, K = 2, 10k rows, 2 epochs, lr 0.05, seed 0: accuracy 0.54 unscaled, 0.69
scaled, at a 2 x 2 grid).

The scatter is a gather with a constant index (no in-place writes, no batch norm), so
``torch.func.vmap(grad(...))`` gives per-example gradients for DP-SGD (``private_bottom``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

# the largest pooled grid (same fashion-mnist run, scaled: 4 x 4 0.73, 3 x 3 0.66, 2 x 2 0.69)
GRID = 4


def pixel_band(columns: Sequence[int], image_shape: tuple[int, int]) -> tuple[np.ndarray, int]:
    """Where each cell of the party's band of image rows takes its value from.

    Returns ``(index, rows)``: ``index`` (rows * w) holds, for each cell of the band in
    row-major order, the position in ``columns`` of the pixel lying there, or ``len(columns)``
    (the zero pad) where the party holds no pixel; ``rows`` is the band's height, at least 2 so
    that max-pooling by 2 has a row to pool.
    """
    h, w = image_shape
    cols = np.asarray(columns, dtype=np.int64)
    if cols.size == 0 or cols.min() < 0 or cols.max() >= h * w:
        raise ValueError(
            f"columns must be pixel indices in [0, {h * w}) of a {h}x{w} image, got "
            f"{cols.size} columns in [{cols.min(initial=0)}, {cols.max(initial=0)}]"
        )
    top = int(cols.min()) // w
    rows = max(int(cols.max()) // w - top + 1, 2)
    index = np.full(rows * w, cols.size, dtype=np.int64)
    index[cols - top * w] = np.arange(cols.size)
    return index, rows


def place_pixels(
    x: torch.Tensor, index: torch.Tensor, rows: int, width: int, input_scale: float
) -> torch.Tensor:
    """(b, n_columns) -> (b, 1, rows, width): ``x`` scaled, each pixel where ``index`` (from
    :func:`pixel_band`) puts it, zeros elsewhere (a saved model's ``place`` layer runs this
    too)."""
    padded = nn.functional.pad(x * input_scale, (0, 1))  # the last column: the zero of empty cells
    return padded[:, index].reshape(x.shape[0], 1, rows, width)


class ConvBottom(nn.Module):
    """A party's CNN bottom: its pixels placed in their band of image rows, two convolutions,
    pooled to a small grid, a linear map to the embedding (tanh-bounded if asked)."""

    def __init__(
        self,
        columns: Sequence[int],
        image_shape: tuple[int, int],
        embedding_dim: int,
        *,
        channels: tuple[int, int] = (8, 16),
        bounded: bool = False,
        input_scale: float = 1.0,
    ) -> None:
        super().__init__()
        index, self.rows = pixel_band(columns, image_shape)
        self.n_columns = len(columns)
        self.width = int(image_shape[1])
        self.input_scale = float(input_scale)
        grid = (min(GRID, self.rows // 2), min(GRID, self.width // 2))
        # a buffer, not a parameter: fingerprints and DP-SGD see only the weights
        self.register_buffer("index", torch.as_tensor(index), persistent=False)
        c1, c2 = channels
        layers: list[nn.Module] = [
            nn.Conv2d(1, c1, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(grid),
            nn.Flatten(),
            nn.Linear(c2 * grid[0] * grid[1], embedding_dim),
        ]
        if bounded:
            layers.append(nn.Tanh())
        self.net = nn.Sequential(*layers)

    def place(self, x: torch.Tensor) -> torch.Tensor:
        """(b, n_columns) -> (b, 1, rows, w): each pixel at its place, zeros elsewhere."""
        return place_pixels(x, self.index, self.rows, self.width, self.input_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.place(x))


def conv_bottom(
    columns: Sequence[int],
    image_shape: tuple[int, int],
    embedding_dim: int,
    *,
    hidden: int = 32,
    bounded: bool = False,
    input_scale: float = 1.0,
) -> ConvBottom:
    """The CNN bottom with channel widths from the split-NN's ``hidden`` width: hidden/4 and
    hidden/2 (8 and 16 at the default 32: small, everything runs on a few CPU cores)."""
    return ConvBottom(
        columns,
        image_shape,
        embedding_dim,
        channels=(max(1, hidden // 4), max(1, hidden // 2)),
        bounded=bounded,
        input_scale=input_scale,
    )
