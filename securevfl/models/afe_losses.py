"""VFL-AFE's local losses of a passive party: the KL term (Eq. 6) and the weakly supervised
contrastive loss (Eq. 8). Both act on party k's clipped embeddings before noise, so they change
what the party releases, not the mechanism (the release is still clipped to the C-ball).

**Eq. 6, re-derived.** The rescaling assumes the pairwise distances D_ij are Gaussian. The term
is KL(p̂ || q): p̂ a Gaussian-kernel density estimate of the distances (bandwidth
h = 1.06·σ̂·P^(-1/5), Silverman, P pairs) and q = N(μ̂, σ̂² + h²) (the KDE of a Gaussian sample
is Gaussian with variance σ² + h², so a Gaussian sample gives KL ≈ 0), both evaluated and
normalised on a grid of G points over μ̂ ± 4·sqrt(σ̂² + h²). Choice: the distances are taken over R
fixed pairings (i, π_r(i)) rather than all b² pairs (O(b·R·d) instead of O(b²·d)).

**Eq. 8, re-derived.** For kept rows i, j (membership >= threshold) with pseudo-labels ŷ,
y_ij = 1 if ŷ_i = ŷ_j else 0, and the pairwise contrastive loss (Hadsell, Chopra & LeCun 2006)

    L_CL = mean_{i<j} [ y_ij · D_ij² + (1 - y_ij) · max(0, margin - D_ij)² ] / C²

with margin = C (choice: half the diameter; the text's margin is garbled), divided by C² so the
weight λ_CL does not depend on the clipping bound.
"""

from __future__ import annotations

import torch

GRID = 32


def kl_gaussian_distances(u: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    """Eq. 6: KL(KDE of the pairwise distances || their Gaussian fit), differentiable in u."""
    d = (u.unsqueeze(0) - u[perms]).norm(dim=2).flatten()
    d = d[d > 0]  # self-pairs of the permutations carry no distance
    if d.numel() < 4:
        return u.sum() * 0.0
    mu, sd = d.mean(), d.std().clamp_min(1e-6)
    h = 1.06 * sd * d.numel() ** (-0.2)
    spread = torch.sqrt(sd**2 + h**2)
    grid = mu + spread * torch.linspace(-4.0, 4.0, GRID)
    p = torch.exp(-0.5 * ((grid[:, None] - d[None, :]) / h) ** 2).mean(dim=1)
    q = torch.exp(-0.5 * ((grid - mu) / spread) ** 2)
    p = p / p.sum() + 1e-12
    q = q / q.sum() + 1e-12
    return (p * (p / q).log()).sum()


def contrastive_loss(
    u: torch.Tensor, labels: torch.Tensor, keep: torch.Tensor, *, bound: float
) -> torch.Tensor:
    """Eq. 8 over the kept rows (0 when fewer than two are kept)."""
    z = u[keep]
    if z.shape[0] < 2:
        return u.sum() * 0.0
    y = labels[keep]
    same = (y[:, None] == y[None, :]).float()
    dist_sq = ((z[:, None, :] - z[None, :, :]) ** 2).sum(dim=2)
    dist = torch.sqrt(dist_sq + 1e-12)
    per = same * dist_sq + (1 - same) * torch.clamp(bound - dist, min=0.0) ** 2
    n = z.shape[0]
    off = 1.0 - torch.eye(n)
    return (per * off).sum() / (n * (n - 1)) / bound**2
