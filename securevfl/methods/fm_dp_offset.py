"""fm-vfl ``--offset dp-gbdt``: the residual mode with the label holder's trees fitted under DP,
so the run's ε covers every party's rows and the labels (unit ``sample``).

Two releases, composed adaptively (one PLD ledger, ``dp_ledger``):

1. The label holder's boosted trees on its own columns and labels (``models.dp_trees``): per
   tree the noisy (G, H) sums of its leaves (``--offset-splits random``, the default: splits
   drawn from the public seed) or also ``depth`` noisy histogram levels (``greedy``). Each
   release is Gaussian with the L2 sensitivity derived in ``models.dp_trees`` (replacing one
   row and its label: 2 for the leaves, 2 sqrt(d_0) for a level).
2. fm-vfl's objective with the released trees' margins as offsets (``fm_offset``). Given the
   trees (release 1, now fixed), the margin m_j = F(x_j^A) of row j is a function of that row
   alone, so replacing row j (its label holder's columns x_j^A, its label y_j and its partners'
   blocks) changes only its own term φ(x_j, v_j) of the coefficient vector, x_j = (1, x_j^B)
   clipped to L2 norm R and v_j = σ(m_j) - y_j in (-1, 1): x_j^A is not in the vector (it moves
   only v_j, through the fixed trees), y_j moves only v_j, and fm_gaussian's bound
   Δ₂ <= 2 sqrt(v_max² R² + 2 c² R⁴) with v_max = 1 holds for the replaced term as for
   ``--offset gbdt``'s partner row. Every other row's v_i is unchanged.
3. With ``--center``, every party's pure ε_c release of its column means (as the joint fm-vfl);
   on ``csv:`` data without ``--bounds``, the parties' DP column ranges are set aside and
   composed by the run (``run.dp_ranges``, sized in fm-vfl's unit, sample) as for the joint mode.

Budget. The run's ε (δ) is met by one Gaussian-DP parameter μ (``fm_gaussian.gaussian_sigma``
in the sample unit: a Gaussian of μ composed with the K means' releases). Gaussians compose as
μ² adds, so ``--offset-share`` s gives the trees μ_trees² = s μ² (μ_trees² / trees per tree) and
the objective the rest: σ_obj = Δ₂ / (μ sqrt(1 - s)). The ledger composes exactly those
releases and its ε is the record's; the target is met by construction.

Curvature gain (``fm_offset.step_gain``). In this mode h̄ is not taken from the rows: it is the
last quarter of the trees' noisy H sums over n, floored at 0.01 (``DpTrees.mean_hessian``):
post-processing of release 1.

Margins in the objective are the trees' on the training rows themselves (no out-of-fold): an
out-of-fold margin would need the trees fitted again per fold, each fit another release of the
label holder's rows; the trees are fitted once on all training rows and their margins used.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec
from securevfl.models.dp_trees import SPLITS, DpTreesConfig, fit_dp_trees
from securevfl.models.tree_arrays import clipped_log_odds
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import PureDpEvent, gaussian_event

# tuned on synthetic-logistic and breast (K = 2, ε 2 and 8: docs/benchmarks.md), not phishing/adult
DP_TREES = DpTreesConfig()
OFFSET_SHARE_OPTION = Option(
    float,
    0.5,
    "--offset dp-gbdt: the share of the run's Gaussian budget (mu squared, which adds over "
    "Gaussian releases) that the label holder's DP trees spend; the noisy objective gets the rest",
    gt=0.0,
    lt=1.0,
    when=("offset", ("dp-gbdt",)),
)
OFFSET_SPLITS_OPTION = Option(
    str,
    DP_TREES.splits,
    "--offset dp-gbdt: how the DP trees split: random (public edges drawn from the seed, only "
    "the leaves' noisy sums released) or greedy (noisy per-bin histograms, then the leaves)",
    choices=SPLITS,
    when=("offset", ("dp-gbdt",)),
)
OFFSET_TREES_OPTION = Option(
    int,
    DP_TREES.trees,
    "--offset dp-gbdt: how many DP trees the label holder boosts (more trees: more noise on each, "
    "the budget is the same)",
    ge=1,
    le=10_000,
    when=("offset", ("dp-gbdt",)),
)


def dp_budget(sens2: float, sigma_total: float, share: float, trees: int) -> tuple[float, float]:
    """(σ of the objective, μ of one tree): the Gaussian σ_total that meets ε alone is split
    as μ² = μ_obj² + trees · μ_tree² with μ_trees² = share · μ² (module docstring)."""
    mu = sens2 / sigma_total
    return sigma_total / math.sqrt(1.0 - share), mu * math.sqrt(share / trees)


def tree_config(spec: RunSpec, method: Any) -> DpTreesConfig:
    """The run's tree settings: ``DP_TREES`` with the user's ``--offset-splits``/``-trees``."""
    return replace(
        DP_TREES,
        splits=spec.option("offset_splits", method),
        trees=int(spec.option("offset_trees", method)),
    )


def dp_offsets(ctx: RunContext, cfg: DpTreesConfig, mu_per_tree: float):
    """(training margins, test margins, the trees' arrays, the step gain): the label holder's
    DP trees (release 1); runs at the label holder."""
    v = ctx.views[0]
    split_rng = np.random.default_rng([int(ctx.shared_seed % 2**63), 43])  # public: the seed's
    fit = fit_dp_trees(
        v.X_train,
        v.y_train,
        cfg,
        mu_per_tree=mu_per_tree,
        bound_sq=ctx.info.row_norm_bound_sq,
        noise_rng=ctx.noise_rng(0, "fm-offset-trees"),
        split_rng=split_rng,
    )
    m_train = clipped_log_odds(fit.arrays, v.X_train)
    gain = 0.25 / fit.mean_hessian
    return m_train, clipped_log_odds(fit.arrays, v.X_test), fit.arrays, gain


def dp_ledger(
    objective: tuple[float, float],
    trees: list[tuple[float, float, int]],
    parties: int,
    eps_c: float,
) -> PrivacyLedger:
    """Unit sample: the trees' releases (the label holder's rows), the objective's Gaussian
    (every party's), each party's means; per party the releases its rows enter."""
    ledger = PrivacyLedger("sample")
    obj = gaussian_event(sigma=objective[0], sensitivity=objective[1])
    for sigma, sens, count in trees:
        ledger.compose(0, gaussian_event(sigma=sigma, sensitivity=sens, count=count))
    for k in range(parties):
        ledger.compose(k, obj, sample=k == 0)
        if eps_c > 0:
            ledger.compose(k, PureDpEvent(eps_c))
    return ledger


def dp_extra(spec: RunSpec, method: Any, noise: dict) -> dict[str, Any]:
    """The record's facts about release 1 (public settings and noise)."""
    cfg = noise["tree_config"]
    return {
        "offset_share": float(spec.option("offset_share", method)),
        "offset_trees": {
            "trees": cfg.trees,
            "depth": cfg.depth,
            "bins": cfg.bins,
            "learning_rate": cfg.learning_rate,
            "lam": cfg.lam,
            "splits": cfg.splits,
            "mu_per_tree": noise["mu_per_tree"],
            "releases": [
                {"sigma": s, "sensitivity": d, "count": c} for s, d, c in noise["tree_releases"]
            ],
        },
    }
