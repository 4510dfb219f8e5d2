"""The summary frame: the cells folded by their repeats, each AMP figure over the same framework's fp32.

One row per workload x framework x device kind x device count x mode x batch
size x precision.  Repeats fold to their medians; speed-up and memory ratio
get intervals from the paired repeats (:mod:`amp_suite.report.intervals`),
accuracy its equivalence over seeds (:mod:`amp_suite.report.seeds`); the
data-parallel scaling and the ratio over a framework's base mode come last.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from amp_suite.precision import BASELINE, declared_choices
from amp_suite.records import CellResult
from amp_suite.report.frames import as_number, column_first, column_median, device_label, results_frame
from amp_suite.report.intervals import Interval, paired_ratios, pooled_log_intervals
from amp_suite.report.memo import by_content
from amp_suite.report.seeds import add_accuracy_equivalence, margin_of

if TYPE_CHECKING:
    from amp_suite.report.verdict import Verdict

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
                   "settings_differ", "tf32_settings_differ", "base_mode_settings_differ",
                   "scaling_settings_differ", "token_workload", "declared", "error"]


@by_content
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
            "gpu_busy_pct": column_median(ok["gpu_busy_pct"]) if len(ok) else math.nan,
            "compile_time_s": column_median(ok["compile_time_s"]) if len(ok) else math.nan,
            "precision": precision, "device": device_label(kind, list(group["device"])),
            "status": "ok" if len(ok) else group["status"].iloc[-1],
            "ok_repeats": len(ok), "repeats": len(group),
            "throughput": column_median(ok["throughput"]) if len(ok) else math.nan,
            "throughput_min": _extreme(ok["throughput"], min),
            "throughput_max": _extreme(ok["throughput"], max),
            "window_cv": column_median(ok["window_throughput_cv"]) if len(ok) else math.nan,
            "peak_memory_mib": column_median(ok["peak_memory_mib"]) if len(ok) else math.nan,
            "energy_per_image_mj": column_median(ok["energy_per_image_mj"]) if len(ok) else math.nan,
            "flagged": bool((ok["measurement_flags"].fillna("") != "").any()) if len(ok) else False,
            # an emulated precision (fp8 without FP8 matmuls): its throughput is the emulation's, never a speed-up
            "emulated": bool((group["fp8_matmul"] == "emulated").any()),
            "final_loss": column_median(ok["final_loss"]) if len(ok) else math.nan,
            "val_accuracy": column_median(ok["val_accuracy"]) if len(ok) else math.nan,
            "achieved_tflops": column_median(ok["achieved_tflops"]) if len(ok) else math.nan,
            "peak_tflops": column_first(ok["peak_tflops"]),
            "peak_fraction": column_median(ok["peak_fraction"]),
            "ceiling_ratio": column_first(group["ceiling_ratio"]),
            "cost_per_epoch": column_median(ok["cost_per_epoch"]),
            "cost_per_million_images": column_median(ok["cost_per_million_images"]),
            "train_gflop_per_image": group["train_gflop_per_image"].dropna().iloc[0]
            if group["train_gflop_per_image"].notna().any() else math.nan,
            "error": "" if len(ok) else group["error"].iloc[-1],
            "declared": _declared(precision, ok),
            # a token workload counts samples (sequences), not images; its tokens/s are in its own section
            "token_workload": bool(pd.to_numeric(group["tokens_per_s"], errors="coerce").notna().any())
            if "tokens_per_s" in group else False,
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
    _no_comparison_across_settings(summary, cells, results)
    return summary


def _declared(precision: str, ok: pd.DataFrame) -> str:
    """The choices a row's cells declared away from the precision's default recipe
    (:func:`amp_suite.precision.declared_choices`), from its first ok cell's record of what it applied."""
    if ok.empty:
        return ""
    scaling = str(ok["loss_scaling"].iloc[0] or "") if "loss_scaling" in ok else ""
    kept = str(ok["keep_fp32"].iloc[0] or "") if "keep_fp32" in ok else ""  # the names joined by commas
    return declared_choices(precision, scaling, tuple(name for name in kept.split(",") if name))


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


# The figures of a summary row that compare it with its fp32 row: none where the two ran other settings.
COMPARED_COLUMNS = (*SPEED_RATIO_COLUMNS, "speedup_pairs", "memory_ratio", "memory_ratio_low", "memory_ratio_high",
                    "accuracy_delta", "accuracy_difference_pt", "accuracy_difference_low_pt",
                    "accuracy_difference_high_pt")


def comparable_cells(cells: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """``cells`` without those of an AMP row that ran other settings than its fp32 row (``settings_differ``): what
    the sections that pair cells themselves (accuracy over seeds) may pair."""
    if cells.empty or summary.empty or "settings_differ" not in summary:
        return cells
    apart = {(*(row[column] for column in GROUP), row["precision"])
             for _, row in summary[summary["settings_differ"].fillna("") != ""].iterrows()}
    if not apart:
        return cells
    batch = cells["batch_size"].fillna(0).astype(int)
    keep = [(*(row[column] for column in GROUP[:-1]), size, row["precision"]) not in apart
            for (_, row), size in zip(cells.iterrows(), batch, strict=True)]
    return cells[keep]


# Beside fp32's comparisons (COMPARED_COLUMNS, blanked where ``settings_differ``), the figures that compare a row
# with its tf32 row, its base mode's and its one-device row's: the column that says why they are not, and them.
REFERENCE_CHECKS = (
    ("tf32_settings_differ", ("speedup_over_tf32", "speedup_over_tf32_low", "speedup_over_tf32_high")),
    ("base_mode_settings_differ", ("speedup_over_base_mode",)),
    ("scaling_settings_differ", ("scaling_speedup", "scaling_efficiency")),
)


def _no_comparison_across_settings(summary: pd.DataFrame, cells: pd.DataFrame, results: list[CellResult]) -> None:
    """``settings_differ``: why an AMP row's cells and its fp32 row's cannot be compared (they ran other steps,
    data or versions: :mod:`amp_suite.report.settings_match`), its comparisons then blanked; "" elsewhere.  The
    same for a row's ratio to tf32, to its base mode and to one device (:data:`REFERENCE_CHECKS`)."""
    from amp_suite.report.settings_match import DEVICE_OPTIONS, PRECISION_OPTIONS, mismatch_note, settings_key

    # each row's ok cells by what they ran: against fp32 or tf32 without the options only AMP applies, against its
    # base mode whole, against one device without the device count
    ran: dict[tuple, dict[str, CellResult]] = {}
    ran_whole: dict[tuple, dict[str, CellResult]] = {}
    ran_apart_from_devices: dict[tuple, dict[str, CellResult]] = {}
    for position, result in enumerate(results):
        if result.status == "ok":
            row = cells.iloc[position]
            place = (*(row[column] for column in GROUP), row["precision"])
            ran.setdefault(place, {}).setdefault(settings_key(result, PRECISION_OPTIONS), result)
            ran_whole.setdefault(place, {}).setdefault(settings_key(result), result)
            ran_apart_from_devices.setdefault(place, {}).setdefault(settings_key(result, DEVICE_OPTIONS), result)
    devices_at, mode_at = GROUP.index("devices"), GROUP.index("mode")
    notes: dict[str, list[str]] = {name: [] for name in ("settings_differ", *(c for c, _ in REFERENCE_CHECKS))}
    for _, row in summary.iterrows():
        place = tuple(row[column] for column in GROUP)
        mine = (*place, row["precision"])
        notes["settings_differ"].append(
            "" if row["precision"] == BASELINE else
            mismatch_note(ran.get((*place, BASELINE), {}), ran.get(mine, {}), ignore=PRECISION_OPTIONS))
        notes["tf32_settings_differ"].append(
            "" if row["precision"] == "tf32" else
            mismatch_note(ran.get((*place, "tf32"), {}), ran.get(mine, {}), "tf32", PRECISION_OPTIONS))
        base = str(row.get("base_mode") or "")
        in_base = (*place[:mode_at], base, *place[mode_at + 1:], row["precision"])
        notes["base_mode_settings_differ"].append(
            "" if not base or row["mode"] == base else
            mismatch_note(ran_whole.get(in_base, {}), ran_whole.get(mine, {}), f"{base}, its base mode"))
        on_one = (*place[:devices_at], 1, *place[devices_at + 1:], row["precision"])
        notes["scaling_settings_differ"].append(
            "" if int(row["devices"]) == 1 else
            mismatch_note(ran_apart_from_devices.get(on_one, {}), ran_apart_from_devices.get(mine, {}),
                          "its one-device row", DEVICE_OPTIONS))
    for name, values in notes.items():
        summary[name] = values
    for name, columns in (("settings_differ", COMPARED_COLUMNS),
                          *REFERENCE_CHECKS):
        differ = summary[name] != ""
        for column in columns:
            if column in summary:
                summary.loc[differ, column] = math.nan
    summary.loc[summary["settings_differ"] != "", "accuracy_equivalence"] = ""


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


def _per_repeat(cells: pd.DataFrame, column: str) -> dict[tuple, dict[tuple[int, int], float]]:
    """``{(workload, framework, device_kind, devices, mode, batch_size, precision): {(seed, repeat): figure}}`` of
    the ok cells: a seed's repeat pairs with the same seed's repeat of the reference."""
    out: dict[tuple, dict[tuple[int, int], float]] = {}
    ok = cells[cells["status"] == "ok"]
    for row in ok.itertuples():
        value = as_number(getattr(row, column))
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
    value = as_number(row.get(prefix))
    low, high = as_number(row.get(f"{prefix}_low")), as_number(row.get(f"{prefix}_high"))
    return Interval(math.nan if value is None else value, math.nan if low is None else low,
                    math.nan if high is None else high)


def _extreme(column: pd.Series, how) -> float:
    values = pd.to_numeric(column, errors="coerce").dropna()
    return float(how(values)) if len(values) else math.nan


def sweep_verdict(results: list[CellResult], environment: dict[str, Any] | None = None) -> Verdict:
    """The verdict of ``results`` (:mod:`amp_suite.report.verdict`): what the terminal prints after a sweep."""
    from amp_suite.report.verdict import build_verdict, not_run_cells

    return build_verdict(summary_frame(results, environment), results_frame(results, environment),
                         not_run_cells(environment))
