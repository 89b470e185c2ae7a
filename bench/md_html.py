"""A small markdown-to-HTML converter for the reports' own markdown (no dependency).

It knows what bench reports write: ATX headings, paragraphs, ``- `` lists, pipe tables, images
``![alt](file)`` (inlined as base64 so the page needs nothing beside it), links, ``**bold**``,
``*emphasis*`` and ``inline code``. Everything else is escaped text, never raw HTML.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

_IMG = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")
_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\*([^*\s][^*]*?)\*|\[([^\]]+)\]\(([^)\s]+)\)")
_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")


def data_uri(path: Path) -> str | None:
    """The file as a data: URI, or None when it is not a readable file under the report."""
    if not path.is_file():
        return None
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def inline(text: str, base: Path) -> str:
    """Escape ``text`` and render its inline markup."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        code, bold, em, link_text, href = m.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{inline(bold, base)}</strong>")
        elif em is not None:
            out.append(f"<em>{inline(em, base)}</em>")
        else:  # a link to a report file is inlined; a page must not reach the network
            uri = data_uri(base / href) if "://" not in href else None
            target = f' href="{html.escape(uri)}" download="{html.escape(href)}"' if uri else ""
            out.append(f"<a{target}>{inline(link_text, base)}</a>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def split_row(line: str) -> list[str]:
    """A pipe-table row's cells (``\\|`` is a literal bar)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells = re.split(r"(?<!\\)\|", body)
    return [c.strip().replace("\\|", "|") for c in cells]


def table_html(header: list[str], rows: list[list[str]], base: Path, *, raw: bool = False) -> str:
    """One table, wrapped so that a wide one scrolls instead of stretching the page."""
    cell = (lambda c: c) if raw else (lambda c: inline(c, base))
    head = "".join(f"<th>{cell(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def image_html(alt: str, src: str, base: Path) -> str:
    uri = data_uri(base / src) if "://" not in src else None
    if uri is None:
        return f'<p class="missing">plot {html.escape(src)} is missing</p>'
    return (
        f'<figure><img alt="{html.escape(alt)}" src="{uri}">'
        f"<figcaption>{html.escape(alt)}</figcaption></figure>"
    )


def _flush_paragraph(buf: list[str], out: list[str], base: Path) -> None:
    if buf:
        out.append("<p>" + inline(" ".join(buf), base) + "</p>")
        buf.clear()


def markdown_to_html(md: str, base: Path, *, heading_shift: int = 0) -> str:
    """Render report markdown; ``base`` is the folder its image and link paths are relative to."""
    lines = md.splitlines()
    out: list[str] = []
    para: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        stripped = line.strip()
        if not stripped:
            _flush_paragraph(para, out, base)
        elif m := re.match(r"^(#{1,6})\s+(.*)$", stripped):
            _flush_paragraph(para, out, base)
            level = min(6, len(m.group(1)) + heading_shift)
            out.append(f"<h{level}>{inline(m.group(2), base)}</h{level}>")
        elif stripped.startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            _flush_paragraph(para, out, base)
            header = split_row(stripped)
            i += 2
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(split_row(lines[i]))
                i += 1
            out.append(table_html(header, rows, base))
            continue
        elif m := _IMG.match(stripped):
            _flush_paragraph(para, out, base)
            out.append(image_html(m.group(1), m.group(2), base))
        elif stripped.startswith(("- ", "* ")):
            _flush_paragraph(para, out, base)
            items = []
            while i < len(lines) and lines[i].strip().startswith(("- ", "* ")):
                item = lines[i].strip()[2:]
                i += 1  # continuation lines (indented, not a new item) belong to the item
                while i < len(lines) and lines[i].startswith("  ") and lines[i].strip():
                    item += " " + lines[i].strip()
                    i += 1
                items.append(f"<li>{inline(item, base)}</li>")
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        else:
            para.append(stripped)
        i += 1
    _flush_paragraph(para, out, base)
    return "\n".join(out)
