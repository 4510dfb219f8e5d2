"""Normalizes every run into one comparison: pandas frames and a markdown report.

Each figure is put beside the same framework's ``fp32`` figure on the same
workload, device kind and device count, so a reader sees what AMP buys *in
that framework*: throughput speed-up, peak-memory ratio and the accuracy
difference.  Repeats are folded by their median; failed cells keep their
status and are never dropped.  Data-parallel cells add a scaling table: the
speed-up over the same framework, precision and workload on one device, and
the scaling efficiency ``throughput(N) / (N * throughput(1))``.

With a calibration of the machine (``amp-suite calibrate``, carried in the
environment record as ``calibration``) each speed-up stands beside its
ceiling (the measured peak of the AMP dtype over the fp32 peak) and each
achieved TFLOP/s beside the fraction of its dtype's peak.  With a price
(``cost`` in the environment record) each cell gets its cost per epoch and per
million training images.  Accuracy on synthetic data is ``n/a``: it says
nothing about a real task.  A sweep run from a preset (``preset`` in the
environment record) gets a section putting the article's published figures
beside the ratios measured here (:mod:`amp_suite.report.published`).

The work is done in rooms of one job each, and this module is the one place
that hands out all of it (the sweep, the reporters, the charts and plugins
import from here):

- :mod:`amp_suite.report.frames`: the per-cell frame (``results.csv``);
- :mod:`amp_suite.report.summary`: the summary frame, repeats folded and each
  figure over fp32, and the sweep's verdict;
- :mod:`amp_suite.report.tables`: the pivot tables of the report;
- :mod:`amp_suite.report.notes`: the paragraphs beside the tables;
- :mod:`amp_suite.report.context`: the environment, ceiling and method sections;
- :mod:`amp_suite.report.markdown`: ``report.md``, its sections in order.
"""

from __future__ import annotations

from amp_suite.report.context import (
    ceiling_lines,
    cost_method_lines,
    environment_lines,
    methodology_lines,
    runtime_lines,
)
from amp_suite.report.frames import CELL_COLUMNS, MIB, device_label, is_synthetic, pooled_label, results_frame
from amp_suite.report.markdown import SYNTHETIC_ACCURACY_NOTE, render_markdown
from amp_suite.report.notes import (
    best_configuration_lines,
    busy_lines,
    incomplete_lines,
    interval_lines,
    memory_noise_lines,
    mode_lines,
)
from amp_suite.report.summary import GROUP, SUMMARY_COLUMNS, speedup_interval, summary_frame, sweep_verdict
from amp_suite.report.tables import (
    BOUND_BELOW_PCT,
    BOUND_MARK,
    TIME_TO_TARGET_NOTE,
    cell_text,
    comparison_tables,
    ordered_summary,
    scaling_table,
    shows_batches,
    shows_modes,
    time_to_target_table,
)
from amp_suite.report.text import flat_text, table_text

__all__ = [
    "BOUND_BELOW_PCT", "BOUND_MARK", "CELL_COLUMNS", "GROUP", "MIB", "SUMMARY_COLUMNS", "SYNTHETIC_ACCURACY_NOTE",
    "TIME_TO_TARGET_NOTE", "best_configuration_lines", "busy_lines", "ceiling_lines", "cell_text",
    "comparison_tables", "cost_method_lines", "device_label", "environment_lines", "flat_text", "incomplete_lines",
    "interval_lines", "is_synthetic", "memory_noise_lines", "methodology_lines", "mode_lines", "ordered_summary",
    "pooled_label", "render_markdown", "results_frame", "runtime_lines", "scaling_table", "shows_batches",
    "shows_modes", "speedup_interval", "summary_frame", "sweep_verdict", "table_text", "time_to_target_table",
]
