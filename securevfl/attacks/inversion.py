"""Feature inversion by the party that receives another party's messages (the label holder).

The usual setting (e.g. He et al. 2019, model inversion in collaborative inference; VFLAIR's
feature reconstruction): the attacker holds auxiliary rows of the target party's block, here a
share of the training rows (10% by default), beside what the target sent about them. It trains a
decoder from the per-row message to the block on those rows and applies it to every other row.
Success is the decoder's MSE against the MSE of predicting the auxiliary mean (a ratio near 1:
nothing recovered); for images also SSIM between original and reconstructed pixels.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from securevfl.attacks.views import latest_per_row
from securevfl.runtime.view import View
from securevfl.training.optimizer import adam

DECODER_STEPS = 600
DECODER_HIDDEN = 256


def fit_decoder(Z: np.ndarray, X: np.ndarray, *, seed: int, steps: int = DECODER_STEPS):
    """A small MLP from standardized messages ``Z`` to rows ``X`` (full-batch Adam, MSE)."""
    mu, sd = Z.mean(axis=0), Z.std(axis=0)
    sd[sd == 0] = 1.0
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    net = nn.Sequential(
        nn.Linear(Z.shape[1], DECODER_HIDDEN),
        nn.ReLU(),
        nn.Linear(DECODER_HIDDEN, DECODER_HIDDEN),
        nn.ReLU(),
        nn.Linear(DECODER_HIDDEN, X.shape[1]),
    )
    opt = adam(net.parameters(), lr=1e-3, weight_decay=1e-5)
    zt = torch.as_tensor((Z - mu) / sd, dtype=torch.float32)
    xt = torch.as_tensor(X, dtype=torch.float32)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(zt), xt)
        loss.backward()
        opt.step()

    def decode(Zq: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            zq = torch.as_tensor((Zq - mu) / sd, dtype=torch.float32)
            return net(zq).numpy().astype(np.float64)

    return decode


def invert(
    view: View,
    *,
    target: int,
    aux: dict[int, np.ndarray],
    seed: int,
    steps: int = DECODER_STEPS,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, reconstructed blocks) for the training rows outside ``aux`` (row -> block row the
    attacker knows) that ``target`` sent per-row messages about; empty when it sent none."""
    rows, Z = latest_per_row(view, sender=target)
    d = len(next(iter(aux.values())))
    if not rows.size:
        return rows, np.zeros((0, d))
    known = np.array([r in aux for r in rows.tolist()], dtype=bool)
    if known.sum() < 2:
        return rows[~known], np.tile(np.mean(list(aux.values()), axis=0), ((~known).sum(), 1))
    X_aux = np.stack([aux[int(r)] for r in rows[known]])
    decode = fit_decoder(Z[known], X_aux, seed=seed, steps=steps)
    return rows[~known], decode(Z[~known])


def ssim(original: np.ndarray, reconstructed: np.ndarray, shape: tuple[int, int]) -> float:
    """Mean SSIM (torchmetrics) of rows reshaped to images, on the originals' value range."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    o = torch.as_tensor(original, dtype=torch.float32).reshape(-1, 1, *shape)
    r = torch.as_tensor(reconstructed, dtype=torch.float32).reshape(-1, 1, *shape)
    rng = float(o.max() - o.min()) or 1.0
    kernel = max(3, min(7, shape[0] - (1 - shape[0] % 2), shape[1] - (1 - shape[1] % 2)))
    # torchmetrics' Gaussian window spans 2·int(3.5σ + 0.5) + 1 pixels (11 at its σ = 1.5);
    # on images smaller than that (digits' 4x8 halves) σ is shrunk to span ``kernel`` pixels
    sigma = 1.5 if min(shape) > 11 else (kernel - 1) / 7.0
    return float(
        structural_similarity_index_measure(r, o, data_range=rng, kernel_size=kernel, sigma=sigma)
    )
