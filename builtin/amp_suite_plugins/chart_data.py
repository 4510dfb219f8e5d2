"""The charts reporter's data: what each chart plots, from the report's summary (pure; no matplotlib).

:func:`chart_data` is everything the charts draw and ``charts.json``
records: per chart its groups (workload x framework, and mode and batch size
where the sweep has those axes), its precisions and their values, each
failed cell's status in place of its figure.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from amp_suite.precision import BASELINE, PRECISIONS
from amp_suite.records import CellResult

# What a bar without a figure reads (a failed cell, a precision that failed in every framework).
NOT_AVAILABLE = "n/a"


def _order(precisions) -> list[str]:
    precisions = list(dict.fromkeys(precisions))
    known = [p for p in PRECISIONS if p in precisions]
    return known + sorted(p for p in precisions if p not in known)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _label(workload: str, framework: str, workloads: int, mode: str = "", batch: int | None = None) -> str:
    text = framework if workloads == 1 else f"{framework}\n{workload}"
    text += f"\n{mode}" if mode else ""
    text += f"\nbatch {batch}" if batch else ""
    return "\n".join(textwrap.fill(line, 14) for line in text.split("\n"))


def chart_data(results: list[CellResult], environment: dict[str, Any]) -> dict[str, Any]:
    """The values of every chart, from the same summary as the report's tables."""
    from amp_suite.report.normalize import ordered_summary, shows_batches, shows_modes, summary_frame

    summary = summary_frame(results, environment)
    every = ordered_summary(summary) if not summary.empty else summary
    ok = every[every["status"] == "ok"] if not every.empty else every
    with_modes, with_batches = shows_modes(every), shows_batches(every)
    # A bar group: workload x framework, and x mode and x batch size where the sweep has those axes.  Every
    # group and precision of the sweep has its place, a failed one included: its bars read n/a.
    places = list(dict.fromkeys(zip(every["workload"], every["framework"], every["mode"], every["batch_size"],
                                    strict=True))) if not every.empty else []
    groups = [(w, f) for w, f, _, _ in places]
    workloads = len({w for w, _ in groups})
    precisions = _order(every["precision"]) if not every.empty else []
    amp = [p for p in precisions if p != BASELINE]

    def row_of(place: tuple, precision: str) -> Any:
        workload, framework, mode, batch = place
        rows = every[(every["workload"] == workload) & (every["framework"] == framework)
                     & (every["precision"] == precision) & (every["mode"] == mode) & (every["batch_size"] == batch)]
        return None if rows.empty else rows.iloc[0]

    def value(place: tuple, precision: str, column: str) -> float | None:
        row = row_of(place, precision)
        if row is None or row["status"] != "ok":
            return None
        number = row[column]
        return float(number) if _finite(number) else None

    def status(place: tuple, precision: str) -> str:
        row = row_of(place, precision)
        return "not run" if row is None else str(row["status"])

    def bars(column: str, wanted: list[str], extra: str | None = None, marks: bool = False) -> list[dict[str, Any]]:
        out = []
        for precision in wanted:
            series = {"precision": precision, "values": [value(p, precision, column) for p in places],
                      "status": [status(p, precision) for p in places]}
            if extra:
                series[extra] = [value(p, precision, extra) for p in places]
            if f"{column}_low" in every.columns:  # a 95% interval from paired repeats, where there is one
                series["low"] = [value(p, precision, f"{column}_low") for p in places]
                series["high"] = [value(p, precision, f"{column}_high") for p in places]
            if marks:  # the report's trust marks: a flagged cell, a figure from a single run (no interval)
                rows = [row_of(p, precision) for p in places]
                series["flagged"] = [bool(r is not None and r["status"] == "ok" and r["flagged"]) for r in rows]
                series["single_run"] = [v is not None and (low is None or high is None) for v, low, high in
                                        zip(series["values"], series.get("low") or [None] * len(places),
                                            series.get("high") or [None] * len(places), strict=True)]
            out.append(series)
        return out

    labels = [{"workload": w, "framework": f, **({"mode": m} if with_modes else {}),
               **({"batch_size": int(b)} if with_batches else {}),
               "label": _label(w, f, workloads, m if with_modes else "", int(b) if with_batches else None)}
              for w, f, m, b in places]
    synthetic = _synthetic(results)
    half = [p for p in amp if p != "tf32"]
    over_tf32 = ({"speedup_tf32": {"groups": labels, "series": bars("speedup_over_tf32", half, marks=True),
                                   "unit": "x over tf32"}} if "tf32" in set(ok["precision"]) and half else {})
    return {
        "speedup": {"groups": labels, "series": bars("speedup", amp, extra="ceiling_ratio", marks=True),
                    "unit": "x over fp32"},
        **over_tf32,
        "memory": {"groups": labels, "series": bars("memory_ratio", amp), "unit": "x fp32"},
        "accuracy": {"groups": labels, "series": bars("val_accuracy", precisions, extra="accuracy_delta"),
                     "unit": "fraction of validation images", "synthetic": synthetic},
        "loss": {"panels": _loss_panels(results, list(dict.fromkeys(groups)), precisions)},
        **({"batch": _batch_lines(ok, amp)} if with_batches and amp else {}),
    }


def _batch_lines(ok: Any, amp: list[str]) -> dict[str, Any]:
    """Per workload x framework x mode x AMP precision: speed-up over fp32 and memory ratio at each batch size."""
    series = []
    for (workload, framework, mode, precision), rows in ok[ok["precision"].isin(amp)].groupby(
            ["workload", "framework", "mode", "precision"], sort=False):
        rows = rows.sort_values("batch_size")
        if len(rows) < 2:
            continue
        series.append({"workload": workload, "framework": framework, "mode": mode, "precision": precision,
                       "batch_sizes": [int(b) for b in rows["batch_size"]],
                       "speedup": [float(v) if _finite(v) else None for v in rows["speedup"]],
                       "memory_ratio": [float(v) if _finite(v) else None for v in rows["memory_ratio"]]})
    return {"series": series, "unit": "x over fp32 in the same mode and batch"}


def _synthetic(results: list[CellResult]) -> bool:
    from amp_suite.report.normalize import is_synthetic

    ok = [r for r in results if r.status == "ok"]
    return bool(ok) and all(is_synthetic(r) for r in ok)


def _loss_panels(results: list[CellResult], groups, precisions: list[str]) -> list[dict[str, Any]]:
    """Per workload x framework: each precision's per-step losses (the first ok repeat's)."""
    panels = []
    for workload, framework in groups:
        curves = []
        for precision in precisions:
            match = next((r for r in results if r.status == "ok" and r.workload == workload
                          and r.framework == framework and r.precision == precision), None)
            if match is None:
                continue
            losses = _step_losses(match.metrics or {})
            if losses:
                curves.append({"precision": precision, "repeat": match.repeat, "losses": losses})
        panels.append({"workload": workload, "framework": framework, "curves": curves})
    return panels


def _step_losses(metrics: dict[str, Any]) -> list[float]:
    """Every step's training loss, epochs concatenated, from ``step_losses`` (a list per epoch)."""
    epochs = metrics.get("step_losses")
    if not isinstance(epochs, list):
        return []
    flat: list[float] = []
    for epoch in epochs:
        values = epoch if isinstance(epoch, list) else [epoch]
        flat.extend(float(v) if _finite(v) else math.nan for v in values)
    return flat


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float made ``null``."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
