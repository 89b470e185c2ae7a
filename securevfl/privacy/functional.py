"""Functional-mechanism sensitivities and budgets for vertically partitioned data (FM-VFL).

The objective is a polynomial in w whose coefficients are sums over rows; it is cut into blocks:
block ``(k, k)`` holds the coefficients computed by party k alone (for the label party also the
label terms of its own columns), block ``(k, l)``, k < l, the cross-party coefficients between
k and l (with the label party 0: the first-order terms of l, which need the label, and the
second-order terms w_a w_b, a in k, b in l). Each DISTINCT monomial gets one Laplace draw.

Sensitivities (Lemma 1: Δ = 2 max_t Σ_φ |λ_φt|) are written with public L1 bounds B_k on a
party's row block (the paper's input range |x_a| <= 1 gives B_k = d_k) and B = Σ B_k:

- logistic (order-2 Taylor, Eq. 4; λ_a = Σ (1/2 - y) x_a, λ_aa = Σ x_a²/8, λ_ab = Σ x_a x_b/4):
  single (0,0): B_0 + B_0²/4;  single (k,k): B_k²/4;  cross (0,l): B_l + B_0 B_l / 2;
  cross (k,l): B_k B_l / 2.  Sum: Δ_f = B + B²/4 (= d²/4 + d, the paper's closed form).
- linear (Eq. 2; λ_0 = Σ y², λ_a = -2 Σ y x_a, λ_aa = Σ x_a², λ_ab = 2 Σ x_a x_b):
  single (0,0): 2(1 + 2B_0 + B_0²);  single (k,k): 2 B_k²;  cross (0,l): 4 B_l (1 + B_0);
  cross (k,l): 4 B_k B_l.  Sum: Δ_f = 2(1 + B)² (= 2(1 + 2d + d²)).

Per party (Lemma 2 / Theorem 2) Δ^(k) sums the blocks touching k. For logistic this gives the
paper's Δ^1 = d + d^1(2d - d^1)/4 and Δ^k = d^k + d^k(2d - d^k)/4. For linear the paper prints
Δ^1 = 2(1 + 2d + d^1 d) and Δ^k = 2(2d^k + d^k d); re-deriving from Eq. 7 the quadratic terms
touching D^k number (d^k)² + 2 d^k (d - d^k) = d^k (2d - d^k) ordered pairs (the paper's own
logistic formula counts them this way), so we use Δ^1 = 2(1 + 2d + d^1(2d - d^1)) and
Δ^k = 2(2d^k + d^k(2d - d^k)); both agree with the paper at K = 1.

Budgets. Top-down: every coefficient gets Lap(Δ_f/ε), so block G costs Δ_G ε / Δ_f and the
blocks sum to ε (Theorem 1); party k's ε^(k) = Δ^(k)/Δ_f ε (Theorem 2). Bottom-up (Section
III-D): party k picks ε^(k) and spreads it evenly over the blocks it takes part in; a cross
block takes the smaller of its two parties' offers (both must agree, "jointly decide"), and
gets Lap(Δ_G/ε_G). The global ε is the basic composition Σ_G ε_G. Given a global target ε
instead of the parties' own offers, equal offers are scaled so that Σ_G ε_G is the target.
Corollary 1 as printed
(Σ Δ_f/Δ_g^k ε^k + ...) is garbled: by the proof of Theorem 1 a block with Lap(Δ_G/ε_G)
costs exactly ε_G against a change of one full row, so the sum is what the blocks spend.

Units: the headline is ``sample`` (one full row changes: every block moves, Theorem 1); party k's
``party-row`` figure composes the blocks that touch k (Theorem 2). ``fm_ledger`` records each
block as one Laplace release in both.
"""

from __future__ import annotations

from collections.abc import Sequence

from securevfl.errors import ConfigError, check_positive
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import laplace_event

TASKS = ("linear", "logistic")
BUDGETS = ("top-down", "bottom-up")

Block = tuple[int, int]


def paper_delta_f(task: str, d: int) -> float:
    """The paper's closed forms: linear 2(1 + 2d + d²), logistic d²/4 + d."""
    if task == "linear":
        return 2.0 * (1 + 2 * d + d * d)
    if task == "logistic":
        return d * d / 4.0 + d
    raise ConfigError(f"task must be one of {list(TASKS)}, got {task!r}")


def block_sensitivities(task: str, bounds: Sequence[float]) -> dict[Block, float]:
    """Δ of every block for L1 bounds ``bounds[k]`` of each party's row block; label at party 0."""
    if task not in TASKS:
        raise ConfigError(f"task must be one of {list(TASKS)}, got {task!r}")
    if len(bounds) < 1:
        raise ConfigError(f"bounds must name at least one party, got {list(bounds)}")
    B = [check_positive(f"bounds[{k}]", b) for k, b in enumerate(bounds)]
    out: dict[Block, float] = {}
    for k in range(len(B)):
        for l in range(k, len(B)):
            if task == "logistic":
                if k == l:
                    out[(k, k)] = B[k] ** 2 / 4 + (B[0] if k == 0 else 0.0)
                else:
                    out[(k, l)] = B[k] * B[l] / 2 + (B[l] if k == 0 else 0.0)
            else:
                if k == l:
                    out[(k, k)] = 2 * B[k] ** 2 + (2 * (1 + 2 * B[0]) if k == 0 else 0.0)
                else:
                    out[(k, l)] = 4 * B[k] * B[l] + (4 * B[l] if k == 0 else 0.0)
    return out


def global_sensitivity(blocks: dict[Block, float]) -> float:
    """Δ_f: the sum over all blocks (Lemma 1)."""
    return float(sum(blocks.values()))


def party_sensitivity(blocks: dict[Block, float], k: int) -> float:
    """Δ^(k): the sum over the blocks that involve party k (Lemma 2)."""
    return float(sum(v for b, v in blocks.items() if k in b))


def top_down_scales(blocks: dict[Block, float], epsilon: float) -> dict[Block, float]:
    """Every block gets Lap(Δ_f/ε) (Algorithm 1, line 3)."""
    check_positive("epsilon", epsilon)
    scale = global_sensitivity(blocks) / epsilon
    return {b: scale for b in blocks}


def bottom_up_scales(
    blocks: dict[Block, float], party_epsilons: Sequence[float]
) -> dict[Block, float]:
    """Scales from each party's own ε^(k), split evenly over its blocks (min for shared ones)."""
    n = 1 + max(max(b) for b in blocks)
    if len(party_epsilons) != n:
        raise ConfigError(
            f"party epsilons must give one value per data party ({n}), got {len(party_epsilons)}"
        )
    eps = [check_positive(f"party_epsilon[{k}]", e) for k, e in enumerate(party_epsilons)]
    count = [sum(1 for b in blocks if k in b) for k in range(n)]
    offer = [eps[k] / count[k] for k in range(n)]
    return {b: v / min(offer[b[0]], offer[b[1]]) for b, v in blocks.items()}


def fm_ledger(blocks: dict[Block, float], scales: dict[Block, float]) -> PrivacyLedger:
    """The privacy ledger of one FM release: each block is one Laplace(scale_G) release of L1
    sensitivity Δ_G (its coefficients share the L1 bound), recorded once in the sample
    accountant and under each party it touches."""
    ledger = PrivacyLedger("sample")
    for blk in sorted(blocks):
        ev = laplace_event(scale=scales[blk], sensitivity=blocks[blk])
        for k in sorted(set(blk)):
            ledger.compose(k, ev, sample=False)
        ledger.compose(None, ev)
    return ledger


def target_bottom_up_scales(blocks: dict[Block, float], epsilon: float) -> dict[Block, float]:
    """Bottom-up with equal offers, scaled so that the global ε Σ_G Δ_G/scale_G is ``epsilon``."""
    check_positive("epsilon", epsilon)
    n = 1 + max(max(b) for b in blocks)
    scales = bottom_up_scales(blocks, [1.0] * n)
    total = sum(blocks[b] / scales[b] for b in blocks)
    return {b: v * total / epsilon for b, v in scales.items()}
