"""A differentially private bottom-model update (DP-SGD on a passive party's bottom model).

A passive party that trains its bottom model f on its exact rows makes every later release
depend on every row already used. Here the update itself is a Gaussian release, so later
releases depend on other rows only through a DP model (post-processing).

Per training step the party holds its batch x (b rows), the bottom outputs h_i = f(x_i), the
differentiable transform it sends, r = embed(h), the gradient g it received and its local loss L
(whose gradient w.r.t. r is e). Then:

1. v = ∂/∂h [Σ_i ⟨r_i, g_i⟩ + L] (one backward pass to h, not to the parameters);
2. per-example gradients G_i = ∇_θ ⟨f_θ(x_i), b·v_i⟩ (b·v_i: row i's own loss, as the top's
   loss is the batch mean) (``torch.func``: functional_call, grad, vmap);
3. each clipped to norm C_g, summed, plus N(0, (σ_g·C_g)² I), divided by b; the optimiser steps.

**Why one row moves the pre-noise sum by at most 2·C_g.** v_i must be a function of row i and of
public or already-released quantities only: true when ``embed`` acts row-wise given public state
(clipping; AFE's rescaling factor, a function of DP-released statistics) and when each row's
local-loss term involves the other rows only through their released values (the hooks' duty,
see ``afe_vfl``). The received g is computed by the label holder from released embeddings
(post-processing). Under these conditions, replacing row i changes G_i only: the clipped sum
moves by at most ||clip(G_i)|| + ||clip(G_i')|| <= 2·C_g. Each step is thus a Gaussian
mechanism of noise multiplier σ_g/2 in the replace-one sense; given the epoch's batches (a public
shuffle, disjoint), a row is in one batch per epoch: one release per epoch. Batches are shuffled,
not Poisson-sampled: no amplification by subsampling is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap


@dataclass(frozen=True)
class BottomDP:
    """DP-SGD parameters of a bottom update: per-example clip C_g and noise multiplier σ_g (the
    noise is N(0, (σ_g·C_g)²) per coordinate; replace-one sensitivity 2·C_g)."""

    clip: float
    noise_multiplier: float

    @property
    def sensitivity(self) -> float:
        """Replace-one L2 sensitivity of the clipped sum."""
        return 2.0 * self.clip

    @property
    def sigma(self) -> float:
        """Standard deviation of the Gaussian noise on the clipped sum."""
        return self.noise_multiplier * self.clip


def per_example_grads(
    model: nn.Module, x: torch.Tensor, v: torch.Tensor
) -> dict[str, torch.Tensor]:
    """∇_θ ⟨f_θ(x_i), v_i⟩ for every row i (leading dimension b), with ``torch.func``."""
    params = {n: p.detach() for n, p in model.named_parameters()}

    def one(p: dict[str, torch.Tensor], xi: torch.Tensor, vi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xi.unsqueeze(0),))
        return (out[0] * vi).sum()

    return vmap(grad(one), in_dims=(None, 0, 0))(params, x, v)


def clipped_sum(grads: dict[str, torch.Tensor], clip: float) -> dict[str, torch.Tensor]:
    """Σ_i G_i · min(1, C_g / ||G_i||) (the norm over all parameters of row i)."""
    flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1)
    scale = (clip / (flat.norm(dim=1) + 1e-12)).clamp(max=1.0)
    return {n: torch.einsum("i,i...->...", scale, g) for n, g in grads.items()}


def private_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    v: torch.Tensor,
    *,
    dp: BottomDP,
    rng: np.random.Generator,
) -> None:
    """One DP-SGD step of ``model`` on the batch ``x`` with output-side gradients ``v`` (b x P).

    The noise is drawn from ``rng`` in the parameters' order (float64, then cast), so a seeded
    run is reproducible in every runtime."""
    b = x.shape[0]
    # v is the gradient of the batch's MEAN loss: b·v_i is row i's own loss gradient
    sums = clipped_sum(per_example_grads(model, x, b * v.detach()), dp.clip)
    noisy = noisy_sums(sums, dp=dp, rng=rng)
    opt.zero_grad()
    for n, p in model.named_parameters():
        p.grad = noisy[n] / b
    opt.step()


def noisy_sums(
    sums: dict[str, torch.Tensor], *, dp: BottomDP, rng: np.random.Generator
) -> dict[str, torch.Tensor]:
    """The step's release: each clipped per-parameter sum plus N(0, (σ_g·C_g)²) per coordinate,
    drawn from ``rng`` in the parameters' order (the audit's whole-run view calls it too)."""
    out = {}
    for n, s in sums.items():
        noise = torch.as_tensor(rng.normal(0.0, dp.sigma, size=tuple(s.shape)), dtype=s.dtype)
        out[n] = s + noise
    return out


def output_gradient(
    h: torch.Tensor, sent: torch.Tensor, g: torch.Tensor, extra: torch.Tensor | None
) -> torch.Tensor:
    """v = ∂/∂h [Σ_i ⟨sent_i, g_i⟩ + extra] where ``sent`` = embed(h) (one backward to h)."""
    total = (sent * g).sum() if extra is None else (sent * g).sum() + extra
    (v,) = torch.autograd.grad(total, h)
    return v
