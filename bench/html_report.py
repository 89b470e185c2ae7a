"""report.html: one self-contained page (CSS and plots inlined, nothing fetched) beside report.md.

It opens on "which method should I use" (bench.method_choice), then the Pareto plots
(bench.pareto_plots), the cost of every setting, and report.md's own sections rendered to HTML.
"""

from __future__ import annotations

import base64
import html
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.floors import floors, verdicts
from bench.md_html import markdown_to_html, table_html
from bench.method_choice import ACCURACY_SLACK, cost_rows, settings, summary_rows
from bench.pareto_plots import Plot, accuracy_vs_cost, accuracy_vs_epsilon, pick_epsilon

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330;
       margin: 0 auto; padding: 1.2em 2em 4em; max-width: 1500px; background: #fff; }
h1 { font-size: 1.7em; margin-bottom: .2em; }
h2 { font-size: 1.35em; border-bottom: 2px solid #d8dee9; padding-bottom: .2em; margin-top: 2em; }
h3 { font-size: 1.12em; margin-top: 1.6em; }
.meta, figcaption, .note { color: #5a6272; font-size: .9em; }
nav { background: #f3f5f9; border-radius: 6px; padding: .5em 1em; margin: 1em 0; }
nav a { margin-right: 1.4em; text-decoration: none; color: #24509a; }
.table-wrap { overflow: auto; max-height: 38em; margin: .6em 0 1.2em; border: 1px solid #d8dee9;
              border-radius: 4px; }
table { border-collapse: collapse; font-size: .84em; width: 100%; }
th, td { padding: .3em .6em; border-bottom: 1px solid #e6e9ef; text-align: left;
         vertical-align: top; }
th { position: sticky; top: 0; background: #eef1f6; z-index: 1; }
tbody tr:nth-child(even) { background: #fafbfd; }
table.choice td:nth-child(2) { font-weight: 600; }
.table-wrap:has(table.choice) { max-height: none; }
figure { margin: 1em 0 1.8em; }
figure img { max-width: 100%; height: auto; border: 1px solid #e6e9ef; }
code { background: #f1f3f6; padding: 0 .25em; border-radius: 3px; font-size: .92em; }
details > summary { cursor: pointer; font-weight: 600; font-size: 1.12em; margin: 1em 0 .4em; }
.missing { color: #a33; }
.verdict { color: #8a2b0a; font-weight: 600; }
"""


def _figure(plot: Plot) -> str:
    title, caption, png = plot
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(title)}" src="{uri}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _escaped_table(header: list[str], rows: list[list[str]], css_class: str = "") -> str:
    esc = [[html.escape(c) for c in r] for r in rows]
    out = table_html([html.escape(h) for h in header], esc, Path("."), raw=True)
    return out.replace("<table>", f'<table class="{css_class}">') if css_class else out


def summary_section(records: list[dict[str, Any]]) -> list[str]:
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
        parts.append(_escaped_table(header[1:], [r[1:] for r in rows if r[0] == ds], "choice"))
    return parts


def plots_section(records: list[dict[str, Any]]) -> list[str]:
    ss = settings(records)
    eps = pick_epsilon(ss)
    parts = ["<h3>Accuracy against ε, one plot per privacy unit</h3>"]
    parts += [_figure(p) for p in accuracy_vs_epsilon(ss)] or ["<p>No DP run.</p>"]
    at = "" if eps is None else f" (DP methods at ε = {eps:g})"
    parts.append(f"<h3>Accuracy against training time{at}</h3>")
    parts += [_figure(p) for p in accuracy_vs_cost(ss, "time")]
    parts.append(f"<h3>Accuracy against bytes sent{at}</h3>")
    parts += [_figure(p) for p in accuracy_vs_cost(ss, "bytes")]
    return parts


def costs_section(records: list[dict[str, Any]]) -> list[str]:
    header, rows = cost_rows(records)
    return [
        "<p>Every setting: training wall time and CPU time (the whole run, every party), bytes "
        "sent by all parties (serialized payloads counted at the channel), and the largest "
        "party's peak resident memory where each party ran in its own process (in-process runs "
        "share one process, whose peak is not a party's).</p>",
        _escaped_table(header, rows),
    ]


def md_sections(md: str, out: Path) -> list[str]:
    """report.md's ``##`` sections, each foldable; its plots section (one plot per figure, the
    same data as the Pareto plots above) starts folded."""
    chunks = re.split(r"^## ", md, flags=re.M)
    parts = [markdown_to_html(chunks[0], out)]
    for chunk in chunks[1:]:
        heading, _, body = chunk.partition("\n")
        folded = heading.strip() == "Plots"
        parts.append(
            f"<details{'' if folded else ' open'}><summary>{html.escape(heading.strip())}"
            f"</summary>{markdown_to_html(body, out, heading_shift=1)}</details>"
        )
    return parts


def failed_section(failed: list[dict[str, Any]]) -> list[str]:
    """The settings that could not run (e.g. an ε a method cannot meet), one line each."""
    by: dict[tuple[str, str, str], list[Any]] = {}
    for r in {r.get("cell_id", id(r)): r for r in failed}.values():  # a retried cell: once
        why = str(r.get("error", "failed")).split(";")[0][:160]
        by.setdefault((r.get("dataset", "?"), r.get("method", "?"), why), []).append(
            (r.get("config") or {}).get("epsilon")
        )
    if not by:
        return []
    items = []
    for (ds, method, why), eps in sorted(by.items()):
        grid = sorted({e for e in eps if e is not None})
        at = f" at ε = {', '.join(f'{e:g}' for e in grid)}" if grid else ""
        items.append(
            f"<li><strong>{html.escape(method)}</strong> on {html.escape(ds)}{at} "
            f"({len(eps)} runs): {html.escape(why)}</li>"
        )
    return [
        "<h3>Could not run (left out of the choice above)</h3>",
        f'<ul class="note">{"".join(items)}</ul>',
    ]


def render_html(
    records: list[dict[str, Any]],
    out: Path,
    md: str,
    title: str,
    *,
    failed: list[dict[str, Any]] | None = None,
) -> Path:
    """Write out/report.html from the records and report.md's markdown; return its path."""
    runs = [r for r in records if "attack" not in r and "audit" not in r]
    sections = [
        (
            "choice",
            "Which method should I use",
            summary_section(runs) + failed_section(failed or []),
        ),
        ("plots", "Pareto plots", plots_section(runs)),
        ("costs", "Cost of every setting", costs_section(runs)),
    ]
    body_md = "\n".join(md.splitlines()[1:])  # report.md's title is the page's <h1>
    nav = "".join(f'<a href="#{key}">{name}</a>' for key, name, _ in sections)
    nav += '<a href="#tables">Tables (report.md)</a>'
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{len(records)} runs, rendered from results.jsonl on {stamp}. '
        "Self-contained: plots and styles are inside this file.</p>",
        f"<nav>{nav}</nav>",
    ]
    for key, name, parts in sections:
        page += [f'<h2 id="{key}">{name}</h2>', *parts]
    page += ['<h2 id="tables">Tables (report.md)</h2>', *md_sections(body_md, out)]
    page.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(page), encoding="utf-8")
    return path
