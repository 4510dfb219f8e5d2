"""The per-cell frame: one row per cell of a sweep, the figures a reader compares (``results.csv``).

Each stored :class:`~amp_suite.records.CellResult` becomes one row of
:data:`CELL_COLUMNS` in the units a report shows (MiB, ms, mJ, GFLOP), with
the cell's cost and its fraction of the calibrated peak where the machine
record carries a price and a calibration, then a column per figure a plugin
added.  Also the small readers of a figure every frame and table shares.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from amp_suite.calibration.ceiling import ceiling_ratio, peak_tflops
from amp_suite.config.cost import cell_cost
from amp_suite.machine.noise import is_busy_flag
from amp_suite.modes import MODES
from amp_suite.records import CellResult
from amp_suite.report.added_figures import added_figure_names, added_figures, column_name
from amp_suite.report.text import flat_text, pooled_label
from amp_suite.report.tokens import TOKEN_COLUMNS

MIB = 1024 * 1024


# Columns of the per-cell frame (results.csv), in order.
CELL_COLUMNS = [
    "workload", "framework", "precision", "repeat", "status", "seed", "mode", "devices", "error",
    "throughput", "step_time_median_ms", "step_time_p90_ms", "step_time_std_ms",
    "first_step_time_s", "warmup_time_s", "timed_steps", "epoch_time_s",
    "peak_memory_mib", "memory_source", "rss_growth_mib", "compiled_step_mib", "first_step_loss", "final_loss",
    "val_accuracy", "val_loss", "param_count", "train_gflop_per_image", "achieved_tflops",
    "peak_tflops", "peak_fraction", "ceiling_ratio", "images_per_epoch", "cost_per_epoch",
    "cost_per_million_images", "currency", "compilation", "latency_source", "loss_scaling", "loss_scale_final",
    "skipped_steps", "loss_scale_initial", "loss_scale_min", "loss_scale_backoffs", "keep_fp32", "compute_dtype",
    "fp8_matmul",
    "device", "device_kind", "framework_version", "keras_backend", "plugin",
    "environment", "interpreter", "label", "pool", "dataset",
    "batch_size", "steps", "epochs", "warmup", "mode_axis", "seed_axis", "gpu_busy_pct", "compile_time_s", "learning_rate",
    "learning_rate_rule", "staged_input_mib", "energy_per_image_mj", "mean_power_w",
    "sm_clock_mhz_median", "telemetry_source", "window_throughput_cv", "timed_windows", "load_avg_1m_before",
    "load_avg_1m_after", "other_cpu_cores", "cpu_freq_mhz_before", "cpu_freq_mhz_after", "machine_busy",
    "target_accuracy", "target_reached", "time_to_target_s", "steps_to_target", "epochs_to_target",
    "best_val_accuracy", "eval_time_s", "measurement_flags",
    *TOKEN_COLUMNS,
]


def _peak_memory(metrics: dict[str, Any]) -> tuple[float | None, str]:
    """Device allocator peak where the framework gives one (the largest device's), else peak RSS.

    A cell of one process per device (torchrun) gives the largest rank's RSS.
    """
    if metrics.get("device_peak_memory_bytes") is not None:
        return metrics["device_peak_memory_bytes"] / MIB, "device allocator"
    if metrics.get("peak_rss_bytes_max_rank") is not None:
        return metrics["peak_rss_bytes_max_rank"] / MIB, "process RSS (largest rank)"
    if metrics.get("peak_rss_bytes") is not None:
        return metrics["peak_rss_bytes"] / MIB, "process RSS"
    return None, ""


def _total_seconds(values: Any) -> float | None:
    numbers = [as_number(v) for v in values] if isinstance(values, list) else []
    return float(sum(n for n in numbers if n is not None)) if numbers else None


def as_number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


def column_median(column: pd.Series) -> float:
    """The median of the numbers in ``column`` (NaN where it has none)."""
    values = pd.to_numeric(column, errors="coerce").dropna()
    return float(values.median()) if len(values) else math.nan


def column_first(column: pd.Series) -> float:
    """The first number in ``column`` (NaN where it has none)."""
    values = pd.to_numeric(column, errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else math.nan


def is_known(value: Any) -> bool:
    """Whether ``value`` is a figure: neither None nor NaN."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def is_synthetic(result: CellResult) -> bool:
    """Whether ``result`` trained on synthetic data (asked for, or standing in for a real dataset)."""
    return (result.config or {}).get("dataset") == "synthetic" or bool((result.metrics or {}).get("dataset_substituted"))


def _images_per_epoch(config: dict[str, Any]) -> float | None:
    """The steps of one epoch x the (global) batch size, as the cell ran them (its ``config``)."""
    steps, batch_size = config.get("steps"), config.get("batch_size")
    if isinstance(steps, int) and isinstance(batch_size, int) and steps > 0 and batch_size > 0:
        return float(steps * batch_size)
    return None


def results_frame(results: list[CellResult], environment: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per cell with the figures a reader compares (:data:`CELL_COLUMNS`), then a column per figure a
    plugin added (:mod:`amp_suite.report.added_figures`).

    ``environment`` supplies the machine's calibration (peak fraction, ceiling
    ratio) and the price per hour (cost columns); without them those columns
    are empty.
    """
    environment = environment or {}
    calibration = environment.get("calibration")
    cost = environment.get("cost") or {}
    rows = []
    for r in results:
        m = r.metrics or {}
        memory, source = _peak_memory(m)
        kind = (r.device or {}).get("kind", "")
        throughput = as_number(m.get("throughput"))
        achieved = as_number(m.get("achieved_tflops"))
        plugin = (r.config or {}).get("framework") or r.framework  # a variant's (torch@2.12) plugin: torch
        peak = peak_tflops(calibration, plugin, kind, r.precision) if r.status == "ok" else None
        images = _images_per_epoch(r.config or {})
        per_epoch, per_million = (cell_cost(throughput, images, cost["price_per_hour"])
                                  if cost.get("price_per_hour") is not None and r.status == "ok" else (None, None))
        pool = (r.config or {}).get("pool") or ""
        rows.append({
            "workload": r.workload,
            "framework": pooled_label(r.framework, pool),
            "label": r.framework,
            "pool": pool,
            "precision": r.precision,
            "mode": r.mode or mode_in_key(r.key),
            "mode_axis": bool((r.config or {}).get("mode")),
            "gpu_busy_pct": as_number(m.get("gpu_utilization_pct_mean")),
            "compile_time_s": as_number(m.get("compile_time_s")),
            "learning_rate": as_number(m.get("learning_rate")),
            "learning_rate_rule": (r.config or {}).get("learning_rate_rule", "unchanged"),
            "devices": _devices(r),
            "repeat": r.repeat,
            "seed": cell_seed(r.config or {}),
            "seed_axis": bool((r.config or {}).get("seed_axis")),
            "status": r.status,
            "error": r.error,
            "throughput": as_number(m.get("throughput")),
            "step_time_median_ms": _ms(m.get("step_time_median_s")),
            "step_time_p90_ms": _ms(m.get("step_time_p90_s")),
            "step_time_std_ms": _ms(m.get("step_time_std_s")),
            "first_step_time_s": as_number(m.get("first_step_time_s")),
            "warmup_time_s": as_number(m.get("warmup_time_s")),
            "timed_steps": m.get("timed_steps"),
            "epoch_time_s": _total_seconds(m.get("epoch_times_s")),
            "peak_memory_mib": memory,
            "memory_source": source,
            "rss_growth_mib": _mib(m.get("rss_growth_bytes")),
            "compiled_step_mib": _mib(m.get("compiled_step_memory_bytes")),
            "first_step_loss": as_number(m.get("first_step_loss")),
            "final_loss": as_number(m.get("final_loss")),
            "val_accuracy": None if is_synthetic(r) else as_number(m.get("val_accuracy")),
            "val_loss": as_number(m.get("val_loss")),
            "param_count": m.get("param_count"),
            "train_gflop_per_image": _giga(m.get("train_flops_per_image")),
            "achieved_tflops": achieved,
            "peak_tflops": peak,
            "peak_fraction": achieved / peak if achieved is not None and peak else None,
            "ceiling_ratio": ceiling_ratio(calibration, plugin, kind, r.precision) if kind else None,
            "images_per_epoch": images,
            "cost_per_epoch": per_epoch,
            "cost_per_million_images": per_million,
            "currency": cost.get("currency", "") if per_million is not None else "",
            "compilation": flat_text(m.get("compilation", "")),
            "latency_source": flat_text(m.get("latency_source", "")),
            "loss_scaling": (r.applied or {}).get("loss_scaling", ""),
            "loss_scale_final": as_number(m.get("loss_scale_final")),
            "skipped_steps": m.get("skipped_steps"),
            "loss_scale_initial": as_number(m.get("loss_scale_initial")),
            "loss_scale_min": as_number(m.get("loss_scale_min")),
            "loss_scale_backoffs": m.get("loss_scale_backoffs"),
            "keep_fp32": ",".join(flat_text(n) for n in ((r.applied or {}).get("keep_fp32") or [])),
            "compute_dtype": (r.applied or {}).get("compute_dtype", ""),
            "fp8_matmul": (r.applied or {}).get("fp8_matmul", ""),
            "device": (r.device or {}).get("name", ""),
            "device_kind": kind,
            "framework_version": m.get("framework_version", ""),
            "keras_backend": flat_text(m.get("keras_backend", "")),
            "plugin": plugin,
            "environment": (r.config or {}).get("environment", ""),
            "interpreter": (r.environment or {}).get("interpreter", ""),
            "dataset": (r.config or {}).get("dataset", ""),
            "batch_size": (r.config or {}).get("batch_size"),
            "steps": (r.config or {}).get("steps"),
            "epochs": (r.config or {}).get("epochs"),
            "warmup": (r.config or {}).get("warmup"),
            "staged_input_mib": _mib(m.get("staged_input_bytes")),
            "energy_per_image_mj": _milli(m.get("energy_per_image_j")),
            "mean_power_w": as_number(m.get("mean_power_w")),
            "sm_clock_mhz_median": as_number(m.get("sm_clock_mhz_median")),
            "telemetry_source": flat_text(m.get("telemetry_source", "")),
            "window_throughput_cv": as_number(m.get("window_throughput_cv")),
            "timed_windows": m.get("timed_windows"),
            "load_avg_1m_before": as_number(m.get("load_avg_1m_before")),
            "load_avg_1m_after": as_number(m.get("load_avg_1m_after")),
            "other_cpu_cores": as_number(m.get("other_cpu_cores")),
            "cpu_freq_mhz_before": as_number(m.get("cpu_freq_mhz_before")),
            "cpu_freq_mhz_after": as_number(m.get("cpu_freq_mhz_after")),
            "machine_busy": any(is_busy_flag(f) for f in (m.get("measurement_flags") or [])),
            "target_accuracy": as_number(m.get("target_accuracy")),
            "target_reached": m.get("target_reached"),
            "time_to_target_s": as_number(m.get("time_to_target_s")),
            "steps_to_target": m.get("steps_to_target"),
            "epochs_to_target": as_number(m.get("epochs_to_target")),
            "best_val_accuracy": as_number(m.get("best_val_accuracy")),
            "eval_time_s": as_number(m.get("eval_time_s")),
            "measurement_flags": "; ".join(flat_text(f) for f in (m.get("measurement_flags") or [])),
            **{key: as_number(m.get(key)) for key in TOKEN_COLUMNS},  # token workloads only
        })
    columns = list(CELL_COLUMNS)
    added = added_figure_names(results)
    if added:  # a plugin's own figures: a column each, after the standard ones
        names = {name: column_name(name, CELL_COLUMNS) for name in added}
        for row, r in zip(rows, results, strict=True):
            row.update({names[k]: v for k, v in added_figures(r, added).items()})
        columns += list(names.values())
    frame = pd.DataFrame(rows, columns=columns)
    # A cell stored without a value (killed, never on a device, written before the sweep recorded it) takes its
    # row's one value, so it stands beside the cells that ran instead of in a row of its own: its row's device kind;
    # its workload's batch size; its row's mode (a mode sweep's cell named its mode in its key, read first,
    # mode_in_key).
    _fill_from_group(frame, "device_kind", ["workload", "framework"])
    _fill_from_group(frame, "batch_size", ["workload"])
    _fill_from_group(frame, "mode", ["workload", "framework", "device_kind", "devices"])
    return frame


def _fill_from_group(cells: pd.DataFrame, column: str, by: list[str]) -> None:
    """Give the cells that lack a value in ``column`` (empty text, or none) the one value the other cells of their
    group (the same values in ``by``) hold, where that group holds exactly one."""
    for _, group in cells.groupby(by, sort=False, dropna=False):
        values = group[column]
        missing = values.isna() | (values == "")
        known = set(values[~missing])
        if len(known) == 1:
            cells.loc[group.index[missing], column] = known.pop()


def mode_in_key(key: str) -> str:
    """The mode a mode sweep's cell key names (``torch/mnist_cnn/fp32/compiled/r0``), else ``""``."""
    parts = key.split("/")
    return parts[3] if len(parts) > 4 and parts[3] in MODES else ""


def device_label(kind: str, names: list[str]) -> str:
    """What a table row says about its device: ``gpu (NVIDIA A100)``, ``cpu``, or ``–`` (none reached)."""
    if kind == "gpu":
        named = sorted({n for n in names if n})
        return f"gpu ({', '.join(named)})" if named else "gpu"
    return kind or "–"


def _devices(result: CellResult) -> int:
    """The cell's device count (results stored before data parallelism ran on one)."""
    value = (result.config or {}).get("devices", 1)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _mib(value: Any) -> float | None:
    number = as_number(value)
    return None if number is None else number / MIB


def _giga(value: Any) -> float | None:
    number = as_number(value)
    return None if number is None else number / 1e9


def _milli(value: Any) -> float | None:
    number = as_number(value)
    return None if number is None else number * 1000.0


def _ms(seconds: Any) -> float | None:
    value = as_number(seconds)
    return None if value is None else value * 1000.0


def cell_seed(config: dict[str, Any]) -> int:
    """The cell's seed (0 where a stored config has none, as a cell without one ran)."""
    seed = config.get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
