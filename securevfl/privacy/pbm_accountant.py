"""Exact privacy accounting for PBM-VFL (the seed paper's bounds carry an unknown constant C0).

What is released, per sample use and embedding coordinate, is the secure sum
q_hat = sum_m q_m with q_m ~ Binomial(b, 1/2 + beta x_m / C): a Poisson-binomial variable on
{0, ..., bM}. We compute its privacy loss numerically for worst-case adjacent inputs:

* feature privacy (one party's embedding changes): party m moves from -C to +C (the largest
  shift), the other M-1 parties sit at the extremes, j of them at +C. A sum of binomials with a
  common p is binomial, so each pair is a convolution of two binomials. All j = 0..M-1 are tried;
  the map o -> bM - o turns configuration j read backwards into configuration M-1-j, so one
  direction over all j covers both directions. (That the extremes are the worst case for the
  others is checked by brute force on tiny cases in the tests; it is not proved here.)
* sample privacy (all M embeddings of one sample change): Binomial(bM, 1/2-beta) against
  Binomial(bM, 1/2+beta).

Coordinates are independent releases and an L-infinity bound lets every coordinate move by 2C, so
one use costs P compositions; each sample is used once per epoch by the shared trainer (a fresh
permutation per epoch), so a run of E epochs composes P*E releases: the paper's T*B/N uses,
exactly rather than in expectation. No amplification by subsampling: every party knows which
sample is in which batch (Section 6.1 of the paper).

Two accountants, both from dp_accounting:
* PLD from the two pmfs (``from_two_probability_mass_functions``, pessimistic rounding), composed
  P*E times: the headline epsilon(delta). We check on a grid whether one configuration's
  hockey-stick curve (epsilon >= 0) lies above those of all configurations in both directions;
  if so (``dominating_pair``) we compose that pair; if not, we report the largest epsilon over
  the configurations each composed with itself (the worst configuration repeated), and the RDP
  figure below is the bound that holds for any mix.
* RDP: exact Renyi divergences over an alpha grid, the max over configurations at each alpha
  (a valid bound under any mix of configurations), times P*E, converted with dp_accounting's
  ``compute_epsilon``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from scipy.special import logsumexp
from scipy.stats import binom

from securevfl.errors import ConfigError, check_int, check_open_unit
from securevfl.privacy.pbm import PBMEvent, check_pbm_params

ACCOUNTANT_NAME = "pbm-exact (dp_accounting PLD of the Poisson-binomial sum; RDP cross-check)"
RDP_ORDERS: tuple[float, ...] = (
    1.1,
    1.25,
    1.5,
    1.75,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    6.0,
    8.0,
    10.0,
    12.0,
    16.0,
    20.0,
    24.0,
    32.0,
    48.0,
    64.0,
    128.0,
    256.0,
)
NOTIONS = ("feature", "sample")


def binom_logpmf(n: int, p: float) -> np.ndarray:
    """log pmf of Binomial(n, p) on {0, ..., n} (n = 0: the point mass at 0)."""
    return binom.logpmf(np.arange(n + 1), n, p)


def log_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log of the convolution of two pmfs given as log pmfs (exact, no underflow)."""
    grid = a[:, None] + b[None, :]
    out = np.full(len(a) + len(b) - 1, -np.inf)
    for s in range(len(out)):  # anti-diagonals of the outer sum
        i = np.arange(max(0, s - len(b) + 1), min(s, len(a) - 1) + 1)
        out[s] = logsumexp(grid[i, s - i])
    return out


def poisson_binomial_logpmf(ps: Sequence[float], b: int) -> np.ndarray:
    """log pmf of sum_m Binomial(b, p_m) (used by the brute-force checks)."""
    out = np.zeros(1)
    for p in ps:
        out = log_convolve(out, binom_logpmf(b, p))
    return out


@lru_cache(maxsize=256)
def neighbour_pairs(
    notion: str, b: int, beta: float, n_parties: int
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The worst-case adjacent output distributions (log pmfs) of one coordinate's secure sum."""
    hi, lo = 0.5 + beta, 0.5 - beta
    M = n_parties
    if notion == "sample":
        return ((binom_logpmf(b * M, hi), binom_logpmf(b * M, lo)),)
    if notion != "feature":
        raise ConfigError(f"notion must be one of {NOTIONS}, got {notion!r}")
    pairs = []
    for j in range(M):  # j of the other M-1 parties at +C
        up = log_convolve(binom_logpmf(b * (j + 1), hi), binom_logpmf(b * (M - 1 - j), lo))
        down = log_convolve(binom_logpmf(b * j, hi), binom_logpmf(b * (M - j), lo))
        pairs.append((up, down))
    return tuple(pairs)


def renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_alpha(P || Q) = log(sum P^alpha Q^(1-alpha)) / (alpha - 1), exactly, in log space."""
    return float(logsumexp(alpha * log_p + (1.0 - alpha) * log_q) / (alpha - 1.0))


def hockey_stick(log_p: np.ndarray, log_q: np.ndarray, epsilon: float) -> float:
    """delta(epsilon) = sum_o max(0, P(o) - e^epsilon Q(o)) of one release."""
    return float(np.sum(np.maximum(0.0, np.exp(log_p) - np.exp(epsilon + log_q))))


def _dominating_index(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[int, bool]:
    """Index of the pair whose hockey-stick curve (eps >= 0) is largest, and whether it is
    largest everywhere, against every pair in both directions."""
    if len(pairs) == 1:
        return 0, True
    top = max(float(np.max(np.abs(p - q))) for p, q in pairs)
    grid = np.linspace(0.0, top, 121)
    curves = np.array([[hockey_stick(p, q, e) for e in grid] for p, q in pairs])
    back = np.array([[hockey_stick(q, p, e) for e in grid] for p, q in pairs])
    best = int(np.argmax(curves.sum(axis=1)))
    envelope = np.maximum(curves.max(axis=0), back.max(axis=0))
    return best, bool(np.all(curves[best] >= envelope - 1e-12))


def _pld_epsilon(up: np.ndarray, down: np.ndarray, k: int, delta: float, interval: float) -> float:
    pld = pld_lib.from_two_probability_mass_functions(
        {i: float(v) for i, v in enumerate(down) if v > -np.inf},
        {i: float(v) for i, v in enumerate(up) if v > -np.inf},
        pessimistic_estimate=True,
        value_discretization_interval=interval,
    )
    with np.errstate(over="ignore", divide="ignore"):  # dp_accounting's inner logsumexp
        if k > 1:
            pld = pld.self_compose(k)
        return float(pld.get_epsilon_for_delta(delta))


@dataclass(frozen=True)
class PBMPrivacy:
    """epsilon(delta) of one notion for ``compositions`` releases of a coordinate's secure sum."""

    notion: str
    epsilon: float
    delta: float
    compositions: int
    rdp_epsilon: float
    rdp_order: float
    worst_config: int
    dominating_pair: bool
    rdp_curve: dict[float, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["rdp_curve"] = {str(a): v for a, v in self.rdp_curve.items()}
        return d


def rdp_per_release(
    notion: str, *, b: int, beta: float, n_parties: int, orders: Sequence[float] = RDP_ORDERS
) -> np.ndarray:
    """Max over worst-case configurations (and both directions) of D_alpha, per order."""
    pairs = neighbour_pairs(notion, b, beta, n_parties)
    return np.array(
        [
            max(max(renyi_divergence(p, q, a), renyi_divergence(q, p, a)) for p, q in pairs)
            for a in orders
        ]
    )


def pbm_privacy(
    notion: str,
    *,
    b: int,
    beta: float,
    n_parties: int,
    dim: int,
    uses: int,
    delta: float,
    orders: Sequence[float] = RDP_ORDERS,
) -> PBMPrivacy:
    """Exact epsilon(delta) of ``uses`` uses of a sample with ``dim``-dimensional embeddings."""
    b, beta = check_pbm_params(b, beta)
    M = check_int("n_parties", n_parties, minimum=1)
    dim = check_int("dim", dim, minimum=1)
    uses = check_int("uses", uses, minimum=1)
    delta = check_open_unit("delta", delta)
    if notion not in NOTIONS:
        raise ConfigError(f"notion must be one of {NOTIONS}, got {notion!r}")
    k = dim * uses
    rdp = rdp_per_release(notion, b=b, beta=beta, n_parties=M, orders=orders) * k
    rdp_eps, rdp_order = compute_epsilon(list(orders), list(rdp), delta)
    pairs = neighbour_pairs(notion, b, beta, M)
    j, dominating = _dominating_index(pairs)
    # pessimistic rounding adds at most one interval per release: keep the total below 0.2% of
    # epsilon (at least 0.002 absolute), so the composed support stays small enough for the FFT
    interval = float(np.clip(max(0.002, 0.002 * rdp_eps) / k, 1e-6, 0.05))
    if dominating:
        eps = _pld_epsilon(*pairs[j], k, delta, interval)
    else:  # no single worst configuration: report the worst of the homogeneous compositions
        all_eps = [_pld_epsilon(up, down, k, delta, interval) for up, down in pairs]
        j = int(np.argmax(all_eps))
        eps = all_eps[j]
    return PBMPrivacy(
        notion=notion,
        epsilon=eps,
        delta=delta,
        compositions=k,
        rdp_epsilon=float(rdp_eps),
        rdp_order=float(rdp_order),
        worst_config=j,
        dominating_pair=dominating,
        rdp_curve={float(a): float(r) for a, r in zip(orders, rdp, strict=True)},
    )


class PBMAccountant:
    """Consumes :class:`PBMEvent` records (one per use of each sample); reports both notions.

    Each event's ``count`` is the number of uses of a sample, its ``dim`` the embedding size.
    All events must share (b, beta, n_parties, dim): PBM-VFL uses one setting per run.
    """

    name = ACCOUNTANT_NAME

    def __init__(self) -> None:
        self.events: list[PBMEvent] = []

    def compose(self, event: PBMEvent) -> PBMAccountant:
        if self.events:
            e0 = self.events[0]
            if (e0.b, e0.beta, e0.n_parties, e0.dim, e0.bound) != (
                event.b,
                event.beta,
                event.n_parties,
                event.dim,
                event.bound,
            ):
                raise ConfigError(
                    "PBM events must share b, beta, n_parties, dim and bound, got "
                    f"{(e0.b, e0.beta, e0.n_parties, e0.dim)} and "
                    f"{(event.b, event.beta, event.n_parties, event.dim)}"
                )
        self.events.append(event)
        return self

    @property
    def uses(self) -> int:
        return sum(e.count for e in self.events)

    def get_privacy(self, notion: str, delta: float) -> PBMPrivacy:
        if not self.events:
            raise ConfigError("PBMAccountant must have composed at least one event")
        e = self.events[0]
        return pbm_privacy(
            notion,
            b=e.b,
            beta=e.beta,
            n_parties=e.n_parties,
            dim=e.dim,
            uses=self.uses,
            delta=delta,
        )

    def get_epsilon(self, delta: float, notion: str = "feature") -> float:
        return self.get_privacy(notion, delta).epsilon


def rdp_to_epsilon(rdp_curve: dict[float, float], delta: float, scale: float = 1.0) -> float:
    """epsilon(delta) of an RDP curve multiplied by ``scale`` compositions (dp_accounting)."""
    orders = sorted(rdp_curve)
    eps, _ = compute_epsilon(orders, [rdp_curve[a] * scale for a in orders], delta)
    return float(eps) if math.isfinite(eps) else math.inf


def gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact delta(epsilon) of a Gaussian pair N(0,1) vs N(mu,1) (Balle & Wang 2018, Thm 8)."""
    from scipy.stats import norm

    if mu <= 0:
        return 0.0
    # e^eps * Phi(.) in log space: epsilon may be in the thousands
    second = math.exp(min(700.0, epsilon + float(norm.logcdf(-epsilon / mu - mu / 2))))
    return max(0.0, float(norm.cdf(-epsilon / mu + mu / 2)) - second)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with gaussian_delta(epsilon, mu) <= delta (bisection)."""
    delta = check_open_unit("delta", delta)
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, max(1.0, mu * mu)
    while gaussian_delta(hi, mu) > delta:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gaussian_delta(mid, mu) > delta else (lo, mid)
    return hi


def ldp_privacy(
    notion: str,
    *,
    sigma: float,
    n_parties: int,
    dim: int,
    uses: int,
    delta: float,
    bound: float = 1.0,
) -> dict[str, float]:
    """The LDP baseline: every party releases embedding + N(0, sigma^2 I), uses times.

    An L-infinity bound C lets each of the ``dim`` coordinates move by 2C, so one party's release
    has L2 sensitivity 2C sqrt(dim); a sample (all M parties) 2C sqrt(M dim). Composing Gaussians
    adds squared ratios: mu = 2C sqrt(dim * uses * (M if sample else 1)) / sigma.
    """
    if notion not in NOTIONS:
        raise ConfigError(f"notion must be one of {NOTIONS}, got {notion!r}")
    mult = n_parties if notion == "sample" else 1
    mu = 2.0 * bound * math.sqrt(dim * uses * mult) / sigma
    return {"epsilon": gaussian_epsilon(mu, delta), "delta": float(delta), "mu": mu}
