"""report.html: one self-contained page (CSS and plots inlined, nothing fetched) beside report.md.

Its sections go by capability (bench.report_sections): which method at which ε (the decision,
first), utility, privacy, cost and attacks; then report.md's own sections rendered to HTML.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.md_html import markdown_to_html
from bench.report_sections import SECTIONS

PEERS_HEADING, PEERS_ID = "Performance against peers", "peers"
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
.reading { background: #f3f7f1; border-left: 3px solid #5b8c3a; padding: .3em .8em; }
"""


def md_sections(md: str, out: Path) -> list[str]:
    """report.md's ``##`` sections, each foldable; its plots section (one plot per figure, the
    same data as the Pareto plots above) starts folded."""
    chunks = re.split(r"^## ", md, flags=re.M)
    parts = [markdown_to_html(chunks[0], out)]
    for chunk in chunks[1:]:
        heading, _, body = chunk.partition("\n")
        folded = heading.strip() == "Plots"
        anchor = f' id="{PEERS_ID}"' if heading.strip() == PEERS_HEADING else ""
        parts.append(
            f"<details{anchor}{'' if folded else ' open'}><summary>{html.escape(heading.strip())}"
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
    sections = []
    for key, name, build in SECTIONS:
        parts = build(records if key in ("attacks", "privacy") else runs)
        if key == "choice":
            parts += failed_section(failed or [])
        sections.append((key, name, parts))
    body_md = "\n".join(md.splitlines()[1:])  # report.md's title is the page's <h1>
    nav = "".join(f'<a href="#{key}">{name}</a>' for key, name, _ in sections)
    nav += '<a href="#tables">Tables (report.md)</a>'
    if f"\n## {PEERS_HEADING}\n" in md:  # the perf jobs' ratio table (bench.reports.perf_peers)
        nav += f'<a href="#{PEERS_ID}">{PEERS_HEADING}</a>'
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    if records or f"\n## {PEERS_HEADING}\n" not in md:
        made = f"{len(records)} runs, rendered from results.jsonl on {stamp}."
    else:  # a perf-only suite: its jobs' records are perf.jsonl's, in their section
        made = f"Perf jobs only (perf.jsonl), rendered on {stamp}."
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{made} Self-contained: plots and styles are inside this file.</p>',
        f"<nav>{nav}</nav>",
    ]
    for key, name, parts in sections:
        page += [f'<h2 id="{key}">{name}</h2>', *parts]
    page += ['<h2 id="tables">Tables (report.md)</h2>', *md_sections(body_md, out)]
    page.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(page), encoding="utf-8")
    return path
