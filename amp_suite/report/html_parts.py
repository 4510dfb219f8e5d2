"""The pieces ``report.html`` is built of: a chart to embed, a table cell with its sort value and tooltip, a
sortable table, paragraphs; every stored text escaped on the way in (:func:`amp_suite.report.text.html_text`)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

from amp_suite.report.text import LINE_CHARS, html_text


@dataclass(frozen=True)
class Chart:
    """A chart to embed: its caption and its PNG bytes."""

    title: str
    png: bytes


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, the value it sorts by (a number, where it has one) and its tooltip."""

    text: str
    sort: float | None = None
    title: str = ""


def as_number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def formatted(value: Any, pattern: str) -> str:
    number = as_number(value)
    return "–" if number is None else pattern.format(number)


def table_cell(cell: Cell | str, *, limit: int = 300) -> str:
    if isinstance(cell, str):
        cell = Cell(cell)
    attributes = ""
    if cell.sort is not None:
        attributes += f' data-sort="{cell.sort!r}"'
    if cell.title:
        attributes += f' title="{html_text(cell.title, LINE_CHARS)}"'
    return f"<td{attributes}>{html_text(cell.text, limit)}</td>"


def sortable_table(table_id: str, caption: str, header: list[str], rows: list[list[Cell | str]], *,
           limit: int = 300) -> list[str]:
    """A sortable, filterable table: a filter box, then the table (each header cell a sort button)."""
    if not rows:
        return []
    safe_id = html.escape(table_id, quote=True)
    out = [f'<div class="table" id="{safe_id}-box">',
           f'<input type="search" class="filter" data-table="{safe_id}" placeholder="filter rows" '
           f'aria-label="filter the rows of {html_text(caption)}">',
           f'<table class="sortable" id="{safe_id}"><caption>{html_text(caption)}</caption>',
           "<thead><tr>" + "".join(f'<th scope="col" tabindex="0">{html_text(h)}</th>' for h in header)
           + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(table_cell(cell, limit=limit) for cell in row) + "</tr>" for row in rows]
    out += ["</tbody></table></div>"]
    return out


def paragraphs(lines: list[str]) -> list[str]:
    """Markdown-ish lines (paragraphs, ``- `` bullets, ``> `` notes) as escaped HTML."""
    out: list[str] = []
    bullets: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("- "):
            bullets.append(f"<li>{html_text(line[2:].replace('`', ''), LINE_CHARS)}</li>")
            continue
        if bullets:
            out += ["<ul>", *bullets, "</ul>"]
            bullets = []
        if line.startswith("> "):
            out.append(f'<p class="note">{html_text(line[2:].replace("**", "").replace("`", ""), LINE_CHARS)}</p>')
        elif line.strip():
            out.append(f"<p>{html_text(line.replace('`', ''), LINE_CHARS)}</p>")
    return out
