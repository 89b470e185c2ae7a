"""The two report.html plots the Pareto plots do not draw: each DP setting's reported ε against
the ε it asked for (the privacy claim), and each attack's performance per method (the attacks).
Both return (title, caption, png bytes) triples like :mod:`bench.pareto_plots`."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.method_choice import Setting  # noqa: E402
from bench.pareto_plots import Plot, _png  # noqa: E402


def claims(settings: list[Setting]) -> list[Setting]:
    """The DP settings that asked for an ε and report one (the claims a reader can check)."""
    return [
        s
        for s in settings
        if s.unit is not None and s.epsilon is not None and math.isfinite(s.reported_epsilon)
    ]


def epsilon_claims_plot(settings: list[Setting]) -> Plot | None:
    """Reported ε against asked ε, one marker per privacy unit, the diagonal drawn."""
    pts = claims(settings)
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, unit in enumerate(sorted({s.unit for s in pts})):
        xs = [s.epsilon for s in pts if s.unit == unit]
        ys = [s.reported_epsilon for s in pts if s.unit == unit]
        ax.scatter(xs, ys, marker="os^D"[i % 4], label=f"unit '{unit}'", alpha=0.8)
    lo = min(min(s.epsilon, s.reported_epsilon) for s in pts)
    hi = max(max(s.epsilon, s.reported_epsilon) for s in pts)
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="reported = asked")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε asked for (the run's --epsilon)")
    ax.set_ylabel("ε the accountant reported (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside the axes
    return (
        "Privacy claims: reported ε against asked ε",
        "Each point is a DP setting (dataset, method, variant, ε); on or below the diagonal the "
        "accountant's ε for everything the run released is within what was asked.",
        _png(fig),
    )


def attack_plot(records: list[dict[str, Any]], performance) -> Plot | None:
    """Mean attack performance (0: no advantage, 1: perfect) per attack and method/ε."""
    attacks = [r for r in records if "attack" in r]
    if not attacks:
        return None
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in attacks:
        eps = r.get("target_epsilon")  # the ε the attacked run asked for (None: not private)
        label = r.get("method", "?") + ("" if eps is None else f" ε={eps:g}")
        by[r["attack"]][label].append(performance(r))
    rows = [
        (a, m, float(np.mean(v))) for a, ms in sorted(by.items()) for m, v in sorted(ms.items())
    ]
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.4))
    names = [f"{a}: {m}" for a, m, _ in rows]
    ax.barh(names, [v for *_, v in rows], color=[f"C{sorted(by).index(a) % 10}" for a, *_ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("attack performance (0: no better than chance, 1: perfect; mean over seeds)")
    ax.grid(axis="x", alpha=0.3)
    return (
        "Attacks: performance per attack and method",
        "Label inference: 2(AUC − 0.5); membership and model completion: accuracy above chance; "
        "inversion: 1 − MSE / MSE of the mean.",
        _png(fig),
    )
