"""Values read back from disk are data: checked before any report uses them.

``results.jsonl``, ``environment.json`` and the calibration cache are files a
crash, a full disk or another person may have changed.  These checks find
what would break a report (a number too large for a float, a list where text
belongs) and name it, so that the caller can skip the line or drop the entry
with a warning and write the report from the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# Largest magnitude a stored integer may have (far above any byte count or step count).
MAX_STORED_INT = 2**63
# Deepest nesting a stored value may have.
MAX_STORED_DEPTH = 64

# Operations a calibration measures; each maps a dtype to TFLOP/s.
MEASURED_OPS = ("matmul", "conv")
# Longest environment.json field a report reads (its text, as Python writes it: the package list of a big
# environment stays far below).
ENVIRONMENT_FIELD_CHARS = 200_000
# environment.json fields a report reads, with the JSON types they must have.
ENVIRONMENT_TYPES: dict[str, type[Any] | tuple[type[Any], ...]] = {
    "amp_suite_version": str, "python": str, "platform": str, "date": str, "cpu_model": str,
    "cpu_count": int, "cpu_flags": list, "gpus": list, "packages": dict, "git_commit": (str, type(None)),
    "config_file": str, "settings": dict, "preset": dict, "cost": dict, "calibration": dict, "incomplete": dict,
    "planned_cells": list, "environment_substituted": str,
}


def number_problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """Where in ``value`` a number is not finite or out of range (``metrics.peak_rss_bytes``), or None."""
    if depth > MAX_STORED_DEPTH:
        return f"{where or 'value'} is nested too deeply"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        return None if abs(value) <= MAX_STORED_INT else f"{where or 'value'} is out of range"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'value'} is not a finite number"
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        problem = number_problem(item, f"{where}.{key}" if where else str(key), depth + 1)
        if problem:
            return problem
    return None


def environment_problems(environment: dict[str, Any]) -> list[str]:
    """The fields of a stored environment record that a report cannot use, each with the reason."""
    problems: list[str] = []
    for name, kind in ENVIRONMENT_TYPES.items():
        if name not in environment:
            continue
        value = environment[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{name} (wrong type: {type(value).__name__})")
        elif name == "cpu_flags" and not all(isinstance(flag, str) for flag in value):
            problems.append(f"{name} (not a list of text)")
        elif name == "gpus" and not all(isinstance(gpu, dict) for gpu in value):
            problems.append(f"{name} (not a list of objects)")
        elif (problem := number_problem(value, name)) is not None:
            problems.append(problem)
        elif len(json_text := repr(value)) > ENVIRONMENT_FIELD_CHARS:
            problems.append(f"{name} (oversized: {len(json_text)} characters)")
    return problems


def clean_environment(environment: dict[str, Any]) -> list[str]:
    """Drop the fields of ``environment`` a report cannot use; returns what was dropped and why."""
    problems = environment_problems(environment)
    for problem in problems:
        environment.pop(problem.split(" ", 1)[0].split(".", 1)[0], None)
    return problems


def calibration_problem(data: Any) -> str | None:
    """Why a calibration (the cache file, or ``environment["calibration"]``) is unusable, or None.

    Expected: ``{"frameworks": {FRAMEWORK: {DEVICE_KIND: {OP: {DTYPE: TFLOPS}}}}}``
    with finite, non-negative figures (``sizes`` maps text to numbers).
    """
    if not isinstance(data, dict):
        return "not a JSON object"
    frameworks = data.get("frameworks")
    if not isinstance(frameworks, dict):
        return "no 'frameworks' object"
    for framework, kinds in frameworks.items():
        if not isinstance(kinds, dict):
            return f"frameworks.{framework} is not an object"
        for kind, ops in kinds.items():
            if not isinstance(ops, dict):
                return f"frameworks.{framework}.{kind} is not an object"
            for op, figures in ops.items():
                where = f"frameworks.{framework}.{kind}.{op}"
                if op not in MEASURED_OPS:
                    continue  # notes (kind, device, date, sizes, errors): the number check below covers them
                if not isinstance(figures, dict):
                    return f"{where} is not an object"
                for dtype, figure in figures.items():
                    if isinstance(figure, bool) or not isinstance(figure, (int, float)) \
                            or number_problem(figure) is not None or figure < 0:
                        return f"{where}.{dtype} is not a finite non-negative number"
    return number_problem(data)


# --- the metrics of one stored result ------------------------------------------------------------

# Longest stored name (framework, workload, precision, key): longer ones mark a line that holds no real cell.
NAME_CHARS = 200
# Longest text figure read back (the store cuts what it writes to 8192 characters).
TEXT_CHARS = 10_000
# Longest list of figures read back (per-step losses of a long run stay far below).
LIST_ITEMS = 1_000_000

# Metrics a report reads, by what they must hold.  A number may also be None (not measured) or the text of a
# non-finite float ("nan", "inf"), which is how the store writes a diverged figure.
FRACTION_METRICS = ("val_accuracy", "best_val_accuracy", "target_accuracy")
NONNEGATIVE_METRICS = (
    "throughput", "peak_rss_bytes", "peak_rss_bytes_max_rank", "device_peak_memory_bytes",
    "compiled_step_memory_bytes", "staged_input_bytes", "rss_growth_bytes", "param_count", "timed_steps",
    "timed_windows", "skipped_steps", "step_time_median_s", "step_time_p90_s", "step_time_std_s",
    "first_step_time_s", "warmup_time_s", "eval_time_s", "time_to_target_s", "steps_to_target",
    "epochs_to_target", "train_flops_per_image", "achieved_tflops", "energy_per_image_j", "mean_power_w",
    "sm_clock_mhz_median", "window_throughput_cv", "other_cpu_cores", "load_avg_1m_before", "load_avg_1m_after",
    "cpu_freq_mhz_before", "cpu_freq_mhz_after",
    # token workloads (language models)
    "tokens_per_s", "val_bits_per_char", "unigram_bits_per_char", "val_tokens", "context",
    # loss scaling (amp_fp16)
    "loss_scale_initial", "loss_scale_min", "loss_scale_backoffs", "loss_scale_points_dropped",
)
SIGNED_METRICS = ("final_loss", "first_step_loss", "val_loss", "loss_scale_final")
NUMBER_LIST_METRICS = ("window_throughputs", "epoch_times_s")
NUMBER_LISTS_METRICS = ("step_losses", "loss_scale_trajectory")
TEXT_METRICS = ("dataset_note", "compilation", "telemetry_source", "latency_source", "framework_version")
TEXT_LIST_METRICS = ("measurement_flags",)
FLAG_METRICS = ("dataset_substituted", "target_reached")


def _is_number(value: Any) -> bool:
    """A stored figure: a number (not a bool), None, or the text of a non-finite float."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return True
    if isinstance(value, str) and len(value) <= 10:
        try:
            return not math.isfinite(float(value))
        except ValueError:
            return False
    return False


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def metric_problem(name: str, value: Any) -> str | None:
    """Why the stored metric ``name`` cannot be used (``not a number: 'lots'``), or None when it can."""
    shown = _shown(value)
    if name in FRACTION_METRICS or name in NONNEGATIVE_METRICS or name in SIGNED_METRICS:
        if not _is_number(value):
            return f"not a number: {shown}"
        number = _finite(value)
        if number is not None and name in FRACTION_METRICS and not 0.0 <= number <= 1.0:
            return f"impossible value {shown} (a fraction from 0 to 1)"
        if number is not None and name in NONNEGATIVE_METRICS and number < 0:
            return f"impossible value {shown} (it cannot be negative)"
        return None
    if name in NUMBER_LIST_METRICS:
        if not isinstance(value, list) or len(value) > LIST_ITEMS or not all(map(_is_number, value)):
            return f"not a list of numbers: {shown}"
        return None
    if name in NUMBER_LISTS_METRICS:  # lists of numbers: one per epoch, or one [step, scale] point each
        if not isinstance(value, list) or len(value) > LIST_ITEMS or not all(
                isinstance(v, list) and len(v) <= LIST_ITEMS and all(map(_is_number, v)) for v in value):
            return f"not a list of lists of numbers: {shown}"
        return None
    if name in TEXT_LIST_METRICS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"not a list of text: {shown}"
        return None if sum(len(v) for v in value) <= TEXT_CHARS else f"oversized ({sum(map(len, value))} characters)"
    if name in FLAG_METRICS:
        return None if value is None or isinstance(value, bool) else f"not true or false: {shown}"
    if name in TEXT_METRICS and not isinstance(value, str) and value is not None:
        return f"not text: {shown}"
    if isinstance(value, str) and len(value) > TEXT_CHARS:
        return f"oversized ({len(value)} characters)"
    return None


def name_problem(data: dict[str, Any]) -> str | None:
    """Why a stored line's names cannot be a cell's (one longer than :data:`NAME_CHARS`), or None."""
    for name in ("key", "framework", "workload", "precision", "status"):
        value = data.get(name)
        if isinstance(value, str) and len(value) > NAME_CHARS:
            return f"field {name!r} is oversized ({len(value)} characters, at most {NAME_CHARS})"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


# Fields of a stored result's other objects that a report reads, by what they must hold.
SECTION_TEXT = {
    "config": ("dataset", "framework", "pool", "environment", "train_split", "val_split", "launcher", "coordinator"),
    "device": ("kind", "name"),
    "applied": ("loss_scaling", "compute_dtype"),
    "environment": ("interpreter", "prefix", "python"),
}
SECTION_COUNTS = {"config": ("batch_size", "devices", "steps", "epochs", "warmup", "nnodes", "node_rank"),
                  "device": ("count",)}


def section_problem(section: str, name: str, value: Any) -> str | None:
    """Why ``section.name`` of a stored result (``config.devices``) cannot be used, or None when it can."""
    if name in SECTION_TEXT.get(section, ()) and value is not None and not isinstance(value, str):
        return f"not text: {_shown(value)}"
    if name in SECTION_COUNTS.get(section, ()) and value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0):
        return f"not a count: {_shown(value)}"
    if isinstance(value, str) and len(value) > TEXT_CHARS:
        return f"oversized ({len(value)} characters)"
    return None
