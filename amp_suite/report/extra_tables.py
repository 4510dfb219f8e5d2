"""The report's tables beside the comparison tables, each declared once for both pages.

``report.md`` and ``report.html`` are the same report: each table here (pools,
framework variants, Keras against its backend's own framework, token workloads,
time to target, scaling over devices) has one id, one title, one note, one
builder and the lines that follow it, and both pages render every entry of
:data:`EXTRA_TABLES` whose frame is not empty.  A table added here appears on
both; the markdown places the ``end`` ones after the plugins' sections, the
HTML page keeps the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from amp_suite.report.cross_pool import CROSS_POOL_NOTE, cross_pool_table, pool_lines
from amp_suite.report.keras_backends import KERAS_COST_NOTE, keras_cost_table
from amp_suite.report.tables import TIME_TO_TARGET_NOTE, scaling_table, time_to_target_table
from amp_suite.report.tokens import TOKEN_NOTE, token_frame
from amp_suite.report.variants import VARIANT_NOTE, variant_table

SCALING_NOTE = ("Data parallel: the workload's batch is the global batch, split evenly over the devices. "
                "Throughput is global samples over the slowest process's window time; efficiency is "
                "throughput(N) / (N x throughput(1)) for the same workload, framework, device kind and "
                "precision. Devices that share a machine's cores (logical CPU devices, one process per core) "
                "compete for them: read the efficiency as measured, not as a property of the framework.")


@dataclass(frozen=True)
class TableInputs:
    """What every table is built from: the summary and cell frames and the sweep's environment."""

    summary: pd.DataFrame
    cells: pd.DataFrame
    environment: dict[str, Any]


def _no_lines(inputs: TableInputs) -> list[str]:
    return []


@dataclass(frozen=True)
class ExtraTable:
    """One table of the report: ``frame`` builds it (empty: no section); ``after`` adds lines below it."""

    table_id: str
    title: str
    note: str
    frame: Callable[[TableInputs], pd.DataFrame]
    placement: Literal["middle", "end"] = "middle"
    after: Callable[[TableInputs], list[str]] = _no_lines


EXTRA_TABLES: tuple[ExtraTable, ...] = (
    ExtraTable("pools", "Across pools (images/s, speed-up over fp32 on the same pool; ceiling; cost)",
               CROSS_POOL_NOTE, lambda i: cross_pool_table(i.summary, i.cells, i.environment),
               after=lambda i: pool_lines(i.environment)),
    ExtraTable("variants", "Framework variants (each against the first of its framework)", VARIANT_NOTE,
               lambda i: variant_table(i.summary, i.cells)),
    ExtraTable("keras-cost", "Keras against its backend's own framework (the cost of the Keras layer)",
               KERAS_COST_NOTE, lambda i: keras_cost_table(i.summary, i.cells)),
    ExtraTable("tokens", "Token workloads", TOKEN_NOTE, lambda i: token_frame(i.cells)),
    ExtraTable("time-to-target", "Time to target accuracy", TIME_TO_TARGET_NOTE,
               lambda i: time_to_target_table(i.summary, i.cells)),
    ExtraTable("scaling", "Scaling over devices, images/s (speed-up over 1 device, efficiency)", SCALING_NOTE,
               lambda i: scaling_table(i.summary), placement="end"),
)


def built_tables(inputs: TableInputs,
                 placement: Literal["middle", "end"] | None = None) -> list[tuple[ExtraTable, pd.DataFrame]]:
    """Each table of ``placement`` (every one when ``None``) with its frame, in order, the empty ones left out."""
    built = [(table, table.frame(inputs)) for table in EXTRA_TABLES
             if placement is None or table.placement == placement]
    return [(table, frame) for table, frame in built if not frame.empty]


def markdown_lines(inputs: TableInputs, placement: Literal["middle", "end"]) -> list[str]:
    """The markdown sections of the tables of ``placement``: heading, note, table and the lines after it."""
    out: list[str] = []
    for table, frame in built_tables(inputs, placement):
        after = table.after(inputs)
        out += [f"## {table.title}", "", table.note, "", frame.to_markdown(index=False, disable_numparse=True), "",
                *after, *([""] if after else [])]
    return out
