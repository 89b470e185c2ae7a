"""FM-VFL's and fm-central's shared options: the ridge (auto from the public number of training
rows), the rows' L1 bound (Lemma 1's B), and the common defaults (centred columns, the compact
encoding where a dataset has one)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from securevfl.context import Option
from securevfl.errors import ConfigError, UnknownNameError
from securevfl.privacy.centring import CENTRE_SHARE
from securevfl.privacy.fm_gaussian import MECHANISMS
from securevfl.registry import lookup

DEFAULT_DELTA = 1e-5  # the Gaussian mechanism's, when the user gives none
SMALL_N = 10_000  # below this many training rows the noisy objective needs more ridge


def parse_ridge(value: Any) -> float | str:
    """'auto' or a number >= 0 (the Option checks the range)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return float(value)


RIDGE_OPTION = Option(
    parse_ridge,
    "auto",
    "regularisation rho = ridge * sqrt(2d) * Laplace scale (Gaussian: sigma/sqrt(2)); auto: "
    f"Gaussian 1; Laplace 2 below {SMALL_N:,} training rows, else 1 (measured: breast eps 10 "
    "0.88 vs 0.85 at 1; adult eps 1 0.77 at 1 vs 0.76 at 2)",
    ge=0,
    le=1e6,
)


VFL_L1_BOUND_OPTION = Option(
    str,
    "auto",
    "L1 bound B_k of party k's row block in Lemma 1 (each party scales its rows to it): "
    "auto 2 sqrt(d_k), box d_k (the paper's; the constant column adds 1 at party 0)",
    choices=("auto", "box"),
    when=("mechanism", ("laplace",)),
)

# fm-vfl's share of ε for the released means: their noise offsets every score, a threshold
# error the ridged intercept cannot absorb (issue 25). Laplace: 0.2, chosen on breast seeds 3-7;
# Gaussian: 0.3 (breast ε 1, seeds 0-2, 4 draws each: 0.745 / 0.831 / 0.829 for 0.2 / 0.3 / 0.4;
# adult ε 1: 0.789 at 0.2, 0.778 at 0.4)
FM_CENTRE_SHARE = {"laplace": 0.2, "gaussian": 0.25}


def parse_share(value: Any) -> float | str:
    """'auto' or a share of ε in (0, 0.9]."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    x = float(value)
    if not (0 < x <= 0.9):
        raise ConfigError(f"centre_share must be auto or a number in (0, 0.9], got {value!r}")
    return x


CENTRE_SHARE_OPTION = Option(
    parse_share,
    "auto",
    "with --center and --epsilon: the share of epsilon spent on the released column means "
    f"(split over the K parties); auto: {FM_CENTRE_SHARE['gaussian']} with the Gaussian "
    f"mechanism, {FM_CENTRE_SHARE['laplace']} with Laplace (the seed's: {CENTRE_SHARE})",
)


def resolve_share(value: Any, mechanism: str) -> float:
    """The centring share of a run: ``auto`` from the mechanism."""
    value = parse_share(value)
    return FM_CENTRE_SHARE[mechanism] if value == "auto" else float(value)


def resolve_ridge(value: Any, n_train: int, mechanism: str = "laplace") -> float:
    """The ridge of a run: ``auto`` from the mechanism and the (public) number of training rows
    (Gaussian: 1, breast/phishing seeds 0-2 in the pooled simulation of issue 25: 0.79 at ε 1
    against 0.67 with 2, equal at ε 8)."""
    value = parse_ridge(value)
    if value == "auto":
        if mechanism == "gaussian":
            return 1.0
        return 2.0 if n_train < SMALL_N else 1.0
    return float(value)


MECHANISM_OPTION = Option(
    str,
    "gaussian",
    "noise on the objective's coefficients: gaussian (L2-bounded rows, (epsilon, delta)-DP, "
    "about 8x less noise on breast) or laplace (Lemma 1's L1 bound, pure epsilon-DP, the paper's)",
    choices=MECHANISMS,
)
L2_BOUND_OPTION = Option(
    float,
    1.0,
    "with --mechanism gaussian: each party scales its row block to this L2 norm (the constant "
    "column adds 1 at the label party); the noise is sized for it",
    gt=0,
    le=1e3,
    when=("mechanism", ("gaussian",)),
)


def fm_common_defaults(given: dict[str, Any]) -> dict[str, Any]:
    """Centred columns; δ = 1e-5 for the Gaussian mechanism; the compact encoding where the
    dataset defines one (smaller d)."""
    out: dict[str, Any] = {"center": True}
    if str(given.get("mechanism", "gaussian")) == "gaussian":
        out["delta"] = DEFAULT_DELTA
    try:
        entry = lookup("dataset", str(given.get("dataset", "breast")))
    except UnknownNameError:  # a csv: file, or an unknown name (reported when the data loads)
        return out
    if "compact" in getattr(entry, "encodings", ()):
        out["encoding"] = "compact"
    return out


def parse_l1_bound(value: Any) -> float | str:
    """'auto', 'box' or a number > 0."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "box"):
        return value.strip().lower()
    x = float(value)
    if not (0 < x <= 1e6):  # B² enters the sensitivity: beyond 1e6 it overflows
        raise ConfigError(f"l1_bound must be auto, box or a number in (0, 1e6], got {value!r}")
    return x


def resolve_l1_bound(value: float | str, d_features: int, intercept: bool) -> float:
    """A row block's L1 bound B (intercept included): auto 2 sqrt(d), box d (fm-central's
    module docstring says why)."""
    c0 = 1.0 if intercept else 0.0
    if value == "box":
        return c0 + d_features
    if value == "auto":
        return c0 + min(float(d_features), 2.0 * math.sqrt(d_features))
    if float(value) <= c0:
        raise ConfigError(f"l1_bound must exceed the intercept's 1, got {value}")
    return float(value)


def clip_l1(X: np.ndarray, bound: float) -> np.ndarray:
    """Each row scaled down (if needed) so its L1 norm is at most ``bound``."""
    norms = np.abs(X).sum(axis=1, keepdims=True)
    return X * np.minimum(1.0, bound / np.maximum(norms, 1e-300))
