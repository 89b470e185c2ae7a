"""Gradient-boosted trees split across parties: public bins, XGBoost's split gain, the label
holder's tree skeleton and each party's lookup table (SecureBoost, Cheng et al. 2021).

Bins come from the columns' public domain alone: every prepared column lies in
``[-1, 1] / sqrt(row_norm_bound_sq)`` (min/max scaling by the declared domain, then the public
row-norm bound), cut into ``n_bins`` equal widths. Nothing here is fitted on a value, so a bin
edge is public. A split is (column, bin b): a row goes left when its bin is <= b.

The skeleton (:class:`TreeSet`, at the label holder) holds per node the owner party and a record
id into the owner's :class:`Lookup` (column, bin); a leaf holds its value (learning rate applied).
Only the owner can say which way a row goes at its nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

LEAF = -1  # owner of a leaf node
MAX_NODES = 1 << 24  # a saved skeleton or lookup table may not announce more
DESCENT_STEPS = 8  # coordinate steps to the least gain in a noise box (each in closed form)


def bin_index(X: np.ndarray, n_bins: int, bound_sq: float) -> np.ndarray:
    """Each value's bin among ``n_bins`` equal widths of the public domain (int32)."""
    u = np.asarray(X, dtype=np.float64) * math.sqrt(bound_sq)  # back to [-1, 1]
    b = np.floor((u + 1.0) * 0.5 * n_bins + 1e-9)
    return np.clip(b, 0, n_bins - 1).astype(np.int32)


def logistic_grad_hess(y: np.ndarray, margin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradient p - y in [-1, 1] and hessian p (1 - p) in [0, 1/4] of the logistic loss."""
    p = 1.0 / (1.0 + np.exp(-margin))
    return p - y, p * (1.0 - p)


def squared_grad_hess(
    y: np.ndarray, margin: np.ndarray, clip: float
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient (clipped to [-clip, clip]) and hessian 1 of the squared loss / 2."""
    return np.clip(margin - y, -clip, clip), np.ones_like(margin)


def _left_sums(hist_g: np.ndarray, hist_h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g, h) sums left of every split: bins 0..b of each column, for b below the last bin."""
    return np.cumsum(hist_g, axis=1)[:, :-1], np.cumsum(hist_h, axis=1)[:, :-1]


def split_gains(
    G: float,
    H: float,
    hist_g: np.ndarray,
    hist_h: np.ndarray,
    lam: float,
    min_child: float,
    g_noise_var: float = 0.0,
) -> np.ndarray:
    """XGBoost's gain of every (column, bin) split of a node with sums (G, H); ``hist_*``
    are (columns, bins) sums; -inf where a child's hessian is below ``min_child``.

    ``g_noise_var``: the variance of the noise on each bin's g sum (secureboost-dp). A left
    sum over b + 1 bins then carries (b + 1) times it, and so does the right one (G is exact),
    and E[GL_noisy^2] = GL^2 + var: the expected excess is subtracted, or noisy columns would
    win splits for their noise alone (post-processing of the noisy sums)."""
    GL, HL = _left_sums(hist_g, hist_h)
    if not H + lam > 0:  # no hessian mass (λ = 0, or noisy sums): no split has a finite gain
        return np.full(GL.shape, -np.inf)
    GR, HR = G - GL, H - HL
    floor = max(min_child, 1e-12)
    ok = (HL >= floor) & (HR >= floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = 0.5 * (GL**2 / (HL + lam) + GR**2 / (HR + lam) - G**2 / (H + lam))
        if g_noise_var:
            var = g_noise_var * np.arange(1, hist_g.shape[1])
            gain = gain - 0.5 * var * (1.0 / (HL + lam) + 1.0 / (HR + lam))
    return np.where(ok, gain, -np.inf)


def noise_z(m: int) -> float:
    """sqrt(2 ln(4m)): a bound on the expected largest of the 2m standardised Gaussian draws
    (|Z|) behind m noisy candidates' left (g, h) sums, whatever their dependence."""
    return math.sqrt(2.0 * math.log(4.0 * max(m, 1)))


def noisy_gain_floor(
    G: float,
    H: float,
    hist_g: np.ndarray,
    hist_h: np.ndarray,
    lam: float,
    min_child: float,
    noise_sd: tuple[float, float],
    z: float,
) -> np.ndarray:
    """The least gain of each (column, bin) split consistent with noisy bin sums: -inf where
    a child's hessian may lie below ``min_child`` (secureboost-dp's split rule).

    ``noise_sd``: the sd of the Gaussian noise on each bin's (g, h) sum. A left sum over b + 1
    bins is off by e ~ N(0, (b + 1) sd_g^2) in g and u in h (the right sums by -e, -u: G and H
    are exact). Taking the largest of m such noisy gains picks the candidate whose noise
    inflated it most (the expected excess that ``split_gains`` subtracts does not cover the
    maximum). So each candidate is scored by the smallest gain over the box
    |e| <= z sqrt(b + 1) sd_g, |u| <= z sqrt(b + 1) sd_h, z = ``noise_z(m)``: every draw lies
    in its box unless its |Z| exceeds the maximum's bound. A candidate made of noise, whose
    true children have equal weights GL/(HL+λ) = GR/(HR+λ), then scores at most the gain's
    minimum (negative), so it wins nothing; a real split keeps its gain less the noise it may
    carry. The gain is jointly convex in (GL, HL) (quadratic-over-linear terms), so the box
    minimum is reached by coordinate descent, each step in closed form: at fixed HL the
    vertex GL = G (HL+λ)/(H+2λ); at fixed GL, HL+λ = |GL| (H+2λ)/(|GL|+|GR|). Post-processing
    of the released sums: no change to ε."""
    GL, HL = _left_sums(hist_g, hist_h)
    if not H + lam > 0:  # no hessian mass: as in ``split_gains``
        return np.full(GL.shape, -np.inf)
    width = z * np.sqrt(np.arange(1, hist_g.shape[1], dtype=np.float64))
    dg, dh = width * noise_sd[0], width * noise_sd[1]
    floor = max(min_child, 1e-12)
    ok = (HL - dh >= floor) & (H - HL - dh >= floor)  # both children's true hessians clear it
    g_lo, g_hi = GL - dg, GL + dg
    h_lo, h_hi = np.where(ok, HL - dh, floor), np.where(ok, HL + dh, floor)
    g, h = GL, np.clip(HL, h_lo, h_hi)
    with np.errstate(divide="ignore", invalid="ignore"):  # only where not ok (masked below)
        for _ in range(DESCENT_STEPS):
            g = np.clip(G * (h + lam) / (H + 2 * lam), g_lo, g_hi)
            aL, aR = np.abs(g), np.abs(G - g)
            spread = np.where(aL + aR > 0, aL / np.maximum(aL + aR, 1e-300), 0.5)
            h = np.clip(spread * (H + 2 * lam) - lam, h_lo, h_hi)
        gain = 0.5 * (g**2 / (h + lam) + (G - g) ** 2 / (H - h + lam) - G**2 / (H + lam))
    return np.where(ok, gain, -np.inf)


def leaf_value(G: float, H: float, lam: float) -> float:
    """The optimal leaf weight -G / (H + λ)."""
    return float(-G / (H + lam)) if H + lam > 0 else 0.0


@dataclass
class Lookup:
    """One party's split table: record id -> (its column, bin). Never leaves the party."""

    column: list[int] = field(default_factory=list)
    bin: list[int] = field(default_factory=list)

    def add(self, column: int, b: int) -> int:
        self.column.append(int(column))
        self.bin.append(int(b))
        return len(self.column) - 1

    def goes_left(self, bins: np.ndarray, rows: np.ndarray, records: np.ndarray) -> np.ndarray:
        """Whether row ``rows[i]`` goes left at record ``records[i]`` (bins: rows x columns)."""
        col = np.asarray(self.column, dtype=np.int64)[records]
        cut = np.asarray(self.bin, dtype=np.int64)[records]
        return bins[rows, col] <= cut

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "lookup_column": np.asarray(self.column, dtype=np.int64),
            "lookup_bin": np.asarray(self.bin, dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], columns: int, n_bins: int) -> Lookup:
        col, b = arrays["lookup_column"], arrays["lookup_bin"]
        if col.shape != b.shape or col.ndim != 1 or len(col) > MAX_NODES:
            raise ValueError(f"lookup_column and lookup_bin must be equal 1-d, got {col.shape}")
        if len(col) and not (0 <= col.min() and col.max() < columns):
            raise ValueError(f"lookup_column must index the party's {columns} columns")
        if len(b) and not (0 <= b.min() and b.max() < n_bins - 1):
            raise ValueError(f"lookup_bin must be a split bin below {n_bins - 1}")
        return cls([int(c) for c in col], [int(x) for x in b])


@dataclass
class TreeSet:
    """Every tree's nodes, flat: owner party (LEAF for a leaf), record id at the owner, children
    (indices into the flat arrays), leaf value; ``roots`` the first node of each tree."""

    owner: list[int] = field(default_factory=list)
    record: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)
    base: float = 0.0  # the margin every row starts from

    def new_node(self) -> int:
        for lst, v in ((self.owner, LEAF), (self.record, -1), (self.left, -1), (self.right, -1)):
            lst.append(v)
        self.value.append(0.0)
        return len(self.owner) - 1

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "tree_owner": np.asarray(self.owner, dtype=np.int64),
            "tree_record": np.asarray(self.record, dtype=np.int64),
            "tree_left": np.asarray(self.left, dtype=np.int64),
            "tree_right": np.asarray(self.right, dtype=np.int64),
            "tree_value": np.asarray(self.value, dtype=np.float64),
            "tree_roots": np.asarray(self.roots, dtype=np.int64),
            "tree_base": np.asarray([self.base], dtype=np.float64),
        }

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray], n_parties: int) -> TreeSet:
        names = ("tree_owner", "tree_record", "tree_left", "tree_right", "tree_value")
        n = len(a["tree_owner"])
        if n > MAX_NODES or any(a[k].shape != (n,) for k in names):
            raise ValueError(f"tree arrays must be 1-d of one length <= {MAX_NODES}")
        ts = cls(*(a[k].tolist() for k in names), a["tree_roots"].tolist())
        ts.base = float(a["tree_base"][0])
        inner = [i for i in range(n) if ts.owner[i] != LEAF]
        if any(not 0 <= ts.owner[i] < n_parties for i in inner) or any(
            not (i < ts.left[i] < n and i < ts.right[i] < n) for i in inner
        ):
            raise ValueError("tree nodes must name a party and point forward to their children")
        if any(not 0 <= r < max(n, 1) for r in ts.roots):
            raise ValueError("tree_roots must index the node arrays")
        return ts

    def depth(self) -> int:
        """Levels of splits of the deepest tree."""
        best = 0
        for r in self.roots:
            stack = [(r, 0)]
            while stack:
                i, d = stack.pop()
                if self.owner[i] == LEAF:
                    best = max(best, d)
                else:
                    stack += [(self.left[i], d + 1), (self.right[i], d + 1)]
        return best
