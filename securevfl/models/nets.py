"""Torch models of the split-NN trainer: bottom models per party and the top (fusion) model."""

from __future__ import annotations

import torch
from torch import nn


def bottom_mlp(
    d_in: int, embedding_dim: int, *, hidden: int = 32, bounded: bool = False
) -> nn.Module:
    """A party's bottom model: d_in -> hidden -> embedding (tanh-bounded to [-1,1] if asked)."""
    layers: list[nn.Module] = [nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, embedding_dim)]
    if bounded:
        layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def top_mlp(d_in: int, n_out: int, *, hidden: int = 32) -> nn.Module:
    """The label holder's top model on the aggregated embedding."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


def pooled_mlp(d_in: int, n_out: int, *, hidden: int = 32, embedding_dim: int = 8) -> nn.Module:
    """The same architecture on pooled data (the centralized twin of the split-NN)."""
    return nn.Sequential(
        bottom_mlp(d_in, embedding_dim, hidden=hidden), top_mlp(embedding_dim, n_out, hidden=hidden)
    )


def seeded_init(module: nn.Module, seed: int) -> nn.Module:
    """Re-initialise ``module``'s parameters deterministically from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                # fan-in: inputs of one output unit (a conv's: in-channels x kernel area)
                bound = 1.0 / (m.weight[0].numel()) ** 0.5
                m.weight.uniform_(-bound, bound, generator=gen)
                m.bias.uniform_(-bound, bound, generator=gen)
    return module
