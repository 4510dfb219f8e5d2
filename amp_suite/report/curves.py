"""Learning curves over seeds: each precision's validation loss and accuracy during training, with its band.

A cell run with ``curve_every`` stores its curve (``metrics["learning_curve"]``,
written by :mod:`amp_suite.cell.curve`).  :func:`curve_points` lays every
stored point out as a row; :func:`curve_bands` gathers, per workload,
framework, precision and step, the seeds that have a point there (a seed's
repeats averaged first) into a median and a min–max band; :func:`curve_lines`
is the report's section.  The data of a chart with one band per precision
is :func:`curve_bands`' frame.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from amp_suite.precision import PRECISIONS
from amp_suite.records import CellResult
from amp_suite.report.frames import cell_seed

if TYPE_CHECKING:
    import pandas as pd

POINT_COLUMNS = ["workload", "framework", "precision", "seed", "repeat", "steps", "val_loss", "val_accuracy"]
BAND_COLUMNS = ["workload", "framework", "precision", "steps", "seeds", "val_loss_median", "val_loss_min",
                "val_loss_max", "val_accuracy_median", "val_accuracy_min", "val_accuracy_max"]
# The most points of one curve the report's table shows (evenly spread, the last always among them).
SHOWN_POINTS = 6


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _points(result: CellResult) -> list[tuple[int, float | None, float | None]]:
    """The cell's stored points ``(steps, val_loss, val_accuracy)``; accuracy None on synthetic data."""
    curve = (result.metrics or {}).get("learning_curve")
    if result.status != "ok" or not isinstance(curve, dict) or not isinstance(curve.get("points"), list):
        return []
    synthetic = (result.config or {}).get("dataset") == "synthetic" or (result.metrics or {}).get(
        "dataset_substituted")
    out = []
    for point in curve["points"]:
        if not isinstance(point, list) or len(point) != 3:
            continue
        steps, loss, accuracy = (_number(v) for v in point)
        if steps is not None:
            out.append((int(steps), loss, None if synthetic else accuracy))
    return out


def curve_points(results: Iterable[CellResult]) -> pd.DataFrame:
    """One row per stored learning-curve point of the ok cells (:data:`POINT_COLUMNS`)."""
    import pandas as pd

    rows = [{"workload": r.workload, "framework": r.framework, "precision": r.precision,
             "seed": cell_seed(r.config or {}), "repeat": r.repeat, "steps": steps, "val_loss": loss,
             "val_accuracy": accuracy}
            for r in results for steps, loss, accuracy in _points(r)]
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def _band(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return math.nan, math.nan, math.nan
    return statistics.median(values), min(values), max(values)


def curve_bands(points: pd.DataFrame) -> pd.DataFrame:
    """Per workload, framework, precision and step: the median over seeds and the min–max band (:data:`BAND_COLUMNS`)."""
    import pandas as pd

    rows = []
    for key, group in points.groupby(["workload", "framework", "precision", "steps"], sort=False):
        per_seed = group.groupby("seed")[["val_loss", "val_accuracy"]].mean()
        loss = [float(v) for v in per_seed["val_loss"].dropna()]
        accuracy = [float(v) for v in per_seed["val_accuracy"].dropna()]
        rows.append(dict(zip(BAND_COLUMNS, [*key, len(per_seed), *_band(loss), *_band(accuracy)], strict=True)))
    bands = pd.DataFrame(rows, columns=BAND_COLUMNS)
    order = {p: i for i, p in enumerate(PRECISIONS)}  # fp32 first, as every table has it
    return bands.assign(_order=bands["precision"].map(lambda p: order.get(p, len(order)))).sort_values(
        ["workload", "framework", "_order", "precision", "steps"], kind="stable", ignore_index=True).drop(
        columns="_order")


def _shown_steps(steps: list[int]) -> list[int]:
    if len(steps) <= SHOWN_POINTS:
        return steps
    picks = {round(i * (len(steps) - 1) / (SHOWN_POINTS - 1)) for i in range(SHOWN_POINTS)}
    return [steps[i] for i in sorted(picks)]


def _band_text(median: float, low: float, high: float, pattern: str) -> str:
    if math.isnan(median):
        return "n/a"
    if low == high:
        return pattern.format(median)
    return f"{pattern.format(median)} ({pattern.format(low)}–{pattern.format(high)})"


def curve_lines(results: list[CellResult], cell=str) -> list[str]:
    """The report's section on learning curves; empty where no cell stored one."""
    points = curve_points(results)
    if points.empty:
        return []
    bands = curve_bands(points)
    out = ["## Learning curves (validation during training, median over seeds and min–max)", "",
           "Validation loss and accuracy at the points `curve_every` declared (each point evaluated between "
           "phases, outside the timed windows); a band gathers the seeds with a point at that step, each seed's "
           "repeats averaged first. `amp_suite.learning_curves(DIR)` returns every point.", ""]
    for workload, group in bands.groupby("workload", sort=False):
        out += [f"{cell(workload)}:", "",
                "| framework | precision | step | validation accuracy | validation loss | seeds |",
                "| --- | --- | --- | --- | --- | --- |"]
        for (framework, precision), curve in group.groupby(["framework", "precision"], sort=False):
            shown = set(_shown_steps([int(s) for s in curve["steps"]]))
            for row in curve.itertuples():
                if int(row.steps) not in shown:
                    continue
                accuracy = _band_text(row.val_accuracy_median * 100, row.val_accuracy_min * 100,
                                      row.val_accuracy_max * 100, "{:.2f}%")
                loss = _band_text(row.val_loss_median, row.val_loss_min, row.val_loss_max, "{:.4f}")
                out.append(f"| {cell(framework)} | {cell(precision)} | {int(row.steps)} | {accuracy} | {loss} | "
                           f"{int(row.seeds)} |")
        out.append("")
    return out
