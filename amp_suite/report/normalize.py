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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from amp_suite.calibration.ceiling import ceiling_ratio, datasheet_peaks, peak_tflops
from amp_suite.config.cost import cell_cost
from amp_suite.machine.noise import is_busy_flag
from amp_suite.precision import BASELINE, PRECISIONS
from amp_suite.records import CellResult
from amp_suite.report.added_figures import added_figure_names, added_figures, added_figures_lines, column_name
from amp_suite.report.curves import curve_lines
from amp_suite.report.intervals import Interval, format_ratio, paired_ratios, pooled_log_intervals
from amp_suite.report.marks import (
    EMULATED_MARK,
    NO_DIFFERENCE_MARK,
    NOISIER_MARK,
    TOO_WIDE,
    TOO_WIDE_MARK,
    ratio_text,
    too_wide,
)
from amp_suite.report.published import published_section
from amp_suite.report.seeds import add_accuracy_equivalence, margin_of, seeds_lines
from amp_suite.report.text import LINE_CHARS, REPORT_FIRST_LINE, markdown_cell, no_raw_html, one_line_text
from amp_suite.report.tokens import TOKEN_COLUMNS, dataset_line, token_section

if TYPE_CHECKING:
    from amp_suite.report.verdict import Verdict

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
    "skipped_steps", "compute_dtype", "fp8_matmul", "device", "device_kind", "framework_version", "keras_backend", "plugin",
    "environment", "interpreter", "label", "pool", "dataset",
    "batch_size", "steps", "epochs", "warmup", "mode_axis", "seed_axis", "gpu_busy_pct", "compile_time_s", "learning_rate",
    "learning_rate_rule", "staged_input_mib", "energy_per_image_mj", "mean_power_w",
    "sm_clock_mhz_median", "telemetry_source", "window_throughput_cv", "timed_windows", "load_avg_1m_before",
    "load_avg_1m_after", "other_cpu_cores", "cpu_freq_mhz_before", "cpu_freq_mhz_after", "machine_busy",
    "target_accuracy", "target_reached", "time_to_target_s", "steps_to_target", "epochs_to_target",
    "best_val_accuracy", "eval_time_s", "measurement_flags",
    *TOKEN_COLUMNS,
]
# Why synthetic data has no accuracy figure.
SYNTHETIC_ACCURACY_NOTE = ("Validation accuracy is n/a on synthetic data: its class-prototype images are "
                           "separable by design, so every precision scores about 100% and the figure "
                           "measures nothing about a real task. Use --dataset mnist (the default) for "
                           "real accuracies.")


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


def pooled_label(label: str, pool: str) -> str:
    """How tables name a cell's framework: its label, and the cluster pool it ran on (``torch on a100``)."""
    return f"{label} on {pool}" if pool else label


def flat_text(value: Any) -> str:
    """``value`` as text on one line (line breaks and runs of spaces become one space), bounded."""
    return one_line_text(str(value), LINE_CHARS)


def table_text(value: Any) -> str:
    """``value`` as one markdown table cell: on one line, bounded, ``|`` escaped, no raw HTML."""
    return markdown_cell(str(value))


def _total_seconds(values: Any) -> float | None:
    numbers = [_num(v) for v in values] if isinstance(values, list) else []
    return float(sum(n for n in numbers if n is not None)) if numbers else None


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


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
        throughput = _num(m.get("throughput"))
        achieved = _num(m.get("achieved_tflops"))
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
            "mode": r.mode or "",
            "mode_axis": bool((r.config or {}).get("mode")),
            "gpu_busy_pct": _num(m.get("gpu_utilization_pct_mean")),
            "compile_time_s": _num(m.get("compile_time_s")),
            "learning_rate": _num(m.get("learning_rate")),
            "learning_rate_rule": (r.config or {}).get("learning_rate_rule", "unchanged"),
            "devices": _devices(r),
            "repeat": r.repeat,
            "seed": _seed(r.config or {}),
            "seed_axis": bool((r.config or {}).get("seed_axis")),
            "status": r.status,
            "error": r.error,
            "throughput": _num(m.get("throughput")),
            "step_time_median_ms": _ms(m.get("step_time_median_s")),
            "step_time_p90_ms": _ms(m.get("step_time_p90_s")),
            "step_time_std_ms": _ms(m.get("step_time_std_s")),
            "first_step_time_s": _num(m.get("first_step_time_s")),
            "warmup_time_s": _num(m.get("warmup_time_s")),
            "timed_steps": m.get("timed_steps"),
            "epoch_time_s": _total_seconds(m.get("epoch_times_s")),
            "peak_memory_mib": memory,
            "memory_source": source,
            "rss_growth_mib": _mib(m.get("rss_growth_bytes")),
            "compiled_step_mib": _mib(m.get("compiled_step_memory_bytes")),
            "first_step_loss": _num(m.get("first_step_loss")),
            "final_loss": _num(m.get("final_loss")),
            "val_accuracy": None if is_synthetic(r) else _num(m.get("val_accuracy")),
            "val_loss": _num(m.get("val_loss")),
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
            "loss_scale_final": _num(m.get("loss_scale_final")),
            "skipped_steps": m.get("skipped_steps"),
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
            "mean_power_w": _num(m.get("mean_power_w")),
            "sm_clock_mhz_median": _num(m.get("sm_clock_mhz_median")),
            "telemetry_source": flat_text(m.get("telemetry_source", "")),
            "window_throughput_cv": _num(m.get("window_throughput_cv")),
            "timed_windows": m.get("timed_windows"),
            "load_avg_1m_before": _num(m.get("load_avg_1m_before")),
            "load_avg_1m_after": _num(m.get("load_avg_1m_after")),
            "other_cpu_cores": _num(m.get("other_cpu_cores")),
            "cpu_freq_mhz_before": _num(m.get("cpu_freq_mhz_before")),
            "cpu_freq_mhz_after": _num(m.get("cpu_freq_mhz_after")),
            "machine_busy": any(is_busy_flag(f) for f in (m.get("measurement_flags") or [])),
            "target_accuracy": _num(m.get("target_accuracy")),
            "target_reached": m.get("target_reached"),
            "time_to_target_s": _num(m.get("time_to_target_s")),
            "steps_to_target": m.get("steps_to_target"),
            "epochs_to_target": _num(m.get("epochs_to_target")),
            "best_val_accuracy": _num(m.get("best_val_accuracy")),
            "eval_time_s": _num(m.get("eval_time_s")),
            "measurement_flags": "; ".join(flat_text(f) for f in (m.get("measurement_flags") or [])),
            **{key: _num(m.get(key)) for key in TOKEN_COLUMNS},  # token workloads only
        })
    columns = list(CELL_COLUMNS)
    added = added_figure_names(results)
    if added:  # a plugin's own figures: a column each, after the standard ones
        names = {name: column_name(name, CELL_COLUMNS) for name in added}
        for row, r in zip(rows, results, strict=True):
            row.update({names[k]: v for k, v in added_figures(r, added).items()})
        columns += list(names.values())
    frame = pd.DataFrame(rows, columns=columns)
    _fill_device_kind(frame)
    _fill_batch_size(frame)
    return frame


def _fill_batch_size(cells: pd.DataFrame) -> None:
    """Give a cell stored without its configuration the batch size of its workload, where there is one."""
    for _, group in cells.groupby("workload", sort=False):
        sizes = {int(b) for b in group["batch_size"].dropna()}
        if len(sizes) == 1:
            cells.loc[group.index[group["batch_size"].isna()], "batch_size"] = sizes.pop()


def _fill_device_kind(cells: pd.DataFrame) -> None:
    """Give a cell that never reached a device (killed, unavailable) its row's one device kind."""
    for _, group in cells.groupby(["workload", "framework"], sort=False):
        kinds = {k for k in group["device_kind"] if k}
        if len(kinds) == 1:
            cells.loc[group.index[group["device_kind"] == ""], "device_kind"] = kinds.pop()


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
    number = _num(value)
    return None if number is None else number / MIB


def _giga(value: Any) -> float | None:
    number = _num(value)
    return None if number is None else number / 1e9


def _milli(value: Any) -> float | None:
    number = _num(value)
    return None if number is None else number * 1000.0


def _ms(seconds: Any) -> float | None:
    value = _num(seconds)
    return None if value is None else value * 1000.0


# A summary row's identity without its precision: AMP is compared with fp32 within it (the same mode and batch).
GROUP = ["workload", "framework", "device_kind", "devices", "mode", "batch_size"]

SUMMARY_COLUMNS = ["workload", "framework", "device_kind", "device", "devices", "mode", "batch_size", "precision",
                   "status", "ok_repeats",
                   "repeats", "throughput", "throughput_min", "throughput_max", "window_cv",
                   "speedup", "speedup_low", "speedup_high", "speedup_pairs", "speedup_over_tf32",
                   "speedup_over_tf32_low", "speedup_over_tf32_high", "peak_memory_mib", "memory_ratio",
                   "memory_ratio_low", "memory_ratio_high",
                   "energy_per_image_mj", "energy_ratio", "flagged", "final_loss",
                   "val_accuracy", "accuracy_delta", "achieved_tflops", "train_gflop_per_image", "peak_tflops",
                   "peak_fraction", "ceiling_ratio", "cost_per_epoch", "cost_per_million_images",
                   "cost_saving_per_million", "cost_saving_fraction", "scaling_speedup", "scaling_efficiency",
                   "speedup_over_base_mode", "base_mode", "gpu_busy_pct", "compile_time_s", "mode_axis", "emulated",
                   "error"]


def summary_frame(results: list[CellResult], environment: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per workload x framework x device kind x mode x batch size x precision, normalized to that fp32.

    Each AMP figure is over fp32 in the same mode and at the same batch size;
    ``speedup_over_base_mode`` is the throughput over the same precision in
    the framework's least compiled mode of the sweep (``base_mode``: eager for
    PyTorch).  A cell that ran out of memory keeps its row (status ``oom``).
    Figures are medians over the ``ok`` repeats.  ``status`` is ``ok`` when at
    least one repeat is ok, else the last repeat's status.  CPU and GPU runs of
    one framework are separate rows and never each other's baseline.
    ``cost_saving_*`` is fp32's cost per million images minus this precision's
    (positive: AMP is cheaper), in money and as a fraction of fp32's.
    """
    cells = results_frame(results, environment)
    if cells.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    rows = []
    cells["batch_size"] = cells["batch_size"].fillna(0).astype(int)
    for (workload, framework, kind, devices, mode, batch_size, precision), group in cells.groupby(
            [*GROUP, "precision"], sort=False):
        ok = group[group["status"] == "ok"]
        rows.append({
            "workload": workload, "framework": framework, "device_kind": kind, "devices": int(devices),
            "mode": mode, "batch_size": int(batch_size), "mode_axis": bool(group["mode_axis"].any()),
            "gpu_busy_pct": _median(ok["gpu_busy_pct"]) if len(ok) else math.nan,
            "compile_time_s": _median(ok["compile_time_s"]) if len(ok) else math.nan,
            "precision": precision, "device": device_label(kind, list(group["device"])),
            "status": "ok" if len(ok) else group["status"].iloc[-1],
            "ok_repeats": len(ok), "repeats": len(group),
            "throughput": _median(ok["throughput"]) if len(ok) else math.nan,
            "throughput_min": _extreme(ok["throughput"], min),
            "throughput_max": _extreme(ok["throughput"], max),
            "window_cv": _median(ok["window_throughput_cv"]) if len(ok) else math.nan,
            "peak_memory_mib": _median(ok["peak_memory_mib"]) if len(ok) else math.nan,
            "energy_per_image_mj": _median(ok["energy_per_image_mj"]) if len(ok) else math.nan,
            "flagged": bool((ok["measurement_flags"].fillna("") != "").any()) if len(ok) else False,
            # an emulated precision (fp8 without FP8 matmuls): its throughput is the emulation's, never a speed-up
            "emulated": bool((group["fp8_matmul"] == "emulated").any()),
            "final_loss": _median(ok["final_loss"]) if len(ok) else math.nan,
            "val_accuracy": _median(ok["val_accuracy"]) if len(ok) else math.nan,
            "achieved_tflops": _median(ok["achieved_tflops"]) if len(ok) else math.nan,
            "peak_tflops": _first(ok["peak_tflops"]),
            "peak_fraction": _median(ok["peak_fraction"]),
            "ceiling_ratio": _first(group["ceiling_ratio"]),
            "cost_per_epoch": _median(ok["cost_per_epoch"]),
            "cost_per_million_images": _median(ok["cost_per_million_images"]),
            "train_gflop_per_image": group["train_gflop_per_image"].dropna().iloc[0]
            if group["train_gflop_per_image"].notna().any() else math.nan,
            "error": "" if len(ok) else group["error"].iloc[-1],
        })
    summary = pd.DataFrame(rows)
    base = summary[summary["precision"] == BASELINE].set_index(GROUP)
    keys = list(zip(*(summary[column] for column in GROUP), strict=True))

    tf32 = summary[(summary["precision"] == "tf32") & (summary["status"] == "ok")].set_index(GROUP)

    def relative(column: str, how: str, to: pd.DataFrame = base) -> list[float]:
        out = []
        for key, value in zip(keys, summary[column], strict=True):
            ref = to[column].get(key, math.nan) if key in to.index else math.nan
            if how == "ratio":
                out.append(value / ref if ref and not math.isnan(ref) else math.nan)
            else:
                out.append(value - ref)
        return out

    summary["speedup"] = relative("throughput", "ratio")
    # On Ampere and newer, TF32 is what an untouched PyTorch convolution (and XLA's default) runs:
    # NVIDIA's DeepLearningExamples quote AMP against it, so both speed-ups are reported.
    summary["speedup_over_tf32"] = relative("throughput", "ratio", tf32)
    summary["memory_ratio"] = relative("peak_memory_mib", "ratio")
    _paired_intervals(summary, cells)
    summary["energy_ratio"] = relative("energy_per_image_mj", "ratio")
    summary["accuracy_delta"] = relative("val_accuracy", "difference")
    add_accuracy_equivalence(summary, cells, margin_of(environment))
    saving = [-d for d in relative("cost_per_million_images", "difference")]
    base_cost = [c + s for c, s in zip(summary["cost_per_million_images"], saving, strict=True)]
    summary["cost_saving_per_million"] = saving
    summary["cost_saving_fraction"] = [s / b if b and not math.isnan(b) else math.nan
                                       for s, b in zip(saving, base_cost, strict=True)]
    _over_base_mode(summary)
    one = summary[summary["devices"] == 1].set_index(["workload", "framework", "device_kind", "mode", "batch_size",
                                                      "precision"])
    scaling, efficiency = [], []
    for _, row in summary.iterrows():
        key = (row["workload"], row["framework"], row["device_kind"], row["mode"], row["batch_size"],
               row["precision"])
        ref = one["throughput"].get(key, math.nan) if key in one.index else math.nan
        ratio = row["throughput"] / ref if ref and not math.isnan(ref) else math.nan
        scaling.append(ratio)
        efficiency.append(ratio / row["devices"])
    summary["scaling_speedup"] = scaling
    summary["scaling_efficiency"] = efficiency
    _no_speedup_when_emulated(summary)
    return summary


# The figures of a summary row that compare its speed (or what follows from it) with another row's.
SPEED_RATIO_COLUMNS = ("speedup", "speedup_low", "speedup_high", "speedup_over_tf32", "speedup_over_tf32_low",
                       "speedup_over_tf32_high", "speedup_over_base_mode", "cost_saving_per_million",
                       "cost_saving_fraction", "energy_ratio")


def _no_speedup_when_emulated(summary: pd.DataFrame) -> None:
    """An emulated precision's rows (fp8 without FP8 matmuls) keep their throughput, marked, but no ratio of speed:
    every table, chart and verdict that reads a speed-up finds none (memory and accuracy are real and stay)."""
    emulated = summary["emulated"].fillna(False).astype(bool)
    for column in SPEED_RATIO_COLUMNS:
        if column in summary:
            summary.loc[emulated, column] = math.nan


def _over_base_mode(summary: pd.DataFrame) -> None:
    """``speedup_over_base_mode``: throughput over the same precision and batch in the framework's least compiled
    mode of the sweep (``base_mode``); NaN in that mode itself and where it has no ok row."""
    from amp_suite.modes import base_mode

    ratios, bases = [], []
    places = ["workload", "framework", "device_kind", "devices", "batch_size", "precision"]
    ok = summary[summary["status"] == "ok"]
    throughput = {tuple(row[c] for c in [*places, "mode"]): row["throughput"] for _, row in ok.iterrows()}
    modes: dict[tuple, list[str]] = {}
    for _, row in summary.iterrows():
        modes.setdefault((row["workload"], row["framework"], row["device_kind"]), []).append(row["mode"])
    for _, row in summary.iterrows():
        present = [m for m in modes[(row["workload"], row["framework"], row["device_kind"])] if m]
        base = base_mode(present) if present else ""
        bases.append(base)
        ref = throughput.get((*(row[c] for c in places), base), math.nan) if base else math.nan
        ratios.append(row["throughput"] / ref if row["mode"] != base and ref and not math.isnan(ref) else math.nan)
    summary["speedup_over_base_mode"] = ratios
    summary["base_mode"] = bases


def _seed(config: dict[str, Any]) -> int:
    """The cell's seed (0 where a stored config has none, as a cell without one ran)."""
    seed = config.get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def _per_repeat(cells: pd.DataFrame, column: str) -> dict[tuple, dict[tuple[int, int], float]]:
    """``{(workload, framework, device_kind, devices, mode, batch_size, precision): {(seed, repeat): figure}}`` of
    the ok cells: a seed's repeat pairs with the same seed's repeat of the reference."""
    out: dict[tuple, dict[tuple[int, int], float]] = {}
    ok = cells[cells["status"] == "ok"]
    for row in ok.itertuples():
        value = _num(getattr(row, column))
        if value is not None and not math.isnan(value):
            key = (row.workload, row.framework, row.device_kind, int(row.devices), row.mode, int(row.batch_size),
                   row.precision)
            out.setdefault(key, {})[(int(row.seed), int(row.repeat))] = value
    return out


def _paired_intervals(summary: pd.DataFrame, cells: pd.DataFrame) -> None:
    """Speed-up and memory-ratio intervals from the paired repeats (docs/measurement.md).

    Repeat ``r`` of a precision is divided by repeat ``r`` of the reference
    (fp32, or tf32) in the same framework, workload and device; with two or
    more pairs the ratio becomes the geometric mean of the paired ratios and
    gets its 95% t-interval on the log scale, the run-to-run noise pooled over
    every row of the same figure and device kind (a row noisier than the rest
    keeps its own interval: :func:`~amp_suite.report.intervals.pooled_log_intervals`).
    With fewer pairs the ratio of medians stays and there is no interval.
    """
    throughput = _per_repeat(cells, "throughput")
    memory = _per_repeat(cells, "peak_memory_mib")
    figures = (("speedup", BASELINE, throughput), ("speedup_over_tf32", "tf32", throughput),
               ("memory_ratio", BASELINE, memory))
    columns: dict[str, list[Any]] = {
        f"{figure}_{part}": [math.nan] * len(summary)
        for figure, _, _ in figures for part in ("low", "high")}
    columns["speedup_pairs"] = [0] * len(summary)
    columns["speedup_noisier"] = [False] * len(summary)
    for figure, reference, source in figures:
        groups: dict[str, list[tuple[int, list[float]]]] = {}  # device kind -> [(row position, ratios)]
        for position, (_, row) in enumerate(summary.iterrows()):
            if row["precision"] == reference or row["status"] != "ok":
                continue
            cell = (row["workload"], row["framework"], row["device_kind"], int(row["devices"]), row["mode"],
                    int(row["batch_size"]))
            ratios = paired_ratios(source.get((*cell, row["precision"]), {}), source.get((*cell, reference), {}))
            groups.setdefault(str(row["device_kind"]), []).append((position, ratios))
        for members in groups.values():
            intervals = pooled_log_intervals([ratios for _, ratios in members])
            for (position, _), interval in zip(members, intervals, strict=True):
                if figure == "speedup":
                    columns["speedup_pairs"][position] = interval.n
                    columns["speedup_noisier"][position] = interval.noisier
                if interval.known:
                    summary.iat[position, summary.columns.get_loc(figure)] = interval.value
                    columns[f"{figure}_low"][position] = interval.low
                    columns[f"{figure}_high"][position] = interval.high
    for name, values in columns.items():
        summary[name] = values


def speedup_interval(row: Any, prefix: str = "speedup") -> Interval:
    """The summary row's ratio ``prefix`` (speedup, speedup_over_tf32, memory_ratio) as an :class:`Interval`."""
    value = _num(row.get(prefix))
    low, high = _num(row.get(f"{prefix}_low")), _num(row.get(f"{prefix}_high"))
    return Interval(math.nan if value is None else value, math.nan if low is None else low,
                    math.nan if high is None else high)


def _extreme(column: pd.Series, how) -> float:
    values = pd.to_numeric(column, errors="coerce").dropna()
    return float(how(values)) if len(values) else math.nan


def _median(column: pd.Series) -> float:
    values = pd.to_numeric(column, errors="coerce").dropna()
    return float(values.median()) if len(values) else math.nan


def _first(column: pd.Series) -> float:
    values = pd.to_numeric(column, errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else math.nan


def _precision_order(precisions: list[str]) -> list[str]:
    known = [p for p in PRECISIONS if p in precisions]
    return known + [p for p in precisions if p not in known]


def shows_modes(summary: pd.DataFrame) -> bool:
    """Whether tables need a mode column: the sweep named modes, or one framework ran in several."""
    if summary.empty or "mode" not in summary:
        return False
    if "mode_axis" in summary and bool(summary["mode_axis"].fillna(False).astype(bool).any()):
        return True
    return bool((summary.groupby(["workload", "framework"])["mode"].nunique() > 1).any())


def shows_batches(summary: pd.DataFrame) -> bool:
    """Whether tables need a batch column: some workload ran at more than one batch size."""
    if summary.empty or "batch_size" not in summary:
        return False
    return bool((summary.groupby("workload")["batch_size"].nunique() > 1).any())


def cell_text(row: Any) -> str:
    """What a table shows for a row that is not ``ok``: its status; out of memory names the batch it tried."""
    if row["status"] == "oom" and _known(row.get("batch_size")) and int(row["batch_size"]) > 0:
        return f"oom at batch {int(row['batch_size'])}"
    return str(row["status"])


def _pivot(summary: pd.DataFrame, render) -> pd.DataFrame:
    """Rows workload x framework x device (x devices, when a cell ran on several; x mode and x batch size, when
    the sweep has those axes), a column per precision.

    Each cell is rendered by ``render(row)``.
    """
    precisions = _precision_order(list(dict.fromkeys(summary["precision"])))
    with_devices = bool((summary["devices"] != 1).any())
    with_modes, with_batches = shows_modes(summary), shows_batches(summary)
    table: dict[tuple[str, str, str, int, str, int], dict[str, str]] = {}
    labels: dict[tuple[str, str, str, int, str, int], str] = {}
    for _, row in ordered_summary(summary).iterrows():
        cell = render(row) if row["status"] == "ok" else cell_text(row)
        key = (row["workload"], row["framework"], row["device_kind"], int(row["devices"]), str(row["mode"]),
               int(row["batch_size"]))
        table.setdefault(key, {})[row["precision"]] = cell
        labels.setdefault(key, row["device"])
    records = [{"workload": table_text(w), "framework": table_text(f), "device": table_text(labels[(w, f, k, d, m, b)]),
                **({"devices": str(d)} if with_devices else {}),
                **({"mode": table_text(m or "–")} if with_modes else {}),
                **({"batch": str(b)} if with_batches else {}),
                **{table_text(p): table_text(cells.get(p, "not run")) for p in precisions}}
               for (w, f, k, d, m, b), cells in table.items()]
    return pd.DataFrame(records, columns=["workload", "framework", "device", *(["devices"] if with_devices else []),
                                          *(["mode"] if with_modes else []), *(["batch"] if with_batches else []),
                                          *(table_text(p) for p in precisions)])


def ordered_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Summary rows with each framework's modes (least compiled first) and batch sizes in ascending order,
    workloads and frameworks in the order they ran."""
    from amp_suite.modes import mode_order

    if summary.empty:
        return summary
    workloads = list(dict.fromkeys(summary["workload"]))
    frameworks = list(dict.fromkeys(summary["framework"]))
    modes = mode_order(list(dict.fromkeys(str(m) for m in summary["mode"])))
    keyed = summary.assign(_w=summary["workload"].map(workloads.index), _f=summary["framework"].map(frameworks.index),
                           _m=summary["mode"].map(lambda m: modes.index(str(m))))
    return keyed.sort_values(["_w", "_f", "device_kind", "devices", "_m", "batch_size"], kind="stable").drop(
        columns=["_w", "_f", "_m"])


def scaling_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows workload x framework x device x precision, a column per device count.

    Each cell: throughput, then the speed-up over the same workload,
    framework, device kind and precision on one device and the scaling
    efficiency ``throughput(N) / (N * throughput(1))``.  Empty when no cell
    ran on more than one device.
    """
    if summary.empty or not (summary["devices"] != 1).any():
        return pd.DataFrame()
    counts = sorted({int(d) for d in summary["devices"]})
    precisions = _precision_order(list(dict.fromkeys(summary["precision"])))
    with_modes, with_batches = shows_modes(summary), shows_batches(summary)
    table: dict[tuple[str, str, str, str, int, str], dict[int, str]] = {}
    labels: dict[tuple[str, str, str, str, int, str], str] = {}
    for _, row in ordered_summary(summary).iterrows():
        if row["status"] != "ok":
            cell = cell_text(row)
        else:
            cell = _fmt(row["throughput"], "{:,.0f}")
            if row["devices"] != 1 and not math.isnan(row["scaling_speedup"]):
                cell += f" ({row['scaling_speedup']:.2f}x, eff {row['scaling_efficiency'] * 100:.0f}%)"
        key = (row["workload"], row["framework"], row["device_kind"], str(row["mode"]), int(row["batch_size"]),
               row["precision"])
        table.setdefault(key, {})[int(row["devices"])] = cell
        labels.setdefault(key, row["device"])
    order = sorted(table, key=lambda k: ([key[:5] for key in table].index(k[:5]), precisions.index(k[5])))
    records = [{"workload": table_text(w), "framework": table_text(f), "device": table_text(labels[(w, f, k, m, b, p)]),
                **({"mode": table_text(m or "–")} if with_modes else {}),
                **({"batch": str(b)} if with_batches else {}),
                "precision": table_text(p),
                **{f"{n} device{'s' if n > 1 else ''}": table_text(table[(w, f, k, m, b, p)].get(n, "not run"))
                   for n in counts}} for (w, f, k, m, b, p) in order]
    return pd.DataFrame(records)


def interval_lines(summary: pd.DataFrame, environment: dict[str, Any] | None = None) -> list[str]:
    """What the throughput table's intervals mean, and which speed-ups have none."""
    amp = summary[(summary["precision"] != BASELINE) & (summary["status"] == "ok")]
    amp = amp[amp["speedup"].notna()] if "speedup" in amp else amp
    if amp.empty:
        return []
    with_interval = amp["speedup_low"].notna()
    lines = []
    if with_interval.any():
        lines.append("Speed-ups (and memory ratios) with two or more repeats show their 95% confidence interval, "
                     "`1.69x (1.55–1.80)`: a t-interval on the log ratios of paired repeats (repeat r of a "
                     "precision over repeat r of fp32 in the same framework), so its centre is the geometric "
                     "mean of the paired ratios; the run-to-run noise is pooled over every cell of the table, "
                     "as it is the machine's (docs/measurement.md). "
                     f"{NO_DIFFERENCE_MARK} marks a speed-up "
                     "whose interval contains 1.0: **no measurable difference** from fp32 on this machine.")
        wide = [row for _, row in amp.iterrows() if too_wide(speedup_interval(row))]
        if wide:
            names = ", ".join(f"{table_text(r['workload'])} / {table_text(r['framework'])} / "
                              f"{table_text(r['precision'])}" for r in wide)
            lines.append(f"{TOO_WIDE_MARK} marks a speed-up whose interval contains 1.0 but spans more than "
                         f"{TOO_WIDE:g} times ({names}): the repeats disagree too much to tell anything, a "
                         "difference or its absence; run it again on a quiet machine or with more repeats.")
    noisier = amp[amp["speedup_noisier"].fillna(False).astype(bool)] if "speedup_noisier" in amp else amp[:0]
    if not noisier.empty:
        names = ", ".join(f"{r.workload} / {r.framework} / {r.precision}" for r in noisier.itertuples())
        lines.append(f"{NOISIER_MARK} marks a speed-up whose repeats disagree far more than the rest of the "
                     f"sweep's ({names}): its noise is not pooled, its interval is its own, and it is not to be "
                     "trusted; run it again on a quiet machine or with more repeats.")
    if not with_interval.all():
        lines.append("Speed-ups without an interval come from a single repeat: they have no interval and cannot "
                     "tell a real difference from run-to-run noise (about ±12% between processes on a busy CPU). "
                     "Run with `--repeats 3` or `--repeats auto` for intervals.")
    auto = (environment or {}).get("auto_repeats")
    if isinstance(auto, dict) and auto.get("summary"):
        lines.append(f"`--repeats auto`: {flat_text(auto['summary'])}")
    return [line for text in lines for line in (text, "")]


# Marks a GPU cell whose GPU ran a kernel less than BOUND_BELOW_PCT % of the time (NVML utilization).
BOUND_MARK = "↯"
BOUND_BELOW_PCT = 50.0


def mode_lines(summary: pd.DataFrame) -> list[str]:
    """What the mode ratios, the GPU-busy figures and the ↯ mark mean, naming each launch- or input-bound cell
    and the modes that would help it."""
    from amp_suite.modes import LAUNCH_OVERHEAD_MODES, MODES

    if summary.empty:
        return []
    lines = []
    ok = summary[summary["status"] == "ok"]
    if "speedup_over_base_mode" in ok and ok["speedup_over_base_mode"].notna().any():
        lines.append("Each AMP speed-up is over fp32 in the same mode and at the same batch size; "
                     "'over eager' (or over a framework's least compiled mode of the sweep: Keras's graph, JAX's "
                     "compiled) divides by the same precision and batch in that mode. Compilation is kept out of "
                     "every throughput: it happens in the warm-up steps (compile time: the every-run table).")
    gpu = ok[(ok["device_kind"] == "gpu") & ok["gpu_busy_pct"].notna()] if "gpu_busy_pct" in ok else ok[:0]
    if not gpu.empty:
        lines.append("GPU % is the mean NVML utilization over the timed windows: the fraction of time the GPU ran "
                     "any kernel.")
        bound = gpu[gpu["gpu_busy_pct"] < BOUND_BELOW_PCT]
        if not bound.empty:
            names = []
            order = list(MODES)
            for _, row in ordered_summary(bound).iterrows():
                mode = str(row["mode"])
                rank = order.index(mode) if mode in order else -1
                helping = [m for m in LAUNCH_OVERHEAD_MODES if order.index(m) > rank]
                advice = (f"try {', '.join(helping)} (where the framework has them: `amp-suite list`) or a larger "
                          "batch" if helping else "try a larger batch")
                names.append(f"{table_text(row['workload'])} / {table_text(row['framework'])} / "
                             f"{table_text(mode or '–')} / batch {int(row['batch_size'])} / "
                             f"{table_text(row['precision'])} ({float(row['gpu_busy_pct']):.0f}%: {advice})")
            lines.append(f"{BOUND_MARK} marks a cell whose GPU was busy less than {BOUND_BELOW_PCT:.0f}% of the "
                         "time: the step is launch- or input-bound (the GPU waits on the host), so a faster "
                         "kernel, AMP's included, barely shortens it. " + "; ".join(names) + ".")
    return [line for text in lines for line in (text, "")]


def best_configuration_lines(summary: pd.DataFrame) -> list[str]:
    """One sentence per framework and workload: the fastest configuration found (mode, batch, precision) and its
    speed-up over fp32 in the framework's base mode at the workload's smallest batch of the sweep."""
    from amp_suite.modes import base_mode

    ok = summary[(summary["status"] == "ok") & summary["throughput"].notna()] if not summary.empty else summary
    if not ok.empty:  # an emulated precision's speed is the emulation's: never the best configuration
        ok = ok[~ok["emulated"].fillna(False).astype(bool)]
    if ok.empty:
        return []
    lines = []
    for (workload, framework, kind), group in ok.groupby(["workload", "framework", "device_kind"], sort=False):
        best = group.loc[group["throughput"].idxmax()]
        modes = [str(m) for m in group["mode"] if m]
        base = base_mode(modes) if modes else ""
        baseline = group[(group["precision"] == BASELINE) & (group["mode"] == base)]
        where = f"{table_text(framework)} on {table_text(workload)} ({kind})"
        config = ((f"mode {table_text(best['mode'])}, " if best["mode"] else "")
                  + f"batch {int(best['batch_size'])}, {table_text(best['precision'])}: "
                  f"{best['throughput']:,.0f} images/s")
        baseline_name = f"fp32 {base} baseline" if base else "fp32 baseline"
        if baseline.empty:
            lines.append(f"- {where}: best configuration found is {config} (no {baseline_name} cell to compare "
                         "with).")
            continue
        reference = baseline.sort_values("batch_size").iloc[0]
        lines.append(f"- {where}: best configuration found is {config}, "
                     f"{best['throughput'] / reference['throughput']:.2f}x the {baseline_name} "
                     f"at batch {int(reference['batch_size'])}.")
    return lines + [""]


def incomplete_lines(environment: dict[str, Any]) -> list[str]:
    """A warning for the report's header when the sweep stopped before every planned cell ran
    (``environment["incomplete"]``, written by the sweep that stopped; a later ``--resume`` drops it)."""
    info = environment.get("incomplete")
    if not isinstance(info, dict):
        return []
    keys = info.get("not_run")
    missing = [flat_text(key) for key in (keys if isinstance(keys, list) else []) if isinstance(key, str)]
    planned = info.get("planned")
    of = f" of {planned}" if isinstance(planned, int) and not isinstance(planned, bool) else ""
    reason = flat_text(info.get("reason") or "stopped")
    if not missing:
        return [f"> **Incomplete sweep:** {reason} after every planned cell ran; repeats that `--repeats auto` "
                "would have added did not run.", ""]
    shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
    return [f"> **Incomplete sweep:** {reason}; {len(missing)}{of} planned "
            f"cell{'' if len(missing) == 1 else 's'} did not run: {shown}. The tables hold "
            "only the cells that ran; the same command with `--resume` runs the rest.", ""]


def busy_lines(cells: pd.DataFrame) -> list[str]:
    """A warning for the report's header when cells ran on a busy machine."""
    if cells.empty or "machine_busy" not in cells:
        return []
    ok = cells[cells["status"] == "ok"]
    busy = ok[ok["machine_busy"].fillna(False).astype(bool)]
    if busy.empty:
        return []
    others = pd.to_numeric(busy["other_cpu_cores"], errors="coerce").dropna()
    load = f" (other processes used up to {others.max():.2f} cores)" if len(others) else ""
    return [f"> **Busy machine:** {len(busy)} of {len(ok)} cells ran while other processes competed for the "
            f"CPU{load}. Their throughput is likely low and noisy; they are marked ⚑ below. Run again on a "
            "quiet machine, or compare with care.", ""]


def _fmt(value: float, pattern: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else pattern.format(value)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def comparison_tables(summary: pd.DataFrame, environment: dict[str, Any] | None = None) -> dict[str, pd.DataFrame]:
    """The report's tables: each a row per workload x framework, a column per precision."""
    cost = (environment or {}).get("cost") or {}

    def throughput(row) -> str:
        text = _fmt(row["throughput"], "{:,.0f}") + (" ⚑" if row.get("flagged") else "")
        if row.get("emulated"):  # the emulation's speed: no ratio, which would read as a speed-up
            return f"{text} {EMULATED_MARK} (not a speed-up: no FP8 matmul on this device)"
        parts = []
        if row["precision"] != BASELINE and not math.isnan(row["speedup"]):
            over_tf32 = speedup_interval(row, "speedup_over_tf32")
            ceiling = row.get("ceiling_ratio")
            parts.append(f"{NOISIER_MARK + ' ' if row.get('speedup_noisier') else ''}"
                         f"{ratio_text(speedup_interval(row))}")
            if row["precision"] != "tf32" and _known(over_tf32.value):
                parts.append(f"{ratio_text(over_tf32)} over tf32")
            if _known(ceiling):
                parts.append(f"ceiling {ceiling:.2f}x")
        if _known(row.get("speedup_over_base_mode")):
            parts.append(f"{row['speedup_over_base_mode']:.2f}x over {row['base_mode']}")
        if parts:
            text += f" ({'; '.join(parts)})"
        if row.get("device_kind") == "gpu" and _known(row.get("gpu_busy_pct")):
            busy = float(row["gpu_busy_pct"])
            text += f", GPU {busy:.0f}%" + (f" {BOUND_MARK}" if busy < BOUND_BELOW_PCT else "")
        return text

    def energy(row) -> str:
        text = _fmt(row["energy_per_image_mj"], "{:.4g}")
        if row["precision"] != BASELINE and _known(row.get("energy_ratio")):
            text += f" ({row['energy_ratio']:.2f}x)"
        return text

    def memory(row) -> str:
        text = _fmt(row["peak_memory_mib"], "{:,.0f}")
        if row["precision"] != BASELINE and not math.isnan(row["memory_ratio"]):
            text += f" ({format_ratio(speedup_interval(row, 'memory_ratio'))})"
        return text

    def accuracy(row) -> str:
        if math.isnan(row["val_accuracy"]):
            return "n/a"  # synthetic data (see the note)
        text = _fmt(row["val_accuracy"] * 100, "{:.2f}%")
        if row["precision"] != BASELINE and not math.isnan(row["accuracy_delta"]):
            text += f" ({row['accuracy_delta'] * 100:+.2f} pt)"
        return text

    def achieved(row) -> str:
        text = _fmt(row["achieved_tflops"], "{:.3f}")
        fraction, peak = row.get("peak_fraction"), row.get("peak_tflops")
        if _known(fraction) and _known(peak):
            text += f" ({fraction * 100:.1f}% of {peak:.3g})"
        return text

    def money(row) -> str:
        per_epoch, per_million = row.get("cost_per_epoch"), row.get("cost_per_million_images")
        if not _known(per_million):
            return "–"
        text = (f"{per_epoch:.4g} / " if _known(per_epoch) else "– / ") + f"{per_million:.4g}"
        saving, fraction = row.get("cost_saving_per_million"), row.get("cost_saving_fraction")
        if row["precision"] != BASELINE and _known(saving) and _known(fraction):
            text += f" ({'saves' if saving >= 0 else 'costs'} {abs(saving):.4g}, {abs(fraction) * 100:.0f}%"
            text += " less)" if saving >= 0 else " more)"
        return text

    has_tf32 = bool(((summary["precision"] == "tf32") & (summary["status"] == "ok")).any())
    has_modes = bool(summary["speedup_over_base_mode"].notna().any()) if "speedup_over_base_mode" in summary else False
    has_busy = bool(((summary["device_kind"] == "gpu") & summary["gpu_busy_pct"].notna()).any()) \
        if "gpu_busy_pct" in summary else False
    tables = {
        "Throughput, images/s (speed-up over fp32" + (" in the same mode" if has_modes else "")
        + ("; over tf32" if has_tf32 else "") + ("; over the base mode" if has_modes else "") + ")"
        + ("; GPU busy %" if has_busy else ""):
            _pivot(summary, throughput),
        "Peak memory, MiB (ratio to fp32)": _pivot(summary, memory),
        "Validation accuracy (difference from fp32)": _pivot(summary, accuracy),
        "Final training loss": _pivot(summary, lambda row: _fmt(row["final_loss"], "{:.4f}")),
        "Achieved training TFLOP/s (% of the measured peak of the precision's dtype, TFLOP/s)":
            _pivot(summary, achieved),
    }
    if summary["energy_per_image_mj"].notna().any():
        tables["Energy per training image, mJ (ratio to fp32)"] = _pivot(summary, energy)
    if cost:
        tables[f"Cost in {cost.get('currency', '')} at {cost['price_per_hour']:g} per hour: per epoch / per "
               "million training images (AMP's saving over fp32)"] = _pivot(summary, money)
    return tables


def memory_noise_lines(summary: pd.DataFrame) -> list[str]:
    """The peak-memory figure's own noise: fp32 and tf32 keep the same tensors in float32, so what separates
    their peaks is the libraries' workspace and algorithm choices, not precision.  On an H100 (2026-11-26)
    PyTorch's ResNet-18 peaked at 916 MiB in fp32 and 758 MiB in tf32, JAX's at 803 and 701 MiB.
    """
    ok = summary[(summary["status"] == "ok") & summary["peak_memory_mib"].notna()]
    parts = []
    for (workload, framework, _kind), group in ok.groupby(["workload", "framework", "device_kind"], sort=False):
        peaks = {row["precision"]: row["peak_memory_mib"] for _, row in group.iterrows()}
        fp32, tf32 = peaks.get(BASELINE), peaks.get("tf32")
        if fp32 is not None and tf32 is not None and _known(fp32) and _known(tf32) and fp32 > 0:
            parts.append(f"{table_text(framework)} {table_text(workload)}: {abs(tf32 - fp32) / fp32 * 100:.0f}% "
                         f"({fp32:,.0f} vs {tf32:,.0f} MiB)")
    if not parts:
        return []
    return ["fp32 and tf32 keep the same tensors in float32, so the gap between their peaks is this figure's noise "
            "(the libraries' workspace and algorithm choices), not a saving: " + "; ".join(parts)
            + ". A memory ratio of an AMP precision within that gap is no measured difference.", ""]


TIME_TO_TARGET_NOTE = (
    "Training time (timed like every training step, validation excluded), optimizer steps and epochs until the "
    "validation accuracy first reached the target; the validation runs at every evaluation point (each epoch's "
    "end, or every `eval_every` steps) outside the training clock, and its own time is the last column. "
    "Medians over the repeats that reached the target. The ratio is this precision's time to target over "
    "fp32's in the same framework (below 1: AMP gets there sooner). \"not reached\" gives the best "
    "accuracy seen.")


def time_to_target_table(summary: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Rows workload x framework x device x precision of the cells that had a target accuracy."""
    if cells.empty or "target_accuracy" not in cells:
        return pd.DataFrame()
    ok = cells[(cells["status"] == "ok") & cells["target_accuracy"].notna()]
    if ok.empty:
        return pd.DataFrame()
    ok = ok.assign(batch_size=ok["batch_size"].fillna(0).astype(int))
    with_modes, with_batches = shows_modes(ok), shows_batches(ok)
    keys = ["workload", "framework", "device_kind", "devices", "mode", "batch_size", "precision"]
    medians: dict[tuple, float] = {}
    rows = []
    for key, group in ok.groupby(keys, sort=False):
        reached = group[group["target_reached"].fillna(False).astype(bool)]
        medians[key] = _median(reached["time_to_target_s"]) if len(reached) else math.nan
    order = {p: i for i, p in enumerate(_precision_order(list(dict.fromkeys(ok["precision"]))))}
    for key, group in sorted(ok.groupby(keys, sort=False), key=lambda kv: (kv[0][:6], order.get(kv[0][6], 99))):
        workload, framework, kind, devices, mode, batch, precision = key
        reached = group[group["target_reached"].fillna(False).astype(bool)]
        target = _first(group["target_accuracy"])
        if len(reached):
            time = _fmt(medians[key], "{:.3g} s")
            steps = _fmt(_median(reached["steps_to_target"]), "{:,.0f}")
            epochs = _fmt(_median(reached["epochs_to_target"]), "{:.2f}")
            state = f"{len(reached)} of {len(group)} repeats"
        else:
            time, steps, epochs = "not reached", "–", "–"
            state = f"not reached: best {_median(group['best_val_accuracy']) * 100:.2f}%" \
                if _known(_median(group["best_val_accuracy"])) else "not reached"
        base = medians.get((workload, framework, kind, devices, mode, batch, BASELINE), math.nan)
        ratio = medians[key] / base if precision != BASELINE and _known(base) and base > 0 else math.nan
        rows.append({"workload": table_text(workload), "framework": table_text(framework),
                     "device": table_text(device_label(kind, list(group["device"]))),
                     **({"mode": table_text(mode or "–")} if with_modes else {}),
                     **({"batch": str(batch)} if with_batches else {}),
                     "precision": table_text(precision), "target": f"{target * 100:.2f}%",
                     "time to target": time, "steps": steps, "epochs": epochs, "reached": table_text(state),
                     "ratio to fp32": _fmt(ratio, "{:.2f}x"),
                     "evaluation time": _fmt(_median(group["eval_time_s"]), "{:.3g} s")})
    return pd.DataFrame(rows)


def ceiling_lines(environment: dict[str, Any], cells: pd.DataFrame) -> list[str]:
    """The measured peaks the report compares with, and datasheet peaks of known GPUs."""
    calibration = environment.get("calibration")
    if not calibration:
        return ["No calibration of this machine: run `amp-suite calibrate`, then `amp-suite report DIR`, "
                "to see each speed-up beside its ceiling and each TFLOP/s as a fraction of the peak.", ""]
    lines = ["Peak TFLOP/s measured by `amp-suite calibrate` (the larger of a square matmul and a 3x3 "
             "convolution, 2 FLOPs per multiply-add), per framework and device:", ""]
    for framework, devices in sorted((calibration.get("frameworks") or {}).items()):
        for kind, entry in sorted(devices.items()):
            peaks = []
            for dtype in ("fp32", "tf32", "fp16", "bf16"):
                values = [v for v in ((entry.get(op) or {}).get(dtype) for op in ("matmul", "conv")) if v]
                if values:
                    peaks.append(f"{dtype} {max(values):.3g}")
            lines.append(f"- {framework} {entry.get('version', '')} on {kind} ({entry.get('device', '')}): "
                         + ", ".join(peaks))
    for gpu in environment.get("gpus") or []:
        sheet = datasheet_peaks(gpu.get("name", ""))
        if sheet:
            lines.append(f"- datasheet of {gpu['name']} (dense): "
                         + ", ".join(f"{k} {v:g}" for k, v in sheet.items()))
    return lines + [""]


def _gpu_text(gpu: dict[str, Any]) -> str:
    """One GPU of the host record: name, driver, memory, compute capability, max clocks, power limit."""
    parts = [f"driver {gpu.get('driver') or '?'}", gpu.get("memory") or "",
             f"sm {gpu['compute_capability']}" if gpu.get("compute_capability") else ""]
    if gpu.get("sm_clock_max_mhz") is not None:
        parts.append(f"max clocks {gpu['sm_clock_max_mhz']:g} MHz sm"
                     + (f" / {gpu['memory_clock_max_mhz']:g} MHz memory"
                        if gpu.get("memory_clock_max_mhz") is not None else ""))
    if gpu.get("power_limit_w") is not None:
        parts.append(f"power limit {gpu['power_limit_w']:g} W")
    return f"{gpu.get('name', '?')} ({', '.join(p for p in parts if p)})"


def runtime_lines(results: list[CellResult]) -> list[str]:
    """CUDA runtime and cuDNN each framework ran with, from the workers' records."""
    seen: dict[str, set[str]] = {}
    for r in results:
        env = r.environment or {}
        if env.get("cuda_runtime_version") or env.get("cudnn_version"):
            seen.setdefault(r.framework, set()).add(
                f"CUDA {env.get('cuda_runtime_version') or '?'}, cuDNN {env.get('cudnn_version') or '?'}")
    loaded: dict[str, set[str]] = {}
    for r in results:
        libraries = (r.environment or {}).get("loaded_libraries") or {}
        names = [f"{name} {libraries[name]}" for name in ("cudart", "cudnn", "cublas", "cublasLt", "nccl")
                 if libraries.get(name)]
        if names:
            loaded.setdefault(r.framework, set()).add(", ".join(names))
    if not seen:
        return ["- CUDA runtime / cuDNN: none used (no run reached a CUDA device)"]
    lines = ["- CUDA runtime / cuDNN: " + "; ".join(f"{f} {' / '.join(sorted(v))}" for f, v in seen.items())]
    if loaded:
        lines.append("- CUDA libraries as loaded by the workers (from /proc/self/maps): "
                     + "; ".join(f"{f}: {' / '.join(sorted(v))}" for f, v in loaded.items()))
    return lines


def environment_lines(environment: dict[str, Any]) -> list[str]:
    packages = environment.get("packages", {})
    gpus = environment.get("gpus") or []
    lines = [
        f"- amp-suite {environment.get('amp_suite_version', '?')}"
        + (f", commit {environment['git_commit']}" if environment.get("git_commit") else ""),
        f"- date: {environment.get('date', '?')}",
        f"- Python {environment.get('python', '?')} on {environment.get('platform', '?')}",
        f"- CPU: {environment.get('cpu_model', '?')}, {environment.get('cpu_count', '?')} logical cores;"
        f" flags: {', '.join(environment.get('cpu_flags', [])) or 'none of interest'}",
        "- GPU: " + ("; ".join(_gpu_text(g) for g in gpus) if gpus else "none"),
        "- packages: " + ", ".join(f"{k} {v}" for k, v in packages.items()),
    ]
    settings = environment.get("settings")
    if settings:
        lines.append(
            f"- sweep: {settings.get('steps')} steps per epoch at most, {settings.get('epochs')} epoch(s), "
            f"warm-up {settings.get('warmup')} steps, batch size "
            f"{settings.get('batch_size') or 'per workload'}, {settings.get('repeats')} repeat(s), "
            f"{_seeds_text(settings)}, device {settings.get('device')}"
            + (f", config {environment['config_file']}" if environment.get("config_file") else "")
        )
    preset = environment.get("preset")
    if isinstance(preset, dict) and preset.get("name"):
        lines.append(f"- preset: {preset['name']} ({preset.get('source', '?')}); flags given on the command line: "
                     + (", ".join(preset.get("command_line") or {}) or "none"))
    return [flat_text(line) for line in lines]  # stored text: one line each, bounded


def _seeds_text(settings: dict[str, Any]) -> str:
    """``seed 0``, or ``seeds 0, 1, 2`` for a sweep with a seed axis (``--seeds``)."""
    seeds = settings.get("seeds")
    if isinstance(seeds, (list, tuple)) and seeds:
        if len(seeds) > 3 and list(seeds) == list(range(len(seeds))):
            return f"{len(seeds)} seeds, 0 to {len(seeds) - 1}"
        return "seeds " + ", ".join(str(s) for s in seeds[:20]) + (", ..." if len(seeds) > 20 else "")
    return f"seed {settings.get('seed')}"


def methodology_lines(environment: dict[str, Any]) -> list[str]:
    """How every figure of the report is measured: the paragraph that follows the tables."""
    return [
        "Throughput is steady-state training images per second (warm-up steps excluded). "
        "Peak memory on a GPU is the training step's device memory without the staged input batches "
        "(PyTorch, and Keras on TensorFlow or PyTorch: the allocator's peak after warm-up, less the bytes of the "
        "largest window's batches; JAX and Keras on JAX, whose peak cannot be reset: XLA's memory analysis of the "
        "compiled step, less its batch); on a CPU it is the worker process's peak resident memory. Latency (the every-run table's "
        "step times) is single steps each waited for on the host, in every framework. Energy, where a "
        "table shows it, is the GPU's energy counter (NVML) or the CPU package's (RAPL) over the timed "
        "windows, divided by the images trained in them. Figures are medians over ok repeats; every ratio "
        "compares with the same framework's fp32 run of the same workload. Training FLOPs per "
        "image are three times the forward pass's convolution and dense multiply-adds (2 FLOPs "
        "each); achieved TFLOP/s is throughput times that.",
        "",
    ] + cost_method_lines(environment)


def cost_method_lines(environment: dict[str, Any]) -> list[str]:
    """How the cost columns are computed, when the sweep has a price."""
    cost = environment.get("cost") or {}
    if not cost:
        return []
    return [f"Cost at {cost['price_per_hour']:g} {cost.get('currency', '')} per hour, from steady-state "
            "throughput (warm-up excluded): per epoch = images per epoch / images/s x price / 3600; per "
            "million training images = 10^6 / images/s x price / 3600.", ""]


def sweep_verdict(results: list[CellResult], environment: dict[str, Any] | None = None) -> Verdict:
    """The verdict of ``results`` (:mod:`amp_suite.report.verdict`): what the terminal prints after a sweep."""
    from amp_suite.report.verdict import build_verdict

    return build_verdict(summary_frame(results, environment), results_frame(results, environment))


def render_markdown(results: list[CellResult], environment: dict[str, Any],
                    sections: list[tuple[str, str]] | tuple = ()) -> str:
    """The whole ``report.md``; ``sections`` are other plugins' ``(title, markdown)`` sections."""
    summary = summary_frame(results, environment)
    cells = results_frame(results, environment)
    from amp_suite.report.applied import applied_lines
    from amp_suite.report.every_run import every_run_lines
    from amp_suite.report.keras_backends import KERAS_COST_NOTE, backend_lines, keras_cost_table
    from amp_suite.report.variants import VARIANT_NOTE, variant_table
    from amp_suite.report.variants import environment_lines as variant_environment_lines
    from amp_suite.report.verdict import build_verdict, markdown_lines

    out = [REPORT_FIRST_LINE, "", "## Verdict", "", *markdown_lines(build_verdict(summary, cells), table_text),
           "## Environment", "", *environment_lines(environment),
           *runtime_lines(results), *variant_environment_lines(cells), *backend_lines(cells), ""]
    if not cells.empty:
        devices = sorted({device_label(k, [n])
                          for k, n in zip(cells["device_kind"], cells["device"], strict=True) if k})
        out += [f"- devices used: {', '.join(devices) or 'none reached'}",
                f"- dataset: {dataset_line(cells)}", ""]
        notes = sorted({(r.metrics or {}).get("dataset_note", "") for r in results} - {""})
        out += [f"- data: {n}" for n in notes] + ([""] if notes else [])
        if any((r.metrics or {}).get("dataset_substituted") for r in results):
            out += ["> **Data substitution:** synthetic data stood in for a dataset that could not be had "
                    "(see the data lines above). Accuracy figures do not describe the real dataset.", ""]
        if any(is_synthetic(r) for r in results if r.status == "ok"):
            out += [f"> {SYNTHETIC_ACCURACY_NOTE}", ""]
    out += incomplete_lines(environment) + busy_lines(cells)
    out += ["## Hardware ceiling", "", *ceiling_lines(environment, cells),
            "Beside each speed-up, its ceiling is the measured peak of the AMP dtype over the fp32 peak "
            "(the speed-up a compute-bound model could reach); beside each achieved TFLOP/s, the fraction of "
            "its dtype's peak.", ""]
    for title, table in comparison_tables(summary, environment).items():
        out += [f"## {title}", "", table.to_markdown(index=False, disable_numparse=True) if not table.empty else "_no results_", ""]
        if title.startswith("Throughput"):
            out += interval_lines(summary, environment) + mode_lines(summary)
            best = best_configuration_lines(summary)
            if best:
                out += ["Best configuration per framework (fastest mode, batch and precision of the sweep):", "",
                        *best]
        if title.startswith("Peak memory"):
            out += memory_noise_lines(summary)
    from amp_suite.report.cross_pool import CROSS_POOL_NOTE, cross_pool_table, pool_lines

    pooled = cross_pool_table(summary, cells, environment)
    if not pooled.empty:
        out += ["## Across pools (images/s, speed-up over fp32 on the same pool; ceiling; cost)", "",
                CROSS_POOL_NOTE, "", pooled.to_markdown(index=False, disable_numparse=True), "",
                *pool_lines(environment), ""]
    variants = variant_table(summary, cells)
    if not variants.empty:
        out += ["## Framework variants (each against the first of its framework)", "", VARIANT_NOTE, "",
                variants.to_markdown(index=False, disable_numparse=True), ""]
    keras_cost = keras_cost_table(summary, cells)
    if not keras_cost.empty:
        out += ["## Keras against its backend's own framework (the cost of the Keras layer)", "",
                KERAS_COST_NOTE, "", keras_cost.to_markdown(index=False, disable_numparse=True), ""]
    out += token_section(cells)
    target = time_to_target_table(summary, cells)
    if not target.empty:
        out += ["## Time to target accuracy", "", TIME_TO_TARGET_NOTE, "",
                target.to_markdown(index=False, disable_numparse=True), ""]
    out += seeds_lines(cells, margin_of(environment), table_text)
    out += curve_lines(results, table_text)
    flagged = cells[(cells["status"] == "ok") & (cells["measurement_flags"].fillna("") != "")]
    if not flagged.empty:
        out += ["## Measurement flags", "",
                "⚑ in the throughput table: a cell whose timing is not to be trusted as it stands, for the "
                "reasons below (docs/measurement.md).", ""]
        out += [flat_text(f"- {r.workload} / {r.framework} / {r.precision}"
                          + (f" / {r.devices} devices" if r.devices != 1 else "")
                          + (f" / seed {r.seed}" if r.seed_axis else "")
                          + f" / repeat {r.repeat}: {r.measurement_flags}") for r in flagged.itertuples()]
        out.append("")
    published = published_section(summary, cells, environment,
                                  substituted=any((r.metrics or {}).get("dataset_substituted") for r in results))
    if published is not None:
        out += [f"## {flat_text(published[0])}", "", published[1], ""]
    for title, body in sections:
        out += [f"## {flat_text(title)}", "", body, ""]
    scaling = scaling_table(summary)
    if not scaling.empty:
        out += ["## Scaling over devices, images/s (speed-up over 1 device, efficiency)", "",
                "Data parallel: the workload's batch is the global batch, split evenly over the devices. "
                "Throughput is global samples over the slowest process's window time; efficiency is "
                "throughput(N) / (N x throughput(1)) for the same workload, framework, device kind and "
                "precision. Devices that share a machine's cores (logical CPU devices, one process per core) "
                "compete for them: read the efficiency as measured, not as a property of the framework.", "",
                scaling.to_markdown(index=False, disable_numparse=True), ""]
    out += ["## What ran", "", *(applied_lines(results) or ["_no cell recorded the precision it applied_", ""])]
    added = added_figures_lines(results)
    if added:
        out += ["## Figures added by plugins", "", *added]
    out += ["## How the figures were measured", "", *methodology_lines(environment)]
    out += ["## Every run", "", *every_run_lines(cells)]
    failed = cells[~cells["status"].isin(["ok"])]
    if not failed.empty:
        out += ["## Runs without figures", ""]
        out += [flat_text(f"- {r.workload} / {r.framework} / {r.precision}"
                          + (f" / {r.devices} devices" if r.devices != 1 else "") + f" / repeat {r.repeat}: **{r.status}**"
                          f" — {r.error or 'no message'}") for r in failed.itertuples()]
        out.append("")
    return no_raw_html("\n".join(out))
