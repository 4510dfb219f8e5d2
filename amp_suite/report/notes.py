"""The paragraphs beside the report's tables: what their marks and intervals mean, and what to be wary of.

The header's warnings (an incomplete sweep, a busy machine), the meaning of
the throughput table's intervals and marks, the modes and the GPU-busy
figure, the best configuration per framework, and the noise of the
peak-memory figure.  Each function returns markdown lines, empty when the
sweep has nothing to say.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from amp_suite.precision import BASELINE
from amp_suite.report.frames import is_known
from amp_suite.report.marks import NO_DIFFERENCE_MARK, NOISIER_MARK, TOO_WIDE, TOO_WIDE_MARK, too_wide
from amp_suite.report.summary import speedup_interval
from amp_suite.report.tables import BOUND_BELOW_PCT, BOUND_MARK, ordered_summary
from amp_suite.report.text import flat_text, table_text


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
    if not ok.empty and "settings_differ" in ok:  # a row of other settings than its fp32's is compared with nothing
        ok = ok[ok["settings_differ"].fillna("") == ""]
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
                  f"{best['throughput']:,.0f} {'samples/s' if best.get('token_workload') else 'images/s'}")
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
            f"cell{'' if len(missing) == 1 and not of else 's'} did not run: {shown}. The tables hold "
            "only the cells that ran; the same command with `--resume` runs the rest.", ""]


def other_results_lines(environment: dict[str, Any]) -> list[str]:
    """A note for the report's header when the folder's ``results.jsonl`` holds results of cells this run did not
    plan (``environment["other_results"]``, given by ``run`` to its own report and never stored): without it an
    fp32 run earlier into the same folder reads as a baseline that "did not run"."""
    info = environment.get("other_results")
    if not isinstance(info, dict):
        return []
    keys = info.get("keys")
    others = [flat_text(key) for key in (keys if isinstance(keys, list) else []) if isinstance(key, str)]
    if not others:
        return []
    shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
    return [f"> **Not in this report:** `results.jsonl` also holds {len(others)} result"
            f"{'' if len(others) == 1 else 's'} of cells this run did not plan ({shown}); "
            "`amp-suite report DIR` renders every result in the folder together.", ""]


# The summary's columns that say why a row is not compared with another (amp_suite.report.summary), and what it
# then lacks.
_NOT_COMPARED = (("settings_differ", ""), ("tf32_settings_differ", "no ratio to tf32"),
                 ("base_mode_settings_differ", "no ratio to its base mode"),
                 ("scaling_settings_differ", "no scaling figure"))


def not_compared(summary: pd.DataFrame) -> list[str]:
    """``jax / w / amp_bf16 ran with other settings than tf32 (steps 3 -> 6): no ratio to tf32``: each row left
    uncompared with its fp32 row (or its tf32 row, its base mode's, its one-device row's) because the two ran other
    settings (``settings_differ`` and the like: cells of several runs in one folder)."""
    named = []
    for _, row in summary.iterrows():
        for column, lacking in _NOT_COMPARED:
            why = flat_text(row.get(column) or "") if column in summary else ""
            if why:
                named.append(f"{flat_text(row['framework'])} / {flat_text(row['workload'])} / "
                             f"{flat_text(row['precision'])} {why}" + (f": {lacking}" if lacking else ""))
    return named


def settings_lines(summary: pd.DataFrame) -> list[str]:
    """A warning for the report's header naming what :func:`not_compared` finds."""
    named = not_compared(summary) if not summary.empty else []
    if not named:
        return []
    more = f" and {len(named) - 6} more" if len(named) > 6 else ""
    return [f"> **Not compared:** {'; '.join(named[:6])}{more}. This folder holds cells of runs with other "
            "settings; a gap between them is not AMP's effect alone. Run them again alike (one command, with "
            "`--resume`) or into separate folders.", ""]


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
        if fp32 is not None and tf32 is not None and is_known(fp32) and is_known(tf32) and fp32 > 0:
            parts.append(f"{table_text(framework)} {table_text(workload)}: {abs(tf32 - fp32) / fp32 * 100:.0f}% "
                         f"({fp32:,.0f} vs {tf32:,.0f} MiB)")
    if not parts:
        return []
    return ["fp32 and tf32 keep the same tensors in float32, so the gap between their peaks is this figure's noise "
            "(the libraries' workspace and algorithm choices), not a saving: " + "; ".join(parts)
            + ". A memory ratio of an AMP precision within that gap is no measured difference.", ""]


def energy_scope_lines(summary: pd.DataFrame) -> list[str]:
    """Under the energy table: what a row of several GPUs' energy per image is (one metered GPU's share)."""
    rows = summary[(summary["devices"] > 1) & summary["energy_per_image_mj"].notna()
                   & (summary["device_kind"] == "gpu")]
    if rows.empty:
        return []
    return ["A row of several GPUs meters one of them (NVML): its energy over its own share of the images, "
            "the global batch split evenly, so the figure is per image whichever the device count, taken as if "
            "every GPU drew what the metered one did (`energy_scope` in results.jsonl).", ""]
