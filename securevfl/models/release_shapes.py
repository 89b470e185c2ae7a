"""Parameterless layers that push a bounded row to the edge of its release set, direction kept
(the release-once schedule's ``--release-shape saturate``): under Gaussian noise the release of
largest norm carries the most signal, and the set (box or ball) is unchanged, so the mechanism's
sensitivity is too. Saved models name them as layers (``training.export``), so predict applies
them without code."""

from __future__ import annotations

import torch
from torch import nn


class Corners(nn.Module):
    """Each coordinate at ±bound by its sign (a zero goes to +bound): the box's corners."""

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = float(bound)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.bound * torch.where(h < 0, -1.0, 1.0)


class Sphere(nn.Module):
    """Each row scaled to norm bound·(1 - 1e-6), just inside the ball (a zero row goes to the
    first axis)."""

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = float(bound)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        n = h.norm(dim=1, keepdim=True)
        e0 = torch.zeros_like(h)
        e0[:, :1] = 1.0
        u = torch.where(n > 0, h / n.clamp_min(1e-30), e0)
        return u * (self.bound * (1 - 1e-6))
