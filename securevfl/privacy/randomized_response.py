"""Randomized response on labels as an exact pmf pair, so RDP and PLD accountants compose it
at its true curve rather than the generic pure-ε bound.

k-ary randomized response at ε keeps a label with p = e^ε / (e^ε + c - 1) and otherwise
answers one of the c - 1 other classes uniformly (q = (1 - p) / (c - 1) each). Two neighbouring
labels y ≠ y' give output distributions that differ only on the outcomes y and y' (p, q)
versus (q, p); the other c - 2 outcomes have mass q under both. Every neighbouring pair is this
pair up to a relabelling of the outcomes, so it is the mechanism's exact (tight) pair, and it
is symmetric. Its Rényi divergence of order α is, in closed form,

    D_α = log(p^α q^(1-α) + q^α p^(1-α) + (c - 2) q) / (α - 1),

below the pure-ε bound min(ε, αε²/2) that ``Accountant`` uses for a :class:`PureDpEvent`.
"""

from __future__ import annotations

import math

from securevfl.errors import ConfigError
from securevfl.privacy.events import PMFPairDpEvent


def rr_event(epsilon: float, n_classes: int) -> PMFPairDpEvent:
    """One randomized response of a label over ``n_classes`` classes at ``epsilon``."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"label_epsilon must be a finite number > 0, got {epsilon}")
    if int(n_classes) != n_classes or n_classes < 2:
        raise ConfigError(f"n_classes must be an integer >= 2, got {n_classes}")
    c = int(n_classes)
    # log p and log q without overflow at large ε: p = 1 / (1 + (c-1) e^-ε), q = p e^-ε
    log_p = -math.log1p((c - 1) * math.exp(-epsilon))
    log_q = log_p - epsilon
    rest = (log_q,) * (c - 2)
    return PMFPairDpEvent(
        log_lower=(log_p, log_q, *rest), log_upper=(log_q, log_p, *rest), symmetric=True
    )
