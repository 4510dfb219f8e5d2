"""The report's tables that the markdown report has beside its main ones, as sections of ``report.html``.

``report.html`` is the same report as ``report.md`` on one page: every table
the markdown builds from the summary and cell frames (the best configuration
per framework, pools, framework variants, Keras against its backend's own
framework, token workloads, time to target, scaling over devices) is here
too, each a sortable table under its markdown note.
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
    """Every markdown-only table of the report (see the module docstring), in the markdown's order."""
    from amp_suite.report.cross_pool import CROSS_POOL_NOTE, cross_pool_table
    from amp_suite.report.keras_backends import KERAS_COST_NOTE, keras_cost_table
    from amp_suite.report.notes import best_configuration_lines, mode_lines
    from amp_suite.report.tables import TIME_TO_TARGET_NOTE, scaling_table, time_to_target_table
    from amp_suite.report.tokens import TOKEN_NOTE, token_frame
    from amp_suite.report.variants import VARIANT_NOTE, variant_table

    out: list[str] = []
    best, modes = best_configuration_lines(summary), mode_lines(summary)
    if best or modes:
        out += ['<h2 id="best-section">Best configuration per framework</h2>',
                *paragraphs([*modes, "The fastest mode, batch and precision of the sweep for each framework:", "",
                             *best])]
    out += frame_html("pools", "Across pools (images/s, speed-up over fp32 on the same pool; ceiling; cost)",
                      CROSS_POOL_NOTE, cross_pool_table(summary, cells, environment))
    out += frame_html("variants", "Framework variants (each against the first of its framework)", VARIANT_NOTE,
                      variant_table(summary, cells))
    out += frame_html("keras-cost", "Keras against its backend's own framework (the cost of the Keras layer)",
                      KERAS_COST_NOTE, keras_cost_table(summary, cells))
    out += frame_html("tokens", "Token workloads", TOKEN_NOTE, token_frame(cells))
    out += frame_html("time-to-target", "Time to target accuracy", TIME_TO_TARGET_NOTE,
                      time_to_target_table(summary, cells))
    out += frame_html("scaling", "Scaling over devices, images/s (speed-up over 1 device, efficiency)", "",
                      scaling_table(summary))
    return out
