"""Centring under a budget: each party's column means released by the Laplace mechanism.

Centring a column on its training mean moves every row when one row changes: the DP analyses
of the methods assume a row's released value depends on that row alone. In a run with an ε the
mean is therefore released (to the party itself; treating it as released is conservative): each
party adds Laplace noise to the means of its numeric columns, whose values lie in [-1, 1] after
public-domain scaling, so replacing one row moves the vector of d means by at most 2d/n in L1.
Given the released mean m~, the scale 1 + |m~| is public and maps [-1, 1] into [-1, 1], so the
rest is row-wise. The release is pure ε_c-DP per party; with a method's (ε_m, δ)-DP it composes
to (ε_m + ε_c, δ) (basic composition, adaptive) for the unit party-row (one party's row: that
party's release only) and (ε_m + K·ε_c, δ) for the unit sample (a row in every party's block).
ε_c is the method's share of the run's ε (``CENTRE_SHARE`` unless the method says otherwise:
fm-vfl's ``--centre-share``) for a party-row method and that share over K for a sample method,
so the releases cost the share in the method's unit; the method is run at ε minus it and the
record adds the releases back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from securevfl.errors import ConfigError

CENTRE_SHARE = 0.1  # of the run's ε, for the released means (a public choice, docs say why)


def centring_epsilon(
    epsilon: float, *, unit: str, parties: int, share: float = CENTRE_SHARE
) -> float:
    """ε_c of each party's mean release in a run at ``epsilon`` whose ε is in ``unit``: the
    share of ε for party-row (one party's release touches the row), split over the K parties
    for sample (a row is in every party's block). ``share``: the method's
    (``Method.centre_share``)."""
    return share * float(epsilon) / (parties if unit == "sample" else 1)


def cost(eps_party: float, *, unit: str, parties: int) -> float:
    """What the K releases at ``eps_party`` each cost in ``unit`` (basic composition)."""
    return eps_party * (parties if unit == "sample" else 1)


def reserve(epsilon: float, share: float = CENTRE_SHARE) -> float:
    """The part of ε the centring releases take in the method's own unit."""
    return share * float(epsilon)


def laplace_scale(*, n: int, d: int, epsilon: float) -> float:
    """Laplace scale b of the mean of d columns in [-1, 1] over n rows at ``epsilon``
    (replace-one L1 sensitivity 2d/n)."""
    if n < 1 or d < 0 or not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"centring needs n >= 1 and epsilon > 0, got n={n}, epsilon={epsilon}")
    return 2.0 * d / (n * epsilon)


def released_means(X: np.ndarray, *, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The columns' means plus Laplace(2d/(nε)) each, clipped to [-1, 1] (post-processing)."""
    return noisy_means(X.mean(axis=0), rows=X.shape[0], epsilon=epsilon, rng=rng)


def noisy_means(
    mean: np.ndarray, *, rows: int, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """:func:`released_means` from the exact means of ``rows`` rows (a table summed block by
    block on a party's engine releases the same values)."""
    d = len(mean)
    b = laplace_scale(n=rows, d=d, epsilon=epsilon)
    noisy = mean + rng.laplace(0.0, b, size=d) if d else np.zeros(0)
    return np.clip(noisy, -1.0, 1.0)


def centre(X: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(X - m) / (1 + |m|): public given m, maps [-1, 1] into [-1, 1] row by row."""
    return np.clip((X - mean) / (1.0 + np.abs(mean)), -1.0, 1.0)


def compose_into(
    privacy: dict[str, Any],
    *,
    epsilon: float,
    unit: str,
    parties: int,
    share: float = CENTRE_SHARE,
) -> dict[str, Any]:
    """The record's ``privacy`` with the centring releases added (headline, per party, units);
    ``unit``: the unit the releases were sized for (the method's); ``share``: of ε, as run."""
    out = dict(privacy)
    eps_c = centring_epsilon(epsilon, unit=unit, parties=parties, share=share)
    if out.get("epsilon") is not None:
        out["epsilon"] = float(out["epsilon"]) + cost(
            eps_c, unit=str(out.get("unit")), parties=parties
        )
    out["per_party"] = {
        k: {**v, "epsilon": v["epsilon"] + eps_c}
        if isinstance(v, dict) and isinstance(v.get("epsilon"), (int, float))
        else v
        for k, v in (out.get("per_party") or {}).items()
    }
    # the releases list names the centring releases too, so composing it reproduces the ε:
    # one pure ε_c release per party (its own line), and the K of them for the sample unit
    lines = list(out.get("releases") or [])
    for k in out["per_party"]:
        lines.append({"party": int(k), "count": 1, "mechanism": "pure", "epsilon": eps_c})
    # the sample unit (the headline's, or a by_unit entry) holds a row in every block: the K
    if out.get("unit") == "sample" or "sample" in (out.get("by_unit") or {}):
        lines.append({"party": None, "count": parties, "mechanism": "pure", "epsilon": eps_c})
    if "releases" in out:
        out["releases"] = lines
    out["per_party"] = {
        k: {**v, "releases": v["releases"] + 1}
        if isinstance(v, dict) and isinstance(v.get("releases"), int)
        else v
        for k, v in out["per_party"].items()
    }
    units = out.get("by_unit")
    if isinstance(units, dict):
        out["by_unit"] = {
            u: v + cost(eps_c, unit=u, parties=parties) if isinstance(v, (int, float)) else v
            for u, v in units.items()
        }
    out["target_epsilon"] = float(epsilon)
    out["centring"] = {
        "mechanism": "laplace",
        "epsilon_per_party": eps_c,
        "share": share,
        "composition": "basic (pure ε_c added to the method's ε at the same δ)",
    }
    return out
