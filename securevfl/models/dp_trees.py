"""Boosted trees fitted under differential privacy on one party's own columns and labels (the
label holder's DP offset model, fm-vfl ``--offset dp-gbdt``).

Logistic boosting with Newton leaves: round t fits a tree to g = p - y, h = p (1 - p) at the
current margins and moves each row's margin by its leaf's -η G / (H + λ). Every number taken
from the rows is a noisy sum, released with Gaussian noise; what the trees do with those sums
(the leaf values, the margins, the next round's g and h) is post-processing.

Split points are public: a column's candidate thresholds are the ``bins - 1`` inner edges of
``bins`` equal widths of its public domain ([-1, 1] / sqrt(bound_sq) for the prepared columns:
``models.boosted_trees``' bins); a row goes left when ``x <= threshold`` (as ``tree_arrays``
walks a saved tree, so training and scoring route every row alike, a value on an edge included).
Two ways to pick a node's split (``splits``):

* ``random``: a column and an edge drawn from ``split_rng``, a generator seeded by the run's
  public seed, independent of the rows. A tree's only release is its leaves' (G, H) sums.
* ``greedy``: level by level, each node's (G, H) per column and bin, noised, and the split of
  largest XGBoost gain (``boosted_trees.split_gains``, the noise's expected excess removed); then
  the leaves' sums as above. Each tree releases ``depth`` histogram levels and its leaves.

Sensitivity (unit sample: replacing one row, its columns and its label). Normalise each row's
pair to u = (g, h / C_h), C_h = 1/4, so the noise is N(0, σ²) on a G sum and N(0, (σ C_h)²) on
an H sum. With t = |g| = |p - y| in [0, 1], h = p (1 - p) = t (1 - t) (for y = 0, t = p; for
y = 1, t = 1 - p), so ||u||² = t² + 16 t² (1 - t)² <= 1 + 1 = 2. One release is a vector of
per-slot sums (a leaf; or a node, column and bin), each row in exactly one slot of each column
(one for leaves). The replaced row leaves slot a and its substitute enters slot b:

* a != b: the change is (u_old at a, -u_new at b), norm² <= 2 + 2 = 4;
* a = b: (t_1 + t_2)² + 16 (t_1 - t_2)² (1 - t_1 - t_2)² (using |g_1 - g_2| <= t_1 + t_2 and
  t_1 (1 - t_1) - t_2 (1 - t_2) = (t_1 - t_2)(1 - t_1 - t_2)); with s = t_1 + t_2 and
  |t_1 - t_2| <= min(s, 2 - s) it is <= s² (1 + 16 (1 - s)²) <= 1.3 for s <= 1, and
  <= s² + 16 (2 - s)² (s - 1)² <= 4 for s in [1, 2] (equivalently 16 (2 - s)(s - 1)² <= 2 + s,
  whose left side peaks at 64/27 < 3).

So a leaf release moves by at most Δ = 2 in L2 and a histogram level (every column of the node
a row is in) by at most 2 sqrt(d) (:func:`release_sensitivity`). Other rows' g and h are
functions of the released trees so far and of their own rows, so for the next release they do
not move: the rounds compose adaptively. The margins every row starts a round from come from
released trees only; the row's own columns decide its leaf, which the bound covers (a and b
above are arbitrary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.models.boosted_trees import leaf_value, split_gains
from securevfl.models.tree_arrays import PREFIX

SPLITS = ("random", "greedy")
HESSIAN_SCALE = 0.25  # C_h: h = p (1 - p) <= 1/4
MIN_HESSIAN = 0.01  # the mean hessian's floor: the step gain 1 / (4 h̄) stays <= 25


@dataclass(frozen=True)
class DpTreesConfig:
    """The trees' shape and learning rule (public settings)."""

    trees: int = 40
    depth: int = 4
    bins: int = 16
    learning_rate: float = 0.3
    lam: float = 60.0  # λ of the Newton leaf: shrinks leaves whose noisy H is small
    splits: str = "random"


@dataclass
class DpTrees:
    """The fitted trees as ``tree_arrays`` node arrays, the training rows' margins, the releases
    made (σ, Δ, count: N(0, σ²) per normalised slot of a query of L2 sensitivity Δ) and the mean
    hessian over the rows, from the last quarter of the rounds' noisy H sums (post-processing;
    its margins a little before the final ones, so it errs high and the gain low)."""

    arrays: dict[str, np.ndarray]
    margins: np.ndarray
    releases: list[tuple[float, float, int]]
    mean_hessian: float


def release_sensitivity(columns: int | None) -> float:
    """L2 sensitivity (unit sample) of one release of normalised (g, h / C_h) sums: a leaf
    release (``columns`` None) or a histogram level over ``columns`` columns (module docstring)."""
    return 2.0 if columns is None else 2.0 * math.sqrt(columns)


def normalised_sums(slot: np.ndarray, g: np.ndarray, h: np.ndarray, slots: int) -> np.ndarray:
    """The released query before noise: per slot (Σ g, Σ h / C_h) over the rows in it,
    ``slot`` each row's slot (a leaf; or node, column and bin: one entry per row and column)."""
    reps = slot.size // len(g)
    G = np.bincount(slot.ravel(), weights=np.repeat(g, reps), minlength=slots)
    H = np.bincount(slot.ravel(), weights=np.repeat(h, reps), minlength=slots)
    return np.stack([G, H / HESSIAN_SCALE])


def thresholds(bins: int, bound_sq: float) -> np.ndarray:
    """The ``bins - 1`` inner edges of ``bins`` equal widths of [-1, 1] / sqrt(bound_sq)."""
    return (-1.0 + 2.0 * np.arange(1, bins) / bins) / math.sqrt(bound_sq)


def release_sigmas(cfg: DpTreesConfig, mu_per_tree: float, columns: int) -> tuple[float, float]:
    """(σ of a histogram level, σ of a leaf release) for a tree of Gaussian-DP parameter
    ``mu_per_tree``: its releases' μ² add up to it, each release an equal share of it."""
    per = cfg.depth + 1 if cfg.splits == "greedy" else 1
    mu_one = mu_per_tree / math.sqrt(per)
    return release_sensitivity(columns) / mu_one, release_sensitivity(None) / mu_one


def tree_releases(
    cfg: DpTreesConfig, mu_per_tree: float, columns: int
) -> list[tuple[float, float, int]]:
    """(σ, Δ, count) of every release a fit makes: public, so any party can account them."""
    s_level, s_leaf = release_sigmas(cfg, mu_per_tree, columns)
    out = [(s_leaf, release_sensitivity(None), cfg.trees)]
    if cfg.splits == "greedy":
        out.insert(0, (s_level, release_sensitivity(columns), cfg.trees * cfg.depth))
    return out


def fit_dp_trees(
    X: np.ndarray,
    y: np.ndarray,
    cfg: DpTreesConfig,
    *,
    mu_per_tree: float,
    bound_sq: float,
    noise_rng: Any,
    split_rng: np.random.Generator,
) -> DpTrees:
    """Boost ``cfg.trees`` trees on (X, y), y in {0, 1}, each tree's releases at Gaussian-DP
    parameter ``mu_per_tree`` (sample unit); ``noise_rng`` draws the noise (the party's CSPRNG),
    ``split_rng`` the random splits (public)."""
    if cfg.splits not in SPLITS:
        raise ValueError(f"splits must be one of {SPLITS}, got {cfg.splits!r}")
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n, d = X.shape
    edges = thresholds(cfg.bins, bound_sq)
    bins = np.stack([np.searchsorted(edges, X[:, c], side="left") for c in range(d)], axis=1)
    sigma_level, sigma_leaf = release_sigmas(cfg, mu_per_tree, d)
    inner, leaves = 2**cfg.depth - 1, 2**cfg.depth
    feats, cuts, values = [], [], []
    margin, h_sums = np.zeros(n), []
    for _ in range(cfg.trees):
        p = 1.0 / (1.0 + np.exp(-margin))
        g, h = p - y, p * (1.0 - p)
        if cfg.splits == "random":
            col = split_rng.integers(0, d, size=inner)
            cut = split_rng.integers(0, cfg.bins - 1, size=inner)
        else:
            col, cut = _greedy_splits(bins, g, h, cfg, sigma_level, noise_rng)
        node = _route(bins, col, cut, cfg.depth)
        noisy = normalised_sums(node, g, h, leaves) + noise_rng.normal(0.0, sigma_leaf, (2, leaves))
        G, H = noisy[0], noisy[1] * HESSIAN_SCALE
        step = [leaf_value(G[i], max(H[i], 0.0), cfg.lam) for i in range(leaves)]
        leaf = cfg.learning_rate * np.asarray(step)
        margin = margin + leaf[node]
        feats.append(col)
        cuts.append(edges[cut])
        values.append(leaf)
        h_sums.append(float(H.sum()))
    releases = tree_releases(cfg, mu_per_tree, d)
    # the last quarter's noisy totals: one tree's is too noisy where n is small (its noise
    # sd is σ_leaf · C_h · 2^(depth/2)); margins move little over the last rounds
    late = h_sums[-max(1, cfg.trees // 4) :]
    h_mean = float(np.clip(np.mean(late) / n, MIN_HESSIAN, HESSIAN_SCALE))
    return DpTrees(_to_arrays(feats, cuts, values, cfg.depth), margin, releases, h_mean)


def _route(bins: np.ndarray, col: np.ndarray, cut: np.ndarray, depth: int) -> np.ndarray:
    """Each row's leaf (0 .. 2^depth - 1) in a full tree whose node i (breadth first) sends a
    row right when its bin in column col[i] is above cut[i] (x above the edge)."""
    rows = np.arange(len(bins))
    node = np.zeros(len(bins), dtype=np.int64)
    for _ in range(depth):
        right = bins[rows, col[node]] > cut[node]
        node = 2 * node + 1 + right
    return node - (2**depth - 1)


def _greedy_splits(bins, g, h, cfg: DpTreesConfig, sigma: float, noise_rng: Any):
    """Each inner node's (column, cut) of largest gain on noisy per-bin sums, level by level."""
    n, d = bins.shape
    col = np.zeros(2**cfg.depth - 1, dtype=np.int64)
    cut = np.zeros(2**cfg.depth - 1, dtype=np.int64)
    for level in range(cfg.depth):
        first, width = 2**level - 1, 2**level
        node = _route(bins, col, cut, level) if level else np.zeros(n, dtype=np.int64)
        slots = width * d * cfg.bins
        idx = (node[:, None] * d + np.arange(d)) * cfg.bins + bins
        noisy = normalised_sums(idx, g, h, slots) + noise_rng.normal(0.0, sigma, (2, slots))
        hg = noisy[0].reshape(width, d, cfg.bins)
        hh = (noisy[1] * HESSIAN_SCALE).reshape(width, d, cfg.bins)
        for j in range(width):
            # the node's totals: every column's bins sum to them; their mean is the least noisy
            G, H = float(hg[j].sum(axis=1).mean()), float(hh[j].sum(axis=1).mean())
            gain = split_gains(G, H, hg[j], hh[j], cfg.lam, 1.0, g_noise_var=sigma**2)
            best = int(np.argmax(gain))
            col[first + j], cut[first + j] = divmod(best, cfg.bins - 1)
    return col, cut


def _to_arrays(feats, cuts, values, depth: int) -> dict[str, np.ndarray]:
    """Full trees (breadth first: node i's children 2i + 1, 2i + 2) as ``tree_arrays``' nodes."""
    inner, total = 2**depth - 1, 2 ** (depth + 1) - 1
    local = np.arange(total)
    is_leaf = (local >= inner).astype(np.uint8)
    fields = ("feature", "threshold", "left", "right", "value")
    out: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    for t, (col, cut, leaf) in enumerate(zip(feats, cuts, values, strict=True)):
        shift = t * total
        out["feature"].append(np.concatenate([col, np.zeros(total - inner, dtype=np.int64)]))
        out["threshold"].append(np.concatenate([cut, np.zeros(total - inner)]))
        out["left"].append(np.where(is_leaf, -1, 2 * local + 1 + shift))
        out["right"].append(np.where(is_leaf, -1, 2 * local + 2 + shift))
        out["value"].append(np.concatenate([np.zeros(inner), leaf]))
    trees = len(values)
    cat = {f: np.concatenate(v) if v else np.zeros(0) for f, v in out.items()}
    return {
        PREFIX + "feature": cat["feature"].astype(np.int64),
        PREFIX + "threshold": cat["threshold"].astype(np.float64),
        PREFIX + "missing_left": np.zeros(trees * total, dtype=np.uint8),  # NaN: right, as trained
        PREFIX + "left": cat["left"].astype(np.int64),
        PREFIX + "right": cat["right"].astype(np.int64),
        PREFIX + "leaf": np.tile(is_leaf, trees),
        PREFIX + "value": cat["value"].astype(np.float64),
        PREFIX + "roots": np.arange(trees, dtype=np.int64) * total,
        PREFIX + "baseline": np.zeros(1),
    }
