"""The report's "Every run" section: each cell's own figures, in two tables that fit a page.

The columns are split by what a reader looks for: timing (throughput, step
times, compilation) and memory and training (peak memory, losses, accuracy,
FLOPs, loss scaling).  A column of the sweep's identity (workload, device
kind, devices, mode, batch size, seed) that holds one value in every row is
left out of the tables and named once above them (the seed, of a sweep of one
seed, is not named); a figure no run has is left out.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from amp_suite.report.text import markdown_cell

if TYPE_CHECKING:
    import pandas as pd

# Identity columns: which cell a row is.  Those holding one value in every row are named above the tables instead.
IDENTITY = {"workload": "{}", "framework": "{}", "device_kind": "{}", "devices": "{:d}", "mode": "{}",
            "batch_size": "{:d}", "precision": "{}", "seed": "{:d}", "repeat": "{:d}", "status": "{}"}
# Identity columns always shown, whatever they hold.
ALWAYS = ("framework", "precision", "repeat", "status")
TIMING = {"throughput": "{:,.0f}", "step_time_median_ms": "{:.2f}", "step_time_p90_ms": "{:.2f}",
          "step_time_std_ms": "{:.2f}", "first_step_time_s": "{:.3f}", "timed_steps": "{:d}",
          "compilation": "{}", "compile_time_s": "{:.2f}", "gpu_busy_pct": "{:.0f}"}
TRAINING = {"peak_memory_mib": "{:,.0f}", "rss_growth_mib": "{:,.0f}", "compiled_step_mib": "{:,.1f}",
            "first_step_loss": "{:.5f}", "final_loss": "{:.4f}", "val_accuracy": "{:.4f}", "param_count": "{:,d}",
            "train_gflop_per_image": "{:.3f}", "achieved_tflops": "{:.4f}", "peak_fraction": "{:.3f}",
            "loss_scale_final": "{:g}", "skipped_steps": "{:d}"}
# Every column either table may show, and how each is printed.
DETAIL_FORMATS = {**IDENTITY, **TIMING, **TRAINING}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _shown(value: Any, pattern: str) -> str:
    if _missing(value):
        return ""
    if pattern.endswith("d}") and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return markdown_cell(pattern.format(value))
    except (TypeError, ValueError):  # a stored figure of an unexpected type
        return markdown_cell(str(value))


def constant_identity(cells: pd.DataFrame) -> dict[str, str]:
    """The identity columns that hold one value in every row, each with that value as shown."""
    out = {}
    for column, pattern in IDENTITY.items():
        if column in ALWAYS:
            continue
        values = list(dict.fromkeys(cells[column].tolist()))
        if len(values) == 1:
            out[column] = _shown(values[0], pattern)
    return out


def _table(cells: pd.DataFrame, figures: dict[str, str], identity: list[str]) -> str:
    shown = [c for c in figures if not all(_missing(v) for v in cells[c].tolist())]
    if figures and not shown:
        return ""
    columns = identity + shown
    header = "| " + " | ".join(columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    rows = ["| " + " | ".join(_shown(record[c], DETAIL_FORMATS[c]) for c in columns) + " |"
            for record in cells[columns].to_dict("records")]
    return "\n".join([header, rule, *rows])


NAMES = {"workload": "workload", "device_kind": "device", "devices": "devices", "mode": "mode",
         "batch_size": "batch", "seed": "seed"}
# Identity columns not named above the tables when every run shares them (a sweep of one seed, as ever).
UNNAMED = ("seed",)


def every_run_lines(cells: pd.DataFrame) -> list[str]:
    """The section's body: a line naming what every run shares, then the timing and training tables."""
    if cells.empty:
        return ["_no results_", ""]
    constant = constant_identity(cells)
    identity = [c for c in IDENTITY if c not in constant]
    out = []
    shared = [f"{NAMES[c]} {v}" for c, v in constant.items() if v and c not in UNNAMED]
    if shared:
        out += ["Every run shares " + ", ".join(shared) + ".", ""]
    for title, figures in (("Timing", TIMING), ("Memory and training", TRAINING)):
        table = _table(cells, figures, identity)
        if table:
            out += [f"### {title}", "", table, ""]
    if len(out) == (2 if shared else 0):  # no figure at all: the identity alone
        out += [_table(cells, {}, identity), ""]
    return out
