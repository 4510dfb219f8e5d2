"""Text from stored data made fit for a report: one line, bounded, escaped.

Names and notes in a report come from files anyone could have edited
(``results.jsonl``, ``environment.json``) or from plugins.  Before such text
reaches a report it is made one line (a newline cannot split a table row or a
summary line), cut to a bounded length (a 100 kB name cannot bloat the
report), and escaped for the report's format: :func:`markdown_cell` for a
markdown table cell, :func:`html_text` for HTML, and :func:`no_raw_html` for a
whole markdown document, whose ``<`` never opens a tag.
"""

from __future__ import annotations

import html
import re
from typing import Any

# The first line of every report.md amp-suite writes: how `amp-suite report` knows a report it may replace.
REPORT_FIRST_LINE = "# amp-suite report"
# Longest stored text shown in one table cell of a report.
SHOWN_CHARS = 300
# Longest line of a report made from stored text (a failed cell's line holds its error message).
LINE_CHARS = 2500
# Control characters, line and paragraph separators: each becomes one space.
_BREAKS = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")


def one_line_text(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line (control characters, line breaks and runs of spaces as one space), cut to about
    ``limit`` characters."""
    flat = " ".join(_BREAKS.sub(" ", str(text)).split())
    if len(flat) <= limit:
        return flat
    return flat[:limit] + f" [... {len(flat) - limit} characters cut]"


def markdown_cell(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a markdown table cell: one line, bounded, no raw HTML, no ``|`` that would end the cell."""
    return one_line_text(text, limit).replace("|", "\\|").replace("<", "&lt;")


def html_text(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as HTML element text: one line, bounded, every markup character escaped."""
    return html.escape(one_line_text(text, limit), quote=True)


def no_raw_html(markdown: str) -> str:
    """A whole markdown document with every ``<`` written ``&lt;``: no tag can open (it reads the same)."""
    return markdown.replace("<", "&lt;")


def path_text(path: object, limit: int = SHOWN_CHARS) -> str:
    """A path as one bounded piece of a one-line message: a newline or control character in it is shown
    escaped (``\\n``), so it can neither split the line nor pass for another path."""
    text = _BREAKS.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), str(path))
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} characters cut]"


def flat_text(value: Any) -> str:
    """``value`` as text on one line (line breaks and runs of spaces become one space), bounded."""
    return one_line_text(str(value), LINE_CHARS)


def table_text(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` as one markdown table cell: on one line, bounded (to ``limit``), ``|`` escaped, no raw HTML."""
    return markdown_cell(str(value), limit)


def pooled_label(label: str, pool: str) -> str:
    """How tables name a cell's framework: its label, and the cluster pool it ran on (``torch on a100``)."""
    return f"{label} on {pool}" if pool else label
