"""Figures a plugin added to a cell: its ``measure`` answer and its ``EpochResult.extra`` keys.

The worker stores every figure in the cell's ``metrics`` (``results.jsonl``);
the per-cell frame (``results.csv``, ``amp_suite.load()``) turns the host's
own figures into its named columns.  Every other figure with a single value
(a number, a string, a boolean) is one a plugin added: the built-in backends'
``optimizer_implementation``, ``traces``, ``compiled_step_temp_bytes``, or a
third-party plugin's own.  Those become extra columns of the frame, after the
standard ones, and a section of the report.

A figure is the host's when the per-cell frame reads it (:data:`READ_BY_COLUMNS`)
or the worker writes it for its own use (:data:`HOST_FIGURES`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from amp_suite.records import CellResult
from amp_suite.report.text import markdown_cell

# The metrics the per-cell frame turns into its columns (amp_suite.report.normalize.results_frame).
READ_BY_COLUMNS = frozenset({
    "throughput", "step_time_median_s", "step_time_p90_s", "step_time_std_s", "first_step_time_s", "warmup_time_s",
    "timed_steps", "epoch_times_s", "device_peak_memory_bytes", "peak_rss_bytes_max_rank", "peak_rss_bytes",
    "rss_growth_bytes", "compiled_step_memory_bytes", "first_step_loss", "final_loss", "val_accuracy", "val_loss",
    "param_count", "train_flops_per_image", "achieved_tflops", "compilation", "latency_source", "loss_scale_final",
    "skipped_steps", "framework_version", "keras_backend", "staged_input_bytes", "energy_per_image_j",
    "mean_power_w", "sm_clock_mhz_median", "telemetry_source", "window_throughput_cv", "timed_windows",
    "load_avg_1m_before", "load_avg_1m_after", "other_cpu_cores", "cpu_freq_mhz_before", "cpu_freq_mhz_after",
    "measurement_flags", "target_accuracy", "target_reached", "time_to_target_s", "steps_to_target",
    "epochs_to_target", "best_val_accuracy", "eval_time_s", "gpu_utilization_pct_mean", "compile_time_s",
    "learning_rate", "learning_rate_rule", "dataset_substituted", "mode", "loss_scale_initial", "loss_scale_min",
    "loss_scale_backoffs",
    # a token workload's figures (its own section: amp_suite.report.tokens)
    "tokens_per_s", "val_bits_per_char", "unigram_bits_per_char", "context", "val_tokens",
})
# Figures the worker writes for itself (bookkeeping, raw series, what a column is derived from).
HOST_FIGURES = frozenset({
    "final_epoch_mean_loss", "forward_flops_per_image", "latency_step_times_s", "latency_steps_measured",
    "load_span_s", "rss_before_model_bytes", "step_time_cv", "timed_samples", "timing_source", "train_examples",
    "val_examples", "warmup_settled", "warmup_steps", "window_event_step_time_median_s", "window_throughput_max",
    "window_throughput_median", "window_throughput_min", "window_throughputs", "window_time_s", "dataset_note",
    "cpu_cores", "device_peak_memory_with_inputs_bytes", "device_peak_memory_excludes_inputs", "energy_j",
    "energy_note", "energy_scope", "energy_windows_missing", "machine_busy_s", "memory_clock_mhz_median", "sm_clock_mhz_min",
    "telemetry_samples", "accuracy_at_target", "eval_every_steps", "target_curve", "learning_curve", "step_losses", "log", "log_tail",
    "traceback", "power_capped_windows", "gpu_processes_unmatched", "gpu_error", "loss_scale_trajectory",
    "loss_scale_points_dropped",
})
# A timing extension keeps the configured training's timing figures under this prefix.
HOST_PREFIXES = ("configured_",)


def is_added(key: str, value: Any) -> bool:
    """Whether ``metrics[key] = value`` is a single-valued figure a plugin added."""
    if key in READ_BY_COLUMNS or key in HOST_FIGURES or key.startswith(HOST_PREFIXES):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (bool, int, str))


def added_figure_names(results: Iterable[CellResult]) -> list[str]:
    """The added figures of ``results``' ok cells, sorted by name."""
    names = {key for r in results if r.status == "ok" for key, value in (r.metrics or {}).items()
             if is_added(key, value)}
    return sorted(names)


def column_name(key: str, taken: Iterable[str]) -> str:
    """The frame column of figure ``key``: the key itself, or ``figure_KEY`` where a standard column has the name."""
    return f"figure_{key}" if key in set(taken) else key


def added_figures(result: CellResult, names: Iterable[str]) -> dict[str, Any]:
    """``result``'s value of each figure in ``names`` (``None`` where it has none)."""
    metrics = result.metrics or {}
    return {name: metrics[name] if is_added(name, metrics.get(name)) else None for name in names}


def _shown(values: list[Any]) -> str:
    """One table cell for the repeats' values of a figure: the median of numbers, else the distinct values."""
    present = [v for v in values if v is not None]
    if not present:
        return "–"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        ordered = sorted(float(v) for v in present)
        middle = len(ordered) // 2
        median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        return f"{median:,.0f}" if median.is_integer() and abs(median) >= 1000 else f"{median:.4g}"
    return "; ".join(dict.fromkeys(str(v) for v in present))


def added_figures_table(results: list[CellResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the report's table: a row per figure and framework, a column per precision.

    Numbers are the median over the ok repeats; text shows each distinct value.  Cells are unescaped text.
    """
    names = added_figure_names(results)
    if not names:
        return [], []
    ok = [r for r in results if r.status == "ok"]
    precisions = list(dict.fromkeys(r.precision for r in ok))
    frameworks = list(dict.fromkeys(r.framework for r in ok))
    rows = []
    for name in names:
        for framework in frameworks:
            mine = [r for r in ok if r.framework == framework]
            if not any(name in (r.metrics or {}) for r in mine):
                continue
            rows.append([name, framework, *(_shown([added_figures(r, [name])[name] for r in mine
                                                    if r.precision == p]) for p in precisions)])
    return ["figure", "framework", *precisions], rows


ADDED_FIGURES_NOTE = ("Figures the plugins added to each cell (a backend's `measure` answer or its epochs' extra "
                      "figures), beyond the tables' columns: the median over the ok repeats, or each distinct "
                      "value of a text. `results.csv` and `amp_suite.load()` have a column for each.")


def added_figures_lines(results: list[CellResult]) -> list[str]:
    """The report section's markdown body, or ``[]`` when no plugin added a figure."""
    header, rows = added_figures_table(results)
    if not rows:
        return []
    lines = [ADDED_FIGURES_NOTE, "", "| " + " | ".join(markdown_cell(h) for h in header) + " |",
             "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
    return lines + [""]
