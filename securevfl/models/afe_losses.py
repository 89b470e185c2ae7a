"""VFL-AFE's local losses of a passive party: the KL term (Eq. 6) and the weakly supervised
contrastive loss (Eq. 8). Both act on party k's clipped embeddings before noise, so they change
what the party releases, not the mechanism (the release is still clipped to the C-ball).

**Eq. 6, re-derived.** The rescaling assumes the pairwise distances D_ij are Gaussian, with the
mean and variance it fits. The KL divergence of the distance distribution p from the Gaussian
with p's own mean and variance is p's negentropy, J(p) = KL(p || N(μ, σ²)); we use its classic
cumulant approximation (Jones & Sibson 1987; Hyvärinen 1998)

    KL(p || N(μ, σ²)) ≈ γ₁² / 12 + γ₂² / 48,   γ₁ = E[(D-μ)³]/σ³ (skewness),
                                                γ₂ = E[(D-μ)⁴]/σ⁴ - 3 (excess kurtosis),

which is 0 for a Gaussian, differentiable, and costs O(P) on P distances (a grid density
estimate of p costs O(P·G) and was 25x slower at b = 256). Choice: the distances are taken over
the R fixed pairings (i, π_r(i)) of the statistics rather than all b² pairs (O(b·R·d)).

**Eq. 8, re-derived.** For kept rows i, j (membership >= threshold) with pseudo-labels ŷ,
y_ij = 1 if ŷ_i = ŷ_j else 0, and the pairwise contrastive loss (Hadsell, Chopra & LeCun 2006)

    L_CL = mean_{i<j} [ y_ij · D_ij² + (1 - y_ij) · max(0, margin - D_ij)² ] / C²

with margin = C (choice: half the diameter; the text's margin is garbled), divided by C² so the
weight λ_CL does not depend on the clipping bound.
"""

from __future__ import annotations

import torch

MAX_ROWS = 128


def pair_distances(u: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    """(R, b) distances ||u_i - u_π_r(i)|| over the pairings (differentiable)."""
    return (u.unsqueeze(0) - u[perms]).norm(dim=2)


def kl_gaussian_distances(u: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    """Eq. 6 on the pairings of ``u``: see :func:`negentropy`."""
    return negentropy(pair_distances(u, perms))


def negentropy(dist: torch.Tensor) -> torch.Tensor:
    """Eq. 6: KL of the distances from their moment-matched Gaussian (cumulant approximation)."""
    if dist.numel() < 4:
        return dist.sum() * 0.0
    c = dist - dist.mean()
    c2 = c * c
    var = c2.mean().clamp_min(1e-12)
    skew = (c2 * c).mean() / var**1.5
    exkurt = (c2 * c2).mean() / var**2 - 3.0
    return skew**2 / 12.0 + exkurt**2 / 48.0


def paired_contrastive_loss(
    u: torch.Tensor,
    labels: torch.Tensor,
    keep: torch.Tensor,
    *,
    bound: float,
    partners: torch.Tensor,
    perms: torch.Tensor,
) -> torch.Tensor:
    """Eq. 8 for a DP bottom: row i against the *released* rows of its own pairings π_r(i)
    only (constants, ``partners``), over pairs whose two rows are kept.

    Why not every kept row: the released rows carry noise n_j of σ up to a few C. Against all
    rows, every row of one pseudo-class is pulled toward the same noisy class mean, so the
    noise of that mean enters every row's gradient alike and does not average out over the
    batch (measured on adult, ε = 8: AUC fell from 0.70 to 0.50). Against its own few
    partners, row i's noise term is its own and the batch sum averages it down."""
    w = partners.detach()[perms]  # (R, b, d)
    both = (keep[None, :] & keep[perms]).float()
    if float(both.sum()) == 0.0:
        return u.sum() * 0.0
    same = (labels[None, :] == labels[perms]).float()
    dist_sq = ((u.unsqueeze(0) - w) ** 2).sum(dim=2)
    dist = torch.sqrt(dist_sq + 1e-12)
    per = same * dist_sq + (1 - same) * torch.clamp(bound - dist, min=0.0) ** 2
    return (per * both).sum() / both.sum() / bound**2


def contrastive_loss(
    u: torch.Tensor,
    labels: torch.Tensor,
    keep: torch.Tensor,
    *,
    bound: float,
    partners: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 8 over the kept rows (0 when fewer than two are kept; at most ``MAX_ROWS`` of them,
    the first in the batch's random order: O(MAX_ROWS²) pairs at any batch size).

    ``partners`` (b x d, constants): row i is compared with these instead of the other rows'
    ``u`` — the DP bottom passes the *released* noisy embeddings, so row i's term (and its
    gradient) depends on row i and on released values only, never on another row's exact data."""
    z = u[keep][:MAX_ROWS]
    if z.shape[0] < 2:
        return u.sum() * 0.0
    w = z if partners is None else partners.detach()[keep][:MAX_ROWS]
    y = labels[keep][:MAX_ROWS]
    same = (y[:, None] == y[None, :]).float()
    sq, sq_w = (z * z).sum(dim=1), (w * w).sum(dim=1)
    dist_sq = (sq[:, None] + sq_w[None, :] - 2 * z @ w.T).clamp_min(0.0)  # O(b²), not O(b²·d)
    dist = torch.sqrt(dist_sq + 1e-12)
    per = same * dist_sq + (1 - same) * torch.clamp(bound - dist, min=0.0) ** 2
    n = z.shape[0]
    off = 1.0 - torch.eye(n)
    return (per * off).sum() / (n * (n - 1)) / bound**2
