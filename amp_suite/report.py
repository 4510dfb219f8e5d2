"""Normalizes every run into one comparison: pandas frames and a markdown report.

Each figure is put beside the same framework's ``fp32`` figure on the same
workload and device count, so a reader sees what AMP buys *in that
framework*: throughput speed-up, peak-memory ratio and the accuracy
difference.  Data-parallel cells add a scaling table: the speed-up over the
same framework, precision and workload on one device, and the scaling
efficiency ``throughput(N) / (N * throughput(1))``.  Repeats are folded by
their median; failed cells keep their status and are never dropped.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from amp_suite.precision import BASELINE, PRECISIONS
from amp_suite.records import CellResult

MIB = 1024 * 1024

# Columns of the per-cell frame (results.csv), in order.
CELL_COLUMNS = [
    "workload", "framework", "precision", "repeat", "status", "devices", "error",
    "throughput", "step_time_median_ms", "step_time_p90_ms", "step_time_std_ms",
    "first_step_time_s", "warmup_time_s", "timed_steps", "epoch_time_s",
    "peak_memory_mib", "memory_source", "first_step_loss", "final_loss",
    "val_accuracy", "val_loss", "param_count", "train_gflop_per_image", "achieved_tflops", "compilation",
    "latency_source", "loss_scaling", "loss_scale_final",
    "skipped_steps", "compute_dtype", "device", "framework_version", "dataset",
    "batch_size", "steps", "epochs", "warmup",
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


def flat_text(value: Any) -> str:
    """``value`` as text on one line (line breaks and runs of spaces become one space)."""
    return " ".join(str(value).split())


def table_text(value: Any) -> str:
    """``value`` as one markdown table cell: on one line, ``|`` escaped."""
    return flat_text(value).replace("|", "\\|")


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


def results_frame(results: list[CellResult]) -> pd.DataFrame:
    """One row per cell with the figures a reader compares."""
    rows = []
    for r in results:
        m = r.metrics or {}
        memory, source = _peak_memory(m)
        rows.append({
            "workload": r.workload,
            "framework": r.framework,
            "precision": r.precision,
            "devices": _devices(r),
            "repeat": r.repeat,
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
            "first_step_loss": _num(m.get("first_step_loss")),
            "final_loss": _num(m.get("final_loss")),
            "val_accuracy": _num(m.get("val_accuracy")),
            "val_loss": _num(m.get("val_loss")),
            "param_count": m.get("param_count"),
            "train_gflop_per_image": _giga(m.get("train_flops_per_image")),
            "achieved_tflops": _num(m.get("achieved_tflops")),
            "compilation": flat_text(m.get("compilation", "")),
            "latency_source": flat_text(m.get("latency_source", "")),
            "loss_scaling": (r.applied or {}).get("loss_scaling", ""),
            "loss_scale_final": _num(m.get("loss_scale_final")),
            "skipped_steps": m.get("skipped_steps"),
            "compute_dtype": (r.applied or {}).get("compute_dtype", ""),
            "device": (r.device or {}).get("name", ""),
            "framework_version": m.get("framework_version", ""),
            "dataset": (r.config or {}).get("dataset", ""),
            "batch_size": (r.config or {}).get("batch_size"),
            "steps": (r.config or {}).get("steps"),
            "epochs": (r.config or {}).get("epochs"),
            "warmup": (r.config or {}).get("warmup"),
        })
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def _devices(result: CellResult) -> int:
    """The cell's device count (results stored before data parallelism ran on one)."""
    value = (result.config or {}).get("devices", 1)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _giga(value: Any) -> float | None:
    number = _num(value)
    return None if number is None else number / 1e9


def _ms(seconds: Any) -> float | None:
    value = _num(seconds)
    return None if value is None else value * 1000.0


def summary_frame(results: list[CellResult]) -> pd.DataFrame:
    """One row per workload x framework x precision, normalized to that framework's fp32.

    Figures are medians over the ``ok`` repeats.  ``status`` is ``ok`` when at
    least one repeat is ok, else the last repeat's status.
    """
    cells = results_frame(results)
    if cells.empty:
        return pd.DataFrame(columns=["workload", "framework", "precision", "devices", "status", "ok_repeats",
                                     "throughput", "speedup", "peak_memory_mib", "memory_ratio",
                                     "final_loss", "val_accuracy", "accuracy_delta", "achieved_tflops",
                                     "train_gflop_per_image", "error"])
    rows = []
    for (workload, framework, precision, devices), group in cells.groupby(
            ["workload", "framework", "precision", "devices"], sort=False):
        ok = group[group["status"] == "ok"]
        rows.append({
            "workload": workload, "framework": framework, "precision": precision, "devices": int(devices),
            "status": "ok" if len(ok) else group["status"].iloc[-1],
            "ok_repeats": len(ok), "repeats": len(group),
            "throughput": ok["throughput"].median() if len(ok) else math.nan,
            "peak_memory_mib": ok["peak_memory_mib"].median() if len(ok) else math.nan,
            "final_loss": ok["final_loss"].median() if len(ok) else math.nan,
            "val_accuracy": ok["val_accuracy"].median() if len(ok) else math.nan,
            "achieved_tflops": ok["achieved_tflops"].median() if len(ok) else math.nan,
            "train_gflop_per_image": group["train_gflop_per_image"].dropna().iloc[0]
            if group["train_gflop_per_image"].notna().any() else math.nan,
            "error": "" if len(ok) else group["error"].iloc[-1],
        })
    summary = pd.DataFrame(rows)
    base = summary[summary["precision"] == BASELINE].set_index(["workload", "framework", "devices"])
    keys = list(zip(summary["workload"], summary["framework"], summary["devices"]))

    def relative(column: str, how: str) -> list[float]:
        out = []
        for key, value in zip(keys, summary[column]):
            ref = base[column].get(key, math.nan) if key in base.index else math.nan
            if how == "ratio":
                out.append(value / ref if ref and not math.isnan(ref) else math.nan)
            else:
                out.append(value - ref)
        return out

    summary["speedup"] = relative("throughput", "ratio")
    summary["memory_ratio"] = relative("peak_memory_mib", "ratio")
    summary["accuracy_delta"] = relative("val_accuracy", "difference")
    one = summary[summary["devices"] == 1].set_index(["workload", "framework", "precision"])
    scaling, efficiency = [], []
    for _, row in summary.iterrows():
        key = (row["workload"], row["framework"], row["precision"])
        ref = one["throughput"].get(key, math.nan) if key in one.index else math.nan
        ratio = row["throughput"] / ref if ref and not math.isnan(ref) else math.nan
        scaling.append(ratio)
        efficiency.append(ratio / row["devices"])
    summary["scaling_speedup"] = scaling
    summary["scaling_efficiency"] = efficiency
    return summary


def _precision_order(precisions: list[str]) -> list[str]:
    known = [p for p in PRECISIONS if p in precisions]
    return known + [p for p in precisions if p not in known]


def _pivot(summary: pd.DataFrame, render) -> pd.DataFrame:
    """Rows workload x framework (x devices, when a cell ran on several), a column per precision.

    Each cell is rendered by ``render(row)``.
    """
    precisions = _precision_order(list(dict.fromkeys(summary["precision"])))
    with_devices = bool((summary["devices"] != 1).any())
    table: dict[tuple[str, str, int], dict[str, str]] = {}
    for _, row in summary.iterrows():
        cell = render(row) if row["status"] == "ok" else str(row["status"])
        table.setdefault((row["workload"], row["framework"], int(row["devices"])), {})[row["precision"]] = cell
    records = [{"workload": table_text(w), "framework": table_text(f), **({"devices": str(d)} if with_devices else {}),
                **{table_text(p): table_text(cells.get(p, "not run")) for p in precisions}}
               for (w, f, d), cells in table.items()]
    return pd.DataFrame(records, columns=["workload", "framework", *(["devices"] if with_devices else []),
                                          *(table_text(p) for p in precisions)])


def scaling_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows workload x framework x precision, a column per device count.

    Each cell: throughput, then the speed-up over the same workload,
    framework and precision on one device and the scaling efficiency
    ``throughput(N) / (N * throughput(1))``.  Empty when no cell ran on
    more than one device.
    """
    if summary.empty or not (summary["devices"] != 1).any():
        return pd.DataFrame()
    counts = sorted({int(d) for d in summary["devices"]})
    precisions = _precision_order(list(dict.fromkeys(summary["precision"])))
    table: dict[tuple[str, str, str], dict[int, str]] = {}
    for _, row in summary.iterrows():
        if row["status"] != "ok":
            cell = str(row["status"])
        else:
            cell = _fmt(row["throughput"], "{:,.0f}")
            if row["devices"] != 1 and not math.isnan(row["scaling_speedup"]):
                cell += f" ({row['scaling_speedup']:.2f}x, eff {row['scaling_efficiency'] * 100:.0f}%)"
        table.setdefault((row["workload"], row["framework"], row["precision"]), {})[int(row["devices"])] = cell
    order = sorted(table, key=lambda k: (list(dict.fromkeys(summary["workload"])).index(k[0]),
                                         list(dict.fromkeys(summary["framework"])).index(k[1]),
                                         precisions.index(k[2])))
    records = [{"workload": table_text(w), "framework": table_text(f), "precision": table_text(p),
                **{f"{n} device{'s' if n > 1 else ''}": table_text(table[(w, f, p)].get(n, "not run"))
                   for n in counts}} for (w, f, p) in order]
    return pd.DataFrame(records)


def _fmt(value: float, pattern: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else pattern.format(value)


def comparison_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The report's tables: each a row per workload x framework, a column per precision."""

    def throughput(row) -> str:
        text = _fmt(row["throughput"], "{:,.0f}")
        if row["precision"] != BASELINE and not math.isnan(row["speedup"]):
            text += f" ({row['speedup']:.2f}x)"
        return text

    def memory(row) -> str:
        text = _fmt(row["peak_memory_mib"], "{:,.0f}")
        if row["precision"] != BASELINE and not math.isnan(row["memory_ratio"]):
            text += f" ({row['memory_ratio']:.2f}x)"
        return text

    def accuracy(row) -> str:
        text = _fmt(row["val_accuracy"] * 100 if not math.isnan(row["val_accuracy"]) else math.nan, "{:.2f}%")
        if row["precision"] != BASELINE and not math.isnan(row["accuracy_delta"]):
            text += f" ({row['accuracy_delta'] * 100:+.2f} pt)"
        return text

    return {
        "Throughput, images/s (speed-up over fp32)": _pivot(summary, throughput),
        "Peak memory, MiB (ratio to fp32)": _pivot(summary, memory),
        "Validation accuracy (difference from fp32)": _pivot(summary, accuracy),
        "Final training loss": _pivot(summary, lambda row: _fmt(row["final_loss"], "{:.4f}")),
        "Achieved training TFLOP/s (training GFLOP per image)": _pivot(
            summary, lambda row: _fmt(row["achieved_tflops"], "{:.3f}")
            + (f" ({row['train_gflop_per_image']:.3f})" if not math.isnan(row["train_gflop_per_image"]) else "")),
    }


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
        "- GPU: " + ("; ".join(f"{g['name']} (driver {g['driver']}, {g['memory']}, sm {g['compute_capability']})"
                              for g in gpus) if gpus else "none"),
        "- packages: " + ", ".join(f"{k} {v}" for k, v in packages.items()),
    ]
    settings = environment.get("settings")
    if settings:
        lines.append(
            f"- sweep: {settings.get('steps')} steps per epoch at most, {settings.get('epochs')} epoch(s), "
            f"warm-up {settings.get('warmup')} steps, batch size "
            f"{settings.get('batch_size') or 'per workload'}, {settings.get('repeats')} repeat(s), "
            f"seed {settings.get('seed')}, device {settings.get('device')}"
            + (f", config {environment['config_file']}" if environment.get("config_file") else "")
        )
    return lines


# Columns of the per-run table and how each is printed.
DETAIL_FORMATS = {
    "workload": "{}", "framework": "{}", "precision": "{}", "repeat": "{:d}", "status": "{}", "devices": "{:d}",
    "throughput": "{:,.0f}", "step_time_median_ms": "{:.2f}", "step_time_p90_ms": "{:.2f}",
    "step_time_std_ms": "{:.2f}", "first_step_time_s": "{:.3f}", "peak_memory_mib": "{:,.0f}",
    "first_step_loss": "{:.5f}", "final_loss": "{:.4f}", "val_accuracy": "{:.4f}", "param_count": "{:,d}",
    "train_gflop_per_image": "{:.3f}", "achieved_tflops": "{:.4f}", "compilation": "{}",
    "loss_scale_final": "{:g}", "skipped_steps": "{:d}",
}


def _detail_table(cells: pd.DataFrame) -> str:
    if cells.empty:
        return "_no results_"
    rows = []
    for record in cells[list(DETAIL_FORMATS)].to_dict("records"):
        row = {}
        for column, pattern in DETAIL_FORMATS.items():
            value = record[column]
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            if not missing and pattern.endswith("d}") and isinstance(value, float) and value.is_integer():
                value = int(value)
            try:
                row[column] = "" if missing else table_text(pattern.format(value))
            except (TypeError, ValueError):  # a stored figure of an unexpected type
                row[column] = table_text(value)
        rows.append(row)
    return pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)


def render_markdown(results: list[CellResult], environment: dict[str, Any]) -> str:
    """The whole ``report.md``."""
    summary = summary_frame(results)
    cells = results_frame(results)
    out = ["# amp-suite report", "", "## Environment", "", *environment_lines(environment), ""]
    if not cells.empty:
        devices = sorted({d for d in cells["device"] if d})
        datasets = sorted({d for d in cells["dataset"] if d})
        out += [f"- devices used: {', '.join(devices) or 'none reached'}",
                f"- dataset: {', '.join(datasets)}", ""]
        notes = sorted({(r.metrics or {}).get("dataset_note", "") for r in results} - {""})
        out += [f"- data: {n}" for n in notes] + ([""] if notes else [])
        if any((r.metrics or {}).get("dataset_substituted") for r in results):
            out += ["> **Data substitution:** synthetic data stood in for a dataset that could not be had "
                    "(see the data lines above). Accuracy figures do not describe the real dataset.", ""]
    out += [
        "Throughput is steady-state training images per second (warm-up steps excluded). "
        "Peak memory is the framework allocator's peak on a GPU and the worker process's "
        "peak resident memory on a CPU. Figures are medians over ok repeats; every ratio "
        "compares with the same framework's fp32 run of the same workload. Training FLOPs per "
        "image are three times the forward pass's convolution and dense multiply-adds (2 FLOPs "
        "each); achieved TFLOP/s is throughput times that.",
        "",
    ]
    for title, table in comparison_tables(summary).items():
        out += [f"## {title}", "", table.to_markdown(index=False, disable_numparse=True) if not table.empty else "_no results_", ""]
    scaling = scaling_table(summary)
    if not scaling.empty:
        out += ["## Scaling over devices, images/s (speed-up over 1 device, efficiency)", "",
                "Data parallel: the workload's batch is the global batch, split evenly over the devices. "
                "Throughput is global samples over the slowest process's window time; efficiency is "
                "throughput(N) / (N x throughput(1)) for the same workload, framework and precision. "
                "Devices that share a machine's cores (logical CPU devices, one process per core) "
                "compete for them: read the efficiency as measured, not as a property of the framework.", "",
                scaling.to_markdown(index=False, disable_numparse=True), ""]
    out += ["## Every run", "", _detail_table(cells), ""]
    failed = cells[~cells["status"].isin(["ok"])]
    if not failed.empty:
        out += ["## Runs without figures", ""]
        out += [flat_text(f"- {r.workload} / {r.framework} / {r.precision}"
                          + (f" / {r.devices} devices" if r.devices != 1 else "") + f" / repeat {r.repeat}: **{r.status}**"
                          f" — {r.error or 'no message'}") for r in failed.itertuples()]
        out.append("")
    return "\n".join(out)
