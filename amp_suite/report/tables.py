"""The report's pivot tables: a row per workload x framework x device, a column per precision.

Each table renders one figure of the summary frame (throughput and its
speed-ups, peak memory, accuracy, loss, TFLOP/s, energy, cost) and shows a
mode, batch or device-count column only where the sweep has that axis; the
scaling table (a column per device count) and the time-to-target table
follow the same rules.  ``report.md``, ``report.html`` and the charts share
the row order (:func:`ordered_summary`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from amp_suite.precision import BASELINE, PRECISIONS
from amp_suite.report.frames import column_first, column_median, device_label, is_known
from amp_suite.report.intervals import format_ratio
from amp_suite.report.marks import EMULATED_MARK, NOISIER_MARK, ratio_text
from amp_suite.report.summary import speedup_interval
from amp_suite.report.text import table_text
from amp_suite.report.tokens import throughput_unit


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
    if row["status"] == "oom" and is_known(row.get("batch_size")) and int(row["batch_size"]) > 0:
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


# Marks a GPU cell whose GPU ran a kernel less than BOUND_BELOW_PCT % of the time (NVML utilization).
BOUND_MARK = "↯"
BOUND_BELOW_PCT = 50.0


def _fmt(value: float, pattern: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else pattern.format(value)


# What a figure of a row compared with nothing says in place of its ratio to fp32 (the header's note says why).
NOT_COMPARED_TEXT = " (not compared: other settings than fp32)"


def _not_compared(row: Any) -> bool:
    return row["precision"] != BASELINE and bool(row.get("settings_differ"))


def comparison_tables(summary: pd.DataFrame, environment: dict[str, Any] | None = None) -> dict[str, pd.DataFrame]:
    """The report's tables: each a row per workload x framework, a column per precision."""
    cost = (environment or {}).get("cost") or {}

    def throughput(row) -> str:
        text = _fmt(row["throughput"], "{:,.0f}") + (" ⚑" if row.get("flagged") else "")
        if row.get("emulated"):  # the emulation's speed: no ratio, which would read as a speed-up
            return f"{text} {EMULATED_MARK} (not a speed-up: no FP8 matmul ran)"
        parts = []
        if row["precision"] != BASELINE and not math.isnan(row["speedup"]):
            over_tf32 = speedup_interval(row, "speedup_over_tf32")
            ceiling = row.get("ceiling_ratio")
            parts.append(f"{NOISIER_MARK + ' ' if row.get('speedup_noisier') else ''}"
                         f"{ratio_text(speedup_interval(row))}")
            if row["precision"] != "tf32" and is_known(over_tf32.value):
                parts.append(f"{ratio_text(over_tf32)} over tf32")
            if is_known(ceiling):
                parts.append(f"ceiling {ceiling:.2f}x")
        if is_known(row.get("speedup_over_base_mode")):
            parts.append(f"{row['speedup_over_base_mode']:.2f}x over {row['base_mode']}")
        if parts:
            text += f" ({'; '.join(parts)})"
        if _not_compared(row):
            text += NOT_COMPARED_TEXT
        if row.get("device_kind") == "gpu" and is_known(row.get("gpu_busy_pct")):
            busy = float(row["gpu_busy_pct"])
            text += f", GPU {busy:.0f}%" + (f" {BOUND_MARK}" if busy < BOUND_BELOW_PCT else "")
        return text

    def energy(row) -> str:
        text = _fmt(row["energy_per_image_mj"], "{:.4g}")
        if row["precision"] != BASELINE and is_known(row.get("energy_ratio")):
            text += f" ({row['energy_ratio']:.2f}x)"
        return text

    def memory(row) -> str:
        text = _fmt(row["peak_memory_mib"], "{:,.0f}")
        if row["precision"] != BASELINE and not math.isnan(row["memory_ratio"]):
            text += f" ({format_ratio(speedup_interval(row, 'memory_ratio'))})"
        return text + (NOT_COMPARED_TEXT if _not_compared(row) and text != "–" else "")

    def accuracy(row) -> str:
        if math.isnan(row["val_accuracy"]):
            return "n/a"  # synthetic data (see the note)
        text = _fmt(row["val_accuracy"] * 100, "{:.2f}%")
        if row["precision"] != BASELINE and not math.isnan(row["accuracy_delta"]):
            text += f" ({row['accuracy_delta'] * 100:+.2f} pt)"
        return text + (NOT_COMPARED_TEXT if _not_compared(row) else "")

    def achieved(row) -> str:
        text = _fmt(row["achieved_tflops"], "{:.3f}")
        fraction, peak = row.get("peak_fraction"), row.get("peak_tflops")
        if is_known(fraction) and is_known(peak):
            text += f" ({fraction * 100:.1f}% of {peak:.3g})"
        return text

    def money(row) -> str:
        per_epoch, per_million = row.get("cost_per_epoch"), row.get("cost_per_million_images")
        if not is_known(per_million):
            return "–"
        text = (f"{per_epoch:.4g} / " if is_known(per_epoch) else "– / ") + f"{per_million:.4g}"
        saving, fraction = row.get("cost_saving_per_million"), row.get("cost_saving_fraction")
        if row["precision"] != BASELINE and is_known(saving) and is_known(fraction):
            text += f" ({'saves' if saving >= 0 else 'costs'} {abs(saving):.4g}, {abs(fraction) * 100:.0f}%"
            text += " less)" if saving >= 0 else " more)"
        return text

    has_tf32 = bool(((summary["precision"] == "tf32") & (summary["status"] == "ok")).any())
    # the share of the peak is in the heading only where a calibration gave one (amp-suite calibrate)
    has_peak = bool(summary["peak_fraction"].notna().any()) if "peak_fraction" in summary else False
    has_modes = bool(summary["speedup_over_base_mode"].notna().any()) if "speedup_over_base_mode" in summary else False
    has_busy = bool(((summary["device_kind"] == "gpu") & summary["gpu_busy_pct"].notna()).any()) \
        if "gpu_busy_pct" in summary else False
    tables = {
        f"Throughput, {throughput_unit(summary.get('token_workload', []))} (speed-up over fp32"
        + (" in the same mode" if has_modes else "")
        + ("; over tf32" if has_tf32 else "") + ("; over the base mode" if has_modes else "") + ")"
        + ("; GPU busy %" if has_busy else ""):
            _pivot(summary, throughput),
        "Peak memory, MiB (ratio to fp32)": _pivot(summary, memory),
        "Validation accuracy (difference from fp32)": _pivot(summary, accuracy),
        "Final training loss": _pivot(summary, lambda row: _fmt(row["final_loss"], "{:.4f}")),
        "Achieved training TFLOP/s" + (" (% of the measured peak of the precision's dtype, TFLOP/s)" if has_peak
                                       else " (no measured peak: `amp-suite calibrate` adds each dtype's)"):
            _pivot(summary, achieved),
    }
    if summary["energy_per_image_mj"].notna().any():
        tables["Energy per training image, mJ (ratio to fp32)"] = _pivot(summary, energy)
    if cost:
        tables[f"Cost in {cost.get('currency', '')} at {cost['price_per_hour']:g} per hour: per epoch / per "
               "million training images (AMP's saving over fp32)"] = _pivot(summary, money)
    return tables


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
        medians[key] = column_median(reached["time_to_target_s"]) if len(reached) else math.nan
    order = {p: i for i, p in enumerate(_precision_order(list(dict.fromkeys(ok["precision"]))))}
    for key, group in sorted(ok.groupby(keys, sort=False), key=lambda kv: (kv[0][:6], order.get(kv[0][6], 99))):
        workload, framework, kind, devices, mode, batch, precision = key
        reached = group[group["target_reached"].fillna(False).astype(bool)]
        target = column_first(group["target_accuracy"])
        if len(reached):
            time = _fmt(medians[key], "{:.3g} s")
            steps = _fmt(column_median(reached["steps_to_target"]), "{:,.0f}")
            epochs = _fmt(column_median(reached["epochs_to_target"]), "{:.2f}")
            state = f"{len(reached)} of {len(group)} repeats"
        else:
            time, steps, epochs = "not reached", "–", "–"
            state = f"not reached: best {column_median(group['best_val_accuracy']) * 100:.2f}%" \
                if is_known(column_median(group["best_val_accuracy"])) else "not reached"
        base = medians.get((workload, framework, kind, devices, mode, batch, BASELINE), math.nan)
        ratio = medians[key] / base if precision != BASELINE and is_known(base) and base > 0 else math.nan
        rows.append({"workload": table_text(workload), "framework": table_text(framework),
                     "device": table_text(device_label(kind, list(group["device"]))),
                     **({"mode": table_text(mode or "–")} if with_modes else {}),
                     **({"batch": str(batch)} if with_batches else {}),
                     "precision": table_text(precision), "target": f"{target * 100:.2f}%",
                     "time to target": time, "steps": steps, "epochs": epochs, "reached": table_text(state),
                     "ratio to fp32": _fmt(ratio, "{:.2f}x"),
                     "evaluation time": _fmt(column_median(group["eval_time_s"]), "{:.3g} s")})
    return pd.DataFrame(rows)
