"""report.html's five sections, by capability (issue 28): which method at which ε (the decision,
first), utility, privacy (claims, ceilings, audits), cost (time, bytes, memory) and attacks. Each
has one kind of plot and a one-sentence reading computed from the records.

The privacy section is a list of sub-renderers, :data:`PRIVACY_RENDERERS`: each takes the run
records and returns HTML parts (``[]``: nothing to say). An audit section joins it by appending
its own renderer (``PRIVACY_RENDERERS.append(render_audits)``) in its module."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.capability_plots import attack_plot, claims, epsilon_claims_plot
from bench.choice_tables import cost_rows, summary_rows
from bench.floors import floors, gain_text, verdicts
from bench.md_html import table_html
from bench.method_choice import ACCURACY_SLACK, Setting, fmt_bytes, settings
from bench.pareto_plots import Plot, accuracy_vs_cost, accuracy_vs_epsilon, pick_epsilon

Records = list[dict[str, Any]]


def figure(plot: Plot) -> str:
    title, caption, png = plot
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(title)}" src="{uri}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def escaped_table(header: list[str], rows: list[list[str]], css_class: str = "") -> str:
    esc = [[html.escape(c) for c in r] for r in rows]
    out = table_html([html.escape(h) for h in header], esc, Path("."), raw=True)
    return out.replace("<table>", f'<table class="{css_class}">') if css_class else out


def reading(text: str) -> str:
    """A section's one-sentence reading of its plot."""
    return f'<p class="reading"><strong>Reading:</strong> {html.escape(text)}</p>'


def _good(ss: list[Setting]) -> list[Setting]:
    return [s for s in ss if not math.isnan(s.score)]


# ------------------------------------------------------------------ which method at which ε


def decision_section(records: Records) -> list[str]:
    header, rows = summary_rows(records)
    if not rows:
        return ["<p>No run with a metric: nothing to choose from.</p>"]
    parts = [
        f"<p>Per dataset and ε: the most accurate method, and the fastest and the most frugal "
        f"one whose mean is within {ACCURACY_SLACK * 100:g} point of it (1 % of the error for "
        "regression). ε is the budget each run asked for; a row holds one privacy unit only "
        "(<code>sample</code>: a whole row and its label; <code>party-row</code>: one party's "
        "part of a row), because equal numbers in different units are different guarantees. "
        "Methods with another kind of guarantee (HE: encrypted, no noise; heuristic: a claimed "
        "figure that is not a DP ε; none) are compared among themselves, their kind named in "
        "brackets. Means ± std over seeds; time: training time; bytes: all parties' sends. ⚠ marks "
        "a setting whose runs warned (e.g. a constant predictor: the class prior, not a model); "
        "✗ one at or below the majority class; ↓ one below the label holder alone. Only runs "
        "at a stated ε are chosen from (a DP run that asked for none is in the cost table only)."
        "</p>"
    ]
    fl = floors(settings(records))
    found = verdicts(records)
    for ds in dict.fromkeys(r[0] for r in rows):  # one small table per dataset, in order
        parts.append(f'<h3 class="dataset">{html.escape(ds)}</h3>')
        parts.append(f'<p class="floors">{html.escape(fl[ds].lines(ds))}</p>')
        parts += [
            f'<p class="verdict">{html.escape(v)}</p>' for v in found if v.startswith(f"{ds}, ")
        ]
        parts.append(escaped_table(header[1:], [r[1:] for r in rows if r[0] == ds], "choice"))
    ss = settings(records)
    eps = pick_epsilon(ss)
    at = "" if eps is None else f" (DP methods at ε = {eps:g})"
    parts.append(f"<h3>Accuracy against training time{at}</h3>")
    parts += [figure(p) for p in accuracy_vs_cost(ss, "time")]
    parts.append(
        reading(
            "The line joins the settings no other beats on both accuracy and training time; "
            "the choices in the tables above lie on or next to it."
        )
    )
    return parts


# ------------------------------------------------------------------------------- utility


def utility_reading(ss: list[Setting]) -> str:
    """Per dataset and unit, at the smallest and largest ε asked, the most accurate DP method
    that is not a constant predictor, each held against the label holder's floor (never
    against the other ε: the methods may differ)."""
    fl = floors(ss)
    said = []
    for ds in sorted({s.dataset for s in ss}):
        dp = [s for s in _good(ss) if s.dataset == ds and s.unit and s.epsilon is not None]
        alone = fl[ds].alone if ds in fl else None
        for unit in sorted({s.unit for s in dp}):
            at = [s for s in dp if s.unit == unit and not s.constant]
            if not at:
                said.append(f"on {ds} ({unit}) every DP run is a constant predictor")
                continue
            parts = []
            for e in sorted({min(s.epsilon for s in at), max(s.epsilon for s in at)}):
                pick = _better_of([s for s in at if s.epsilon == e])
                gain = "" if alone is None else gain_text(pick, alone)
                versus = f", {gain} vs the label holder" if gain else ""
                parts.append(f"at ε = {e:g} {pick.label} {pick.score:.3f}{versus}")
            floor = "" if alone is None else f" (label holder alone: {alone.score:.3f})"
            said.append(f"on {ds} ({unit}) " + "; ".join(parts) + floor)
    if not said:
        return "No DP run asked for an ε: the plots show the other kinds only."
    text = "; ".join(said)
    return text[0].upper() + text[1:] + "."


def _better_of(ss: list[Setting]) -> Setting:
    return (
        min(ss, key=lambda s: s.score) if ss[0].metric == "mse" else max(ss, key=lambda s: s.score)
    )


def utility_section(records: Records) -> list[str]:
    ss = settings(records)
    plots = accuracy_vs_epsilon(ss)
    parts = ["<p>The main metric against the ε each DP run asked for, one plot per dataset and "
             "privacy unit; other kinds and the two floors as horizontal lines.</p>"]  # fmt: skip
    parts += [figure(p) for p in plots] or ["<p>No DP run: no ε axis to draw.</p>"]
    return parts + [reading(utility_reading(ss))]


# ------------------------------------------------------------------------------- privacy


def claims_table(records: Records) -> list[str]:
    """Each DP setting's asked and reported ε, its unit, δ and accountant."""
    ss = claims(settings(records))
    if not ss:
        return ["<p>No DP setting asked for an ε: no claim to show.</p>"]
    rows = []
    for s in ss:
        priv = s.records[0].get("privacy") or {}
        rows.append(
            [
                s.dataset,
                s.label,
                s.unit or "",
                f"{s.epsilon:g}",
                f"{s.reported_epsilon:.4g}",
                f"{priv.get('delta', '—')}",
                str(priv.get("accountant", "?")),
            ]
        )
    header = ["dataset", "method", "unit", "ε asked", "ε reported", "δ", "accountant"]
    parts = ["<h3>Claims</h3>", escaped_table(header, rows)]
    plot = epsilon_claims_plot(settings(records))
    if plot is not None:
        parts.append(figure(plot))
    over = [s for s in ss if s.reported_epsilon > s.epsilon * (1 + 1e-6)]
    text = (
        f"{len(ss) - len(over)} of {len(ss)} DP settings report an ε at or below the ε they "
        "asked for"
        + (f"; above it: {', '.join(sorted({s.label for s in over}))}." if over else ".")
    )
    return parts + [reading(text)]


def ceilings_table(records: Records) -> list[str]:
    """The accuracy ceilings runs recorded: a proof (no classifier of the released rows does
    better) or, for secureboost-dp, its twin with the noise removed (secureboost, same settings)."""
    from bench.reports.secureboost import noise_removed_ceiling  # noqa: PLC0415

    rows = []
    for s in settings(records):
        if s.epsilon is None:
            continue
        vals = [(r.get("extra") or {}).get("accuracy_ceiling") for r in s.records]
        vals = [v for v in vals if v is not None]
        if vals:
            ceiling, kind = sum(vals) / len(vals), "proof"
        elif (twin := noise_removed_ceiling(s.records, records)) is not None:
            ceiling, kind = twin, "noise removed (secureboost, same settings)"
        else:
            continue
        rows.append(
            [s.dataset, s.label, f"{s.epsilon:g}", f"{ceiling:.3f}", kind, f"{s.score:.3f}"]
        )
    if not rows:
        return []
    header = ["dataset", "method", "ε asked", "accuracy ceiling", "kind", "accuracy reached"]
    return [
        "<h3>Ceilings</h3>",
        "<p>What the released values allow at best (<code>securevfl/privacy/ceiling.py</code>, "
        "a proof: no classifier of a test row's releases can be more accurate) or, where no "
        "such proof applies, the same method with its noise removed.</p>",
        escaped_table(header, rows),
    ]


PRIVACY_RENDERERS: list[Callable[[Records], list[str]]] = [claims_table, ceilings_table]


def _num(x: Any) -> str:
    return "–" if x is None else f"{float(x):.3g}"


def audits_table(records: Records) -> list[str]:
    """The privacy audits of this suite (``securevfl audit``, docs/audit.md): each claimed ε
    beside its empirical lower bound and the under-noised variants' bounds."""
    from bench.reports.audit import DIVISORS, rows  # noqa: PLC0415

    audits = rows(records)
    if not audits:
        return [
            "<p>No audit in this suite: <code>securevfl audit METHOD ...</code> or "
            "<code>securevfl bench --suite audit</code> measures a lower bound on each ε.</p>"
        ]
    header = ["dataset", "method", "view", "claimed ε", "lower bound (95%)"]
    header += [f"noise ÷{d:g}" for d in DIVISORS] + ["largest detectable ε"]
    body = []
    for r in audits:
        by = {float(v["noise_divisor"]): v for v in r.get("variants", [])}
        cells = [
            f"{by[d]['epsilon_lower_bound']:.2f}" + (" caught" if by[d]["violation"] else "")
            if d in by
            else "–"
            for d in DIVISORS
        ]
        power = r.get("largest_detectable_epsilon")
        body.append(
            [
                str(r["dataset"]),
                str(r["method"]),
                str(r["audit"]),
                _num(r.get("claimed_epsilon")),
                _num(r.get("epsilon_lower_bound")),
                *cells,
                _num(power),
            ]
        )
    return ["<h3>Audits</h3>", escaped_table(header, body)]


def privacy_section(records: Records) -> list[str]:
    records, everything = [r for r in records if "attack" not in r and "audit" not in r], records
    parts = [
        "<p>What each run claims (ε from the method's accountant, for every release the code "
        "makes), what those releases allow at best, and how the claims were checked.</p>"
    ]
    for render in PRIVACY_RENDERERS:
        parts += render(records)
    return parts + audits_table(everything)


# ---------------------------------------------------------------------------------- cost


def cost_reading(ss: list[Setting]) -> str:
    good = [s for s in _good(ss) if not math.isnan(s.train_s)]
    if not good:
        return "No run finished: nothing to compare."
    fast, slow = min(good, key=lambda s: s.train_s), max(good, key=lambda s: s.train_s)
    sent = [s for s in good if s.bytes_total > 0]
    text = (
        f"Training took {fast.train_s:.3g} s ({fast.label}) to {slow.train_s:.3g} s ({slow.label})"
    )
    if sent:
        lo, hi = min(sent, key=lambda s: s.bytes_total), max(sent, key=lambda s: s.bytes_total)
        text += (
            f"; the parties sent {fmt_bytes(lo.bytes_total)} ({lo.label}) to "
            f"{fmt_bytes(hi.bytes_total)} ({hi.label})"
        )
    return text + "."


def cost_section(records: Records) -> list[str]:
    header, rows = cost_rows(records)
    ss = settings(records)
    eps = pick_epsilon(ss)
    at = "" if eps is None else f" (DP methods at ε = {eps:g})"
    return [
        "<p>Every setting: training wall time and CPU time (the whole run, every party), bytes "
        "sent by all parties (serialized payloads counted at the channel), and the largest "
        "party's peak resident memory where each party ran in its own process (in-process runs "
        "share one process, whose peak is not a party's).</p>",
        escaped_table(header, rows),
        f"<h3>Accuracy against bytes sent{at}</h3>",
        *[figure(p) for p in accuracy_vs_cost(ss, "bytes")],
        reading(cost_reading(ss)),
    ]


# ------------------------------------------------------------------------------- attacks


def attacks_section(records: Records) -> list[str]:
    attacks = [r for r in records if "attack" in r]
    if not attacks:
        return [
            "<p>This suite ran no attack. <code>securevfl bench --suite attacks</code> runs "
            "label inference, feature inversion and membership attacks on what one party saw, "
            "across methods and ε (docs/attacks.md); their records land here.</p>"
        ]
    from bench.reports.attacks import attack_performance  # noqa: PLC0415  (matplotlib figures)

    plot = attack_plot(attacks, attack_performance)
    best = max(attacks, key=attack_performance)
    eps = best.get("target_epsilon")
    text = (
        f"The strongest result is {best['attack']} on {best['method']}"
        + ("" if eps is None else f" at ε = {eps:g}")
        + f": performance {attack_performance(best):.2f} of a perfect attack's 1."
    )
    return [figure(plot), reading(text)] if plot else [reading(text)]


SECTIONS: list[tuple[str, str, Callable[[Records], list[str]]]] = [
    ("choice", "Which method at which ε", decision_section),
    ("utility", "Utility", utility_section),
    ("privacy", "Privacy: claims, ceilings, audits", privacy_section),
    ("cost", "Cost: time, bytes, memory", cost_section),
    ("attacks", "Attacks", attacks_section),
]
