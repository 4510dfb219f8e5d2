"""The report's tables beside its comparison tables, as sections of ``report.html``.

``report.html`` is the same report as ``report.md`` on one page: the best
configuration per framework, then each table of
:data:`amp_suite.report.extra_tables.EXTRA_TABLES` (the list both pages
render), a sortable table under its note.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from amp_suite.report.html_parts import paragraphs, sortable_table


def _plain(value: Any) -> str:
    """A markdown table cell's text as it reads (its ``\\|`` and ``&lt;`` escapes undone; HTML escapes again)."""
    return str(value).replace("\\|", "|").replace("&lt;", "<")


def frame_html(table_id: str, title: str, note: str, frame: pd.DataFrame) -> list[str]:
    """A section: its heading, its note, and ``frame`` as a sortable table (nothing when the frame is empty)."""
    if frame.empty:
        return []
    rows: list[list[Any]] = [[_plain(value) for value in row] for row in frame.itertuples(index=False)]
    return [f'<h2 id="{table_id}-section">{title}</h2>', *paragraphs([note] if note else []),
            *sortable_table(table_id, title, [str(column) for column in frame.columns], rows)]


def extra_tables_html(summary: pd.DataFrame, cells: pd.DataFrame, environment: dict[str, Any]) -> list[str]:
    """The best configuration per framework, then every table of ``extra_tables.EXTRA_TABLES``, in their order."""
    from amp_suite.report.extra_tables import TableInputs, built_tables
    from amp_suite.report.notes import best_configuration_lines, mode_lines

    out: list[str] = []
    best, modes = best_configuration_lines(summary), mode_lines(summary)
    if best or modes:
        out += ['<h2 id="best-section">Best configuration per framework</h2>',
                *paragraphs([*modes, "The fastest mode, batch and precision of the sweep for each framework:", "",
                             *best])]
    inputs = TableInputs(summary, cells, environment)
    for table, frame in built_tables(inputs):
        out += frame_html(table.table_id, table.title, table.note, frame) + paragraphs(table.after(inputs))
    return out
