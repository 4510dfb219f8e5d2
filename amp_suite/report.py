"""Normalizes every run into one comparison: pandas frames and a markdown report.

Each figure is put beside the same framework's ``fp32`` figure on the same
workload, so a reader sees what AMP buys *in that framework*: throughput
speed-up, peak-memory ratio and the accuracy difference.  Repeats are folded
by their median; failed cells keep their status and are never dropped.
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
    "workload", "framework", "precision", "repeat", "status", "error",
    "throughput", "step_time_median_ms", "step_time_p90_ms", "step_time_std_ms",
    "first_step_time_s", "warmup_time_s", "timed_steps", "epoch_time_s",
    "peak_memory_mib", "memory_source", "first_step_loss", "final_loss",
    "val_accuracy", "val_loss", "param_count", "loss_scaling", "loss_scale_final",
    "skipped_steps", "compute_dtype", "device_kind", "device", "framework_version", "dataset",
    "batch_size", "steps", "epochs", "warmup",
]


def _peak_memory(metrics: dict[str, Any]) -> tuple[float | None, str]:
    """Device allocator peak where the framework gives one, else the worker's peak RSS."""
    if metrics.get("device_peak_memory_bytes") is not None:
        return metrics["device_peak_memory_bytes"] / MIB, "device allocator"
    if metrics.get("peak_rss_bytes") is not None:
        return metrics["peak_rss_bytes"] / MIB, "process RSS"
    return None, ""


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
        epoch_times = m.get("epoch_times_s") or []
        rows.append({
            "workload": r.workload,
            "framework": r.framework,
            "precision": r.precision,
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
            "epoch_time_s": float(sum(epoch_times)) if epoch_times else None,
            "peak_memory_mib": memory,
            "memory_source": source,
            "first_step_loss": _num(m.get("first_step_loss")),
            "final_loss": _num(m.get("final_loss")),
            "val_accuracy": _num(m.get("val_accuracy")),
            "val_loss": _num(m.get("val_loss")),
            "param_count": m.get("param_count"),
            "loss_scaling": (r.applied or {}).get("loss_scaling", ""),
            "loss_scale_final": _num(m.get("loss_scale_final")),
            "skipped_steps": m.get("skipped_steps"),
            "compute_dtype": (r.applied or {}).get("compute_dtype", ""),
            "device_kind": (r.device or {}).get("kind", ""),
            "device": (r.device or {}).get("name", ""),
            "framework_version": m.get("framework_version", ""),
            "dataset": (r.config or {}).get("dataset", ""),
            "batch_size": (r.config or {}).get("batch_size"),
            "steps": (r.config or {}).get("steps"),
            "epochs": (r.config or {}).get("epochs"),
            "warmup": (r.config or {}).get("warmup"),
        })
    frame = pd.DataFrame(rows, columns=CELL_COLUMNS)
    _fill_device_kind(frame)
    return frame


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


def _ms(seconds: Any) -> float | None:
    value = _num(seconds)
    return None if value is None else value * 1000.0


def summary_frame(results: list[CellResult]) -> pd.DataFrame:
    """One row per workload x framework x device kind x precision, normalized to that fp32.

    Figures are medians over the ``ok`` repeats.  ``status`` is ``ok`` when at
    least one repeat is ok, else the last repeat's status.  CPU and GPU runs of
    one framework are separate rows and never each other's baseline.
    """
    cells = results_frame(results)
    if cells.empty:
        return pd.DataFrame(columns=["workload", "framework", "device", "precision", "status", "ok_repeats",
                                     "throughput", "speedup", "peak_memory_mib", "memory_ratio",
                                     "final_loss", "val_accuracy", "accuracy_delta", "error"])
    rows = []
    for (workload, framework, kind, precision), group in cells.groupby(
            ["workload", "framework", "device_kind", "precision"], sort=False):
        ok = group[group["status"] == "ok"]
        rows.append({
            "workload": workload, "framework": framework, "device_kind": kind, "precision": precision,
            "device": device_label(kind, list(group["device"])),
            "status": "ok" if len(ok) else group["status"].iloc[-1],
            "ok_repeats": len(ok), "repeats": len(group),
            "throughput": ok["throughput"].median() if len(ok) else math.nan,
            "peak_memory_mib": ok["peak_memory_mib"].median() if len(ok) else math.nan,
            "final_loss": ok["final_loss"].median() if len(ok) else math.nan,
            "val_accuracy": ok["val_accuracy"].median() if len(ok) else math.nan,
            "error": "" if len(ok) else group["error"].iloc[-1],
        })
    summary = pd.DataFrame(rows)
    base = summary[summary["precision"] == BASELINE].set_index(["workload", "framework", "device_kind"])
    keys = list(zip(summary["workload"], summary["framework"], summary["device_kind"]))

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
    return summary


def _precision_order(precisions: list[str]) -> list[str]:
    known = [p for p in PRECISIONS if p in precisions]
    return known + [p for p in precisions if p not in known]


def _pivot(summary: pd.DataFrame, render) -> pd.DataFrame:
    """Rows workload x framework x device, a column per precision, each cell rendered by ``render(row)``."""
    precisions = _precision_order(list(dict.fromkeys(summary["precision"])))
    table: dict[tuple[str, str, str], dict[str, str]] = {}
    labels: dict[tuple[str, str, str], str] = {}
    for _, row in summary.iterrows():
        cell = render(row) if row["status"] == "ok" else str(row["status"])
        key = (row["workload"], row["framework"], row["device_kind"])
        table.setdefault(key, {})[row["precision"]] = cell
        labels.setdefault(key, row["device"])
    records = [{"workload": w, "framework": f, "device": labels[(w, f, k)],
                **{p: cells.get(p, "not run") for p in precisions}}
               for (w, f, k), cells in table.items()]
    return pd.DataFrame(records, columns=["workload", "framework", "device", *precisions])


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
    }


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
    if not seen:
        return ["- CUDA runtime / cuDNN: none used (no run reached a CUDA device)"]
    return ["- CUDA runtime / cuDNN: " + "; ".join(f"{f} {' / '.join(sorted(v))}" for f, v in seen.items())]


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
            f"seed {settings.get('seed')}, device {settings.get('device')}"
            + (f", config {environment['config_file']}" if environment.get("config_file") else "")
        )
    return lines


# Columns of the per-run table and how each is printed.
DETAIL_FORMATS = {
    "workload": "{}", "framework": "{}", "device_kind": "{}", "precision": "{}", "repeat": "{:d}",
    "status": "{}",
    "throughput": "{:,.0f}", "step_time_median_ms": "{:.2f}", "step_time_p90_ms": "{:.2f}",
    "step_time_std_ms": "{:.2f}", "first_step_time_s": "{:.3f}", "peak_memory_mib": "{:,.0f}",
    "first_step_loss": "{:.5f}", "final_loss": "{:.4f}", "val_accuracy": "{:.4f}", "param_count": "{:,d}",
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
            if not missing and pattern.endswith("d}"):
                value = int(value)
            row[column] = "" if missing else pattern.format(value)
        rows.append(row)
    return pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)


def render_markdown(results: list[CellResult], environment: dict[str, Any]) -> str:
    """The whole ``report.md``."""
    summary = summary_frame(results)
    cells = results_frame(results)
    out = ["# amp-suite report", "", "## Environment", "", *environment_lines(environment),
           *runtime_lines(results), ""]
    if not cells.empty:
        devices = sorted({device_label(k, [n]) for k, n in zip(cells["device_kind"], cells["device"]) if k})
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
        "compares with the same framework's fp32 run of the same workload.",
        "",
    ]
    for title, table in comparison_tables(summary).items():
        out += [f"## {title}", "", table.to_markdown(index=False, disable_numparse=True) if not table.empty else "_no results_", ""]
    out += ["## Every run", "", _detail_table(cells), ""]
    failed = cells[~cells["status"].isin(["ok"])]
    if not failed.empty:
        out += ["## Runs without figures", ""]
        out += [f"- {r.workload} / {r.framework} / {r.precision} / repeat {r.repeat}: **{r.status}**"
                f" — {r.error or 'no message'}" for r in failed.itertuples()]
        out.append("")
    return "\n".join(out)
