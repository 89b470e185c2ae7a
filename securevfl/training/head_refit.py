"""More head epochs on embeddings already released: post-processing at the label holder.

During the last training epoch the label holder keeps the aggregated messages it received (for
DP methods: the noisy embeddings) with their labels. After training it trains its head model
for more epochs on exactly those arrays. Nothing new is released by anyone, so no privacy event
is added; the rows were released by the bottom models as they were during that epoch, while the
test rows go through the final bottoms (a small shift the bottoms' learning rate bounds).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from securevfl.training.optimizer import adam


class ReleasedBatches:
    """The aggregated messages and labels of one epoch's training batches, in order."""

    def __init__(self) -> None:
        self.inputs: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def clear(self) -> None:
        self.inputs.clear()
        self.labels.clear()

    def add_input(self, agg: np.ndarray) -> None:
        self.inputs.append(np.array(agg, dtype=np.float32, copy=True))

    def add_labels(self, y: np.ndarray) -> None:
        self.labels.append(np.asarray(y).copy())

    def __len__(self) -> int:
        return sum(len(y) for y in self.labels)


def refit_head(
    top: nn.Module,
    kept: ReleasedBatches,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    regression: bool,
    rng: np.random.Generator,
) -> list[float]:
    """``epochs`` passes of Adam over the kept (input, label) pairs; the per-epoch mean loss."""
    if epochs <= 0 or not kept.labels:
        return []
    x = torch.as_tensor(np.concatenate(kept.inputs))
    y = np.concatenate(kept.labels)
    target = torch.as_tensor(y, dtype=torch.float32 if regression else torch.long)
    opt = adam(top.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        order = torch.as_tensor(rng.permutation(len(y)))
        total = 0.0
        for s in range(0, len(y), batch_size):
            idx = order[s : s + batch_size]
            out = top(x[idx])
            if regression:
                loss = nn.functional.mse_loss(out[:, 0], target[idx])
            else:
                loss = nn.functional.cross_entropy(out, target[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(y))
    return losses
