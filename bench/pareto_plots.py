"""The report's Pareto plots, as PNG bytes: accuracy against ε (one axis per privacy unit) and
accuracy against training time and bytes at one ε, with the other kinds as reference points.

Each function returns (title, caption, png bytes) triples; the HTML page inlines them, so the
plots need no files beside the page.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402

from bench.method_choice import Setting, fmt_bytes  # noqa: E402

Plot = tuple[str, str, bytes]
KIND_MARKERS = {"DP": "o", "DP+MPC": "D", "HE": "s", "MPC": "P", "heuristic (no DP ε)": "^"}
COSTS = {  # name -> (axis label, value of a setting)
    "time": ("training time (log scale; mean over seeds)", lambda s: s.train_s),
    "bytes": ("bytes sent, all parties (log scale; mean over seeds)", lambda s: s.bytes_total),
}


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")  # legends sit outside the axes
    plt.close(fig)
    return buf.getvalue()


def _good(s: Setting) -> bool:
    return not math.isnan(s.score)


def references(group: list[Setting]) -> list[Setting]:
    """The most accurate setting of each non-DP kind (one line each, so the plot stays legible);
    for the label holder alone, its floor (``floors``: chosen on training rows where it can)."""
    best: dict[tuple[str, bool], Setting] = {}
    for s in group:
        key = (s.kind, s.pooled)
        if s.unit is None and _good(s) and (key not in best or _ahead(s, best[key])):
            best[key] = s
    floor = _floor(group)
    return [floor if best[k].holder_alone and floor else best[k] for k in sorted(best)]


def _floor(group: list[Setting]) -> Setting | None:
    """The label holder's floor among one dataset's settings (``bench.floors``)."""
    from bench.floors import floors  # noqa: PLC0415  (floors imports method_choice, as we do)

    fl = floors(group)
    return next(iter(fl.values())).alone if len(fl) == 1 else None


def _ahead(a: Setting, b: Setting) -> bool:
    return a.score < b.score if a.metric == "mse" else a.score > b.score


def accuracy_vs_epsilon(settings: list[Setting]) -> list[Plot]:
    """Per dataset and unit: each DP method's metric against its reported ε (log axis)."""
    plots = []
    for ds in sorted({s.dataset for s in settings}):
        group = [s for s in settings if s.dataset == ds]
        for unit in sorted({s.unit for s in group if s.unit is not None}):
            plots.append(_eps_plot(ds, unit, group))
    return plots


def _eps_plot(ds: str, unit: str, group: list[Setting]) -> Plot:
    metric = group[0].metric
    lines: dict[str, list[Setting]] = defaultdict(list)
    for s in group:
        if s.unit == unit and _good(s):
            lines[s.tag].append(s)
    fig, ax = plt.subplots(figsize=(12, 5))
    for i, (tag, ss) in enumerate(sorted(lines.items())):
        ss.sort(key=lambda s: s.reported_epsilon)
        ax.errorbar(
            [s.reported_epsilon for s in ss],
            [s.score for s in ss],
            yerr=[s.score_std for s in ss],
            marker=KIND_MARKERS.get(ss[0].kind, "o"),
            capsize=3,
            color=f"C{i % 10}",
            label=tag,
        )
    refs = references(group)
    for ref in refs:
        alone = ref.holder_alone
        ax.axhline(ref.score, linestyle="--", color="saddlebrown" if alone else "0.55",
                   lw=1.6 if alone else 1)  # fmt: skip
    levels = [(ref.score, f"{_ref_name(ref)}: {ref.score:.3f}") for ref in refs]
    majority = _majority(group)
    if majority is not None:
        ax.axhline(majority, linestyle=":", color="k", lw=1.4)
        levels.append((majority, f"majority class: {majority:.3f}"))
    ax.set_xscale("log")
    _label_levels(ax, levels)
    grid = sorted({s.epsilon for ss in lines.values() for s in ss if s.epsilon is not None})
    shown = [s.reported_epsilon for ss in lines.values() for s in ss]
    if grid and shown and grid[0] / 1.5 <= min(shown) and max(shown) <= grid[-1] * 1.5:
        ax.xaxis.set_major_locator(FixedLocator(grid))  # the asked-for grid, where it spans all
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.5, not 5 x 10^-1
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"ε reported by the accountant, unit '{unit}'")
    ax.set_ylabel(f"test {metric}")
    ax.set_title(f"{ds}: {metric} vs ε ({unit} unit)")
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    caption = (
        f"Mean ± std over seeds. Dashed grey, named at the right: the most accurate method of "
        f"each other kind (no ε in the '{unit}' unit: reference levels, not points on this axis); "
        "dashed brown: the label holder alone (no collaboration); dotted black: the majority "
        "class. A DP method below the brown line loses to not collaborating at that ε."
    )
    return (f"{ds}: {metric} vs ε, unit {unit}", caption, _png(fig))


def _ref_name(ref: Setting) -> str:
    return f"label holder alone: {ref.label}" if ref.holder_alone else ref.tag


def _majority(group: list[Setting]) -> float | None:
    """The majority-class rate of the group's runs (accuracy only; None when unrecorded)."""
    vals = [s.majority for s in group if not math.isnan(s.majority)]
    if not vals or group[0].metric != "accuracy":
        return None
    return sum(vals) / len(vals)


def _label_levels(ax: plt.Axes, levels: list[tuple[float, str]]) -> None:
    """Name each reference line at the right edge, nudging names apart so none overlap."""
    lo, hi = ax.get_ylim()
    points_per_unit = ax.bbox.height * 72 / ax.figure.dpi / (hi - lo)
    gap = 11 / points_per_unit  # one 8-pt line of text, in data units
    placed: list[float] = []
    for y, text in sorted(levels, reverse=True):
        at = min([y] + [p - gap for p in placed])
        placed.append(at)
        ax.annotate(
            text, xy=(1.0, y), xycoords=("axes fraction", "data"), va="center",
            xytext=(4, (at - y) * points_per_unit), textcoords="offset points",
            fontsize=8, color="0.3", annotation_clip=False,
        )  # fmt: skip


def pick_epsilon(settings: list[Setting]) -> float | None:
    """The ε of the cost plots: 1 when the grid has it, else the grid's median."""
    grid = sorted({s.epsilon for s in settings if s.epsilon is not None})
    if not grid:
        return None
    return 1.0 if 1.0 in grid else grid[len(grid) // 2]


def accuracy_vs_cost(settings: list[Setting], cost: str) -> list[Plot]:
    """Per dataset: metric against ``cost`` ('time' or 'bytes') for the DP settings at one ε
    and every setting of another kind, with the Pareto frontier over all of them."""
    eps = pick_epsilon(settings)
    plots = []
    for ds in sorted({s.dataset for s in settings}):
        group = [
            s
            for s in settings
            if s.dataset == ds and _good(s) and (s.unit is None or s.epsilon == eps)
        ]
        if group:
            plots.append(_cost_plot(ds, group, cost, eps))
    return plots


def _plain_log_ticks(ax: plt.Axes, fmt) -> None:
    """Log-axis ticks as '10 kB' / '0.1 s' rather than powers of ten; 2s and 5s too when the
    axis spans less than two decades (else they crowd)."""
    lo, hi = ax.get_xlim()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    if hi / max(lo, 1e-12) < 100:  # label the 2s and 5s between powers of ten
        ax.xaxis.set_minor_formatter(
            FuncFormatter(lambda v, _: fmt(v) if _lead(v) in (2, 5) else "")
        )
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())


def _lead(v: float) -> int:
    """The leading digit of a positive number (2 for 0.2, 250 and 2e6)."""
    return int(round(v / 10 ** math.floor(math.log10(v)))) if v > 0 else 0


def frontier(points: list[tuple[float, float]], higher_is_better: bool) -> list[tuple]:
    """The points no other point beats on both cost (lower) and score."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if not out or (y > out[-1][1] if higher_is_better else y < out[-1][1]):
            out.append((x, y))
    return out


def _cost_plot(ds: str, group: list[Setting], cost: str, eps: float | None) -> Plot:
    axis, value = COSTS[cost]
    metric = group[0].metric
    # one numbering for the time and the bytes plot: every setting of the group is numbered
    # before those with nothing to show on a log axis (sending nothing) are left out
    ordered = sorted(group, key=lambda s: (s.unit is None, s.kind, s.label))
    numbered = list(enumerate(ordered, start=1))
    shown = [(i, s) for i, s in numbered if value(s) > 0]
    left_out = [f"{i}: {s.label}" for i, s in numbered if value(s) <= 0]
    fig, ax = plt.subplots(figsize=(12, 5.2))
    for i, s in shown:
        where = f"ε = {s.epsilon:g} {s.unit}" if s.unit else "no ε"
        color = f"C{(i - 1) % 10}"
        ax.errorbar(
            [value(s)], [s.score], yerr=[s.score_std], linestyle="none",
            marker=KIND_MARKERS.get(s.kind, "x" if s.kind == "none" else "v"),
            markersize=7, capsize=2, color=color,
            label=f"{i}: {s.label} [{s.kind}{', pooled' if s.pooled else ''}; {where}]",
        )  # fmt: skip
        # the number beside each point ties it to its legend entry (colours repeat after 10)
        ax.annotate(str(i), (value(s), s.score), xytext=(5, 4), textcoords="offset points",
                    fontsize=8, color=color)  # fmt: skip
    # the frontier of what a VFL user can choose: pooled-data baselines are references only
    front = frontier([(value(s), s.score) for _, s in shown if not s.pooled], metric != "mse")
    if len(front) > 1:
        ax.step(*zip(*front), where="post", color="0.6", lw=1, zorder=0, label="Pareto frontier")
    best = _floor(group)
    if best is not None:
        ax.axhline(best.score, color="saddlebrown", ls="--", lw=1.4,
                   label=f"label holder alone: {best.label} {best.score:.3f}")  # fmt: skip
    majority = _majority(group)
    if majority is not None:
        ax.axhline(majority, color="k", ls=":", lw=1.4, label=f"majority class {majority:.3f}")
    ax.set_xscale("log")
    _plain_log_ticks(ax, fmt_bytes if cost == "bytes" else (lambda v: f"{v:g} s"))
    ax.set_xlabel(axis)
    ax.set_ylabel(f"test {metric}")
    what = "training time" if cost == "time" else "bytes sent"
    at = "no DP method" if eps is None else f"DP methods at ε = {eps:g}"
    ax.set_title(f"{ds}: {metric} vs {what} ({at}; other kinds: no ε)")
    ax.grid(alpha=0.3)
    ax.grid(which="minor", alpha=0.08)
    ax.legend(fontsize=8.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
    caption = (
        "Markers: ○ DP, ◇ DP+MPC, □ HE, △ heuristic claim, × none, ▽ nothing shared; the ε "
        "of DP methods is in "
        "the unit named in the legend (different units are different guarantees). Grey steps: "
        "the Pareto frontier (nothing is both cheaper and more accurate). Dashed brown: the "
        "label holder alone; dotted black: the majority class. Point numbers are the same in "
        "the time and the bytes plot."
    )
    if left_out:
        caption += f" Sending nothing, left off the log axis: {', '.join(left_out)}."
    return (f"{ds}: {metric} vs {what} ({at})", caption, _png(fig))
