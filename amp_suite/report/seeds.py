"""Seeds: does AMP change what a model learns, beyond the noise of the seed?

A sweep with a seed axis (``--seeds``) trains every cell from several seeds;
a seed fixes the initial weights and the data order, the same in every
framework and precision.  So for one workload and framework, seed ``s`` in an
AMP precision and seed ``s`` in fp32 start alike, and their difference is
what the precision changed.  This module pairs them by seed (the repeats of
one seed averaged first) and judges the paired differences with
:mod:`amp_suite.report.equivalence`:

* validation accuracy, in percentage points, against the sweep's
  ``equivalence_margin``: equivalent, better, worse or inconclusive (with the
  seeds that would likely settle it);
* the final validation loss, which has no declared margin: its interval, and
  ``lower`` / ``higher`` where the interval excludes zero, else ``no
  measurable difference``;
* the same between frameworks at fp32 (each framework against the first of
  the sweep): they start from the same weights, do they learn the same?

It also gives the time to target accuracy over seeds (the median over seeds
and its range).  :func:`equivalence_frame` is the table (``amp_suite.equivalence``
returns it), :func:`add_accuracy_equivalence` puts the accuracy verdict on
the summary rows the verdict block reads, and :func:`seeds_lines` is the
report's section.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from amp_suite.precision import BASELINE, REFERENCE_PRECISIONS
from amp_suite.report.equivalence import equivalence, half_width, paired_differences

if TYPE_CHECKING:
    import pandas as pd

# The margin of a sweep that recorded none (an earlier version's): the setting's default.
DEFAULT_MARGIN_PT = 0.5
# Where a comparison happens, besides what is compared: a summary row's identity without framework and precision.
# The mode counts only in a sweep with a mode axis (--modes): otherwise each framework ran its own default mode
# (eager in PyTorch, a compiled step in JAX), and the frameworks are still compared.
PLACE = ("workload", "device_kind", "devices", "mode", "batch_size")
# Comparisons: an AMP precision against fp32 in one framework, or one framework against another at fp32.
PRECISION, FRAMEWORK = "precision", "framework"
# The paired figures: (column of the per-cell frame, figure name, scale to the shown unit, unit, higher is better).
FIGURES = (("val_accuracy", "val_accuracy", 100.0, "points", True),
           ("val_loss", "val_loss", 1.0, "", False))
# The loss's words, where its interval excludes zero or does not.
LOSS_WORDS = ("higher", "lower", "no measurable difference")

EQUIVALENCE_COLUMNS = ["comparison", "workload", "device_kind", "devices", "mode", "batch_size", "framework",
                       "precision", "control", "figure", "unit", "seeds", "mean", "low", "high", "margin", "verdict",
                       "seeds_to_settle"]


@dataclass(frozen=True)
class PairedFigure:
    """One row of :func:`equivalence_frame`: ``framework``/``precision`` against ``control`` over seeds.

    ``control`` is ``fp32`` for a precision comparison and the other
    framework for a framework comparison (then ``precision`` is fp32).
    ``mean``, ``low`` and ``high`` are the paired difference (treated −
    control) in ``unit`` and its 95% interval; ``margin`` is NaN for a figure
    without a declared margin (the loss).
    """

    comparison: str
    workload: str
    device_kind: str
    devices: int
    mode: str
    batch_size: int
    framework: str
    precision: str
    control: str
    figure: str
    unit: str
    seeds: int
    mean: float
    low: float
    high: float
    margin: float
    verdict: str
    seeds_to_settle: int | None


def margin_of(environment: dict[str, Any] | None) -> float:
    """The sweep's ``equivalence_margin`` as recorded with it (the default where it recorded none)."""
    value = ((environment or {}).get("settings") or {}).get("equivalence_margin")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return DEFAULT_MARGIN_PT


def has_seed_axis(cells: pd.DataFrame) -> bool:
    """Whether the sweep ran several seeds as an axis (``--seeds``) with a finished cell each (cells of runs with
    another ``--seed`` are not an axis: the settings rule keeps them apart)."""
    if cells.empty or "seed" not in cells:
        return False
    ok = cells[cells["status"] == "ok"]
    if "seed_axis" in ok:
        ok = ok[ok["seed_axis"].fillna(False).astype(bool)]
    return bool(ok["seed"].nunique() > 1)


def per_seed(cells: pd.DataFrame, column: str) -> dict[tuple, dict[int, float]]:
    """``{(place..., framework, precision): {seed: figure}}`` over the ok cells, each seed's repeats averaged."""
    ok = cells[cells["status"] == "ok"]
    runs: dict[tuple, dict[int, list[float]]] = {}
    for row in ok.itertuples():
        value = _number(getattr(row, column))
        if value is None:
            continue
        key = (*_place(row._asdict()), row.framework, row.precision)
        runs.setdefault(key, {}).setdefault(int(row.seed), []).append(value)
    return {key: {seed: statistics.fmean(values) for seed, values in seeds.items()} for key, seeds in runs.items()}


def _place(row: dict[str, Any]) -> tuple:
    """The row's place (:data:`PLACE`): its mode only where the sweep named modes."""
    return tuple("" if name == "mode" and not row.get("mode_axis") else _place_value(name, row.get(name))
                 for name in PLACE)


def _place_value(name: str, value: Any) -> Any:
    if name in ("devices", "batch_size"):
        number = _number(value)
        return int(number) if number is not None else 0
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def loss_difference(differences: list[float]) -> tuple[float, float, float, str]:
    """Mean, 95% interval and words of paired loss differences: ``higher``/``lower`` where the interval
    excludes zero, else ``no measurable difference``; ``inconclusive`` with fewer than two seeds."""
    if not differences:
        return math.nan, math.nan, math.nan, "inconclusive"
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return mean, math.nan, math.nan, "inconclusive"
    half = half_width(statistics.stdev(differences), len(differences))
    low, high = mean - half, mean + half
    words = LOSS_WORDS[0] if low > 0 else LOSS_WORDS[1] if high < 0 else LOSS_WORDS[2]
    return mean, low, high, words


def _paired(comparison: str, place: tuple, framework: str, precision: str, control: str,
            treated_seeds: dict[int, float], control_seeds: dict[int, float], figure: tuple,
            margin: float) -> PairedFigure | None:
    column, name, scale, unit, higher_is_better = figure
    differences = [d * scale for d in paired_differences(treated_seeds, control_seeds)]
    if not differences:
        return None
    workload, kind, devices, mode, batch = place
    if column == "val_accuracy":
        result = equivalence(differences, margin, figure=name, higher_is_better=higher_is_better)
        mean, low, high, verdict, settle, shown_margin = (result.mean, result.low, result.high, result.verdict,
                                                          result.seeds_to_settle, margin)
    else:
        mean, low, high, verdict = loss_difference(differences)
        settle, shown_margin = None, math.nan
    return PairedFigure(comparison, workload, kind, devices, mode, batch, framework, precision, control, name, unit,
                        len(differences), mean, low, high, shown_margin, verdict, settle)


def paired_figures(cells: pd.DataFrame, margin: float) -> list[PairedFigure]:
    """Every paired figure of the sweep (see the module): precisions against fp32, then frameworks at fp32."""
    if cells.empty or "seed" not in cells:
        return []
    out: list[PairedFigure] = []
    for figure in FIGURES:
        values = per_seed(cells, figure[0])
        for key, seeds in values.items():
            *place, framework, precision = key
            if precision == BASELINE or precision in REFERENCE_PRECISIONS:
                continue
            control = values.get((*place, framework, BASELINE))
            if control:
                row = _paired(PRECISION, tuple(place), framework, precision, BASELINE, seeds, control, figure, margin)
                if row is not None:
                    out.append(row)
    for figure in FIGURES:
        values = per_seed(cells, figure[0])
        first: dict[tuple, str] = {}
        for key in values:
            *place, framework, precision = key
            if precision == BASELINE:
                first.setdefault(tuple(place), framework)
        for key, seeds in values.items():
            *place, framework, precision = key
            reference = first.get(tuple(place))
            if precision != BASELINE or reference is None or reference == framework:
                continue
            row = _paired(FRAMEWORK, tuple(place), framework, BASELINE, reference, seeds,
                          values[(*place, reference, BASELINE)], figure, margin)
            if row is not None:
                out.append(row)
    return out


def equivalence_frame(cells: pd.DataFrame, margin: float = DEFAULT_MARGIN_PT) -> pd.DataFrame:
    """One row per paired figure (:data:`EQUIVALENCE_COLUMNS`), from the per-cell frame of a sweep."""
    import pandas as pd

    return pd.DataFrame([asdict(row) for row in paired_figures(cells, margin)], columns=EQUIVALENCE_COLUMNS)


# --- the summary rows the verdict block reads ------------------------------------------------

# Columns :func:`add_accuracy_equivalence` adds to the summary frame.
SUMMARY_EQUIVALENCE_COLUMNS = ("accuracy_seeds", "accuracy_difference_pt", "accuracy_difference_low_pt",
                               "accuracy_difference_high_pt", "accuracy_margin_pt", "accuracy_equivalence",
                               "accuracy_seeds_to_settle")


def add_accuracy_equivalence(summary: pd.DataFrame, cells: pd.DataFrame, margin: float) -> None:
    """Each AMP summary row's accuracy verdict over seeds (empty where fewer than two seeds paired)."""
    found = {(row.workload, row.device_kind, row.devices, row.mode, row.batch_size, row.framework, row.precision): row
             for row in paired_figures(cells, margin)
             if row.comparison == PRECISION and row.figure == "val_accuracy" and row.seeds >= 2}
    columns: dict[str, list[Any]] = {name: [] for name in SUMMARY_EQUIVALENCE_COLUMNS}
    for _, row in summary.iterrows():
        key = (*_place(dict(row)), row["framework"], row["precision"])
        paired = found.get(key)
        columns["accuracy_seeds"].append(paired.seeds if paired else 0)
        columns["accuracy_difference_pt"].append(paired.mean if paired else math.nan)
        columns["accuracy_difference_low_pt"].append(paired.low if paired else math.nan)
        columns["accuracy_difference_high_pt"].append(paired.high if paired else math.nan)
        columns["accuracy_margin_pt"].append(paired.margin if paired else math.nan)
        columns["accuracy_equivalence"].append(paired.verdict if paired else "")
        columns["accuracy_seeds_to_settle"].append(paired.seeds_to_settle if paired else None)
    for name, values in columns.items():
        summary[name] = values


def accuracy_verdict_text(row: dict[str, Any]) -> str | None:
    """``equivalent within ±0.5 pt: [-0.21, +0.35] over 5 seeds`` for a summary row with a verdict, else None."""
    verdict = row.get("accuracy_equivalence")
    if not verdict:
        return None
    text = (f"{verdict} within ±{row['accuracy_margin_pt']:g} pt: [{row['accuracy_difference_low_pt']:+.2f}, "
            f"{row['accuracy_difference_high_pt']:+.2f}] over {int(row['accuracy_seeds'])} seeds")
    settle = row.get("accuracy_seeds_to_settle")
    if verdict == "inconclusive" and settle is not None and not (isinstance(settle, float) and math.isnan(settle)):
        text += f"; about {int(settle)} would settle it"
    return text


# --- the report's section --------------------------------------------------------------------

SEEDS_NOTE = ("Each seed fixes the initial weights and the data order, the same in every framework and precision, "
              "so seed s of an AMP precision is paired with seed s of fp32 (the repeats of one seed averaged "
              "first). Differences are AMP − fp32 (or a framework − the first framework, both at fp32) with a 95% "
              "t interval over the seeds. Accuracy: **equivalent** when the whole interval lies within ± the "
              "margin (two one-sided tests), **worse**/**better** when it lies wholly beyond it, else "
              "**inconclusive**, with the seeds that would likely settle it. Loss has no margin: **higher**/"
              "**lower** when its interval excludes 0.")


def _interval_text(row: PairedFigure, digits: int) -> str:
    if row.seeds < 2:
        return f"{row.mean:+.{digits}f} (1 seed, no interval)"
    return f"{row.mean:+.{digits}f} [{row.low:+.{digits}f}, {row.high:+.{digits}f}]"


def _where(place: dict[str, Any], varying: set[str]) -> str:
    """The workload, with the device kind, device count, mode and batch where the rows differ in them."""
    parts = [str(place["workload"])]
    if "device_kind" in varying:
        parts.append(str(place["device_kind"] or "–"))
    if "devices" in varying:
        parts.append(f"{place['devices']} devices")
    if "mode" in varying and place["mode"]:
        parts.append(str(place["mode"]))
    if "batch_size" in varying:
        parts.append(f"batch {place['batch_size']}")
    return " / ".join(parts)


def _table(rows: Iterable[PairedFigure], cell) -> list[str]:
    rows = list(rows)
    varying = {name for name in PLACE[1:] if len({getattr(row, name) for row in rows}) > 1}
    out = ["| workload | framework | against | accuracy, points (95% interval) | verdict | "
           "validation loss (95% interval) | loss | seeds |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_place: dict[tuple, dict[str, PairedFigure]] = {}
    for row in rows:
        key = (row.comparison, row.workload, row.device_kind, row.devices, row.mode, row.batch_size, row.framework,
               row.precision, row.control)
        by_place.setdefault(key, {})[row.figure] = row
    for figures in by_place.values():
        accuracy, loss = figures.get("val_accuracy"), figures.get("val_loss")
        first = accuracy or loss
        assert first is not None
        what = f"{first.framework} {first.precision}" if first.comparison == PRECISION else first.framework
        against = f"{first.control} fp32" if first.comparison == FRAMEWORK else first.control
        verdict = "n/a"
        if accuracy is not None:
            verdict = f"**{accuracy.verdict}** (±{accuracy.margin:g})"
            if accuracy.verdict == "inconclusive" and accuracy.seeds_to_settle is not None:
                verdict += f", about {accuracy.seeds_to_settle} seeds to settle"
        out.append(f"| {cell(_where(asdict(first), varying))} | {cell(what)} | {cell(against)} | "
                   f"{_interval_text(accuracy, 2) if accuracy else 'n/a'} | {verdict} | "
                   f"{_interval_text(loss, 4) if loss else 'n/a'} | {loss.verdict if loss else 'n/a'} | "
                   f"{first.seeds} |")
    return out + [""]


def time_to_target_over_seeds(cells: pd.DataFrame) -> list[dict[str, Any]]:
    """Per place, framework and precision with a target: the median time to target over seeds and its range.

    A seed's time is the mean of its repeats that reached the target; a seed
    none of whose repeats reached it counts as not reached.  Each row has the
    place's fields (:data:`PLACE`) beside ``framework`` and ``precision``.
    """
    if cells.empty or "target_accuracy" not in cells or "seed" not in cells:
        return []
    ok = cells[(cells["status"] == "ok") & cells["target_accuracy"].notna()]
    groups: dict[tuple, dict[int, list[float]]] = {}
    for row in ok.itertuples():
        key = (*_place(row._asdict()), row.framework, row.precision)
        seconds = _number(row.time_to_target_s) if bool(row.target_reached) else None
        groups.setdefault(key, {}).setdefault(int(row.seed), []).extend([] if seconds is None else [seconds])
    out = []
    for key, seeds in groups.items():
        times = [statistics.fmean(values) for values in seeds.values() if values]
        out.append({**dict(zip(PLACE, key[:len(PLACE)], strict=True)), "framework": key[-2], "precision": key[-1],
                    "seeds": len(seeds), "reached": len(times),
                    "median_s": statistics.median(times) if times else math.nan,
                    "min_s": min(times) if times else math.nan, "max_s": max(times) if times else math.nan})
    return out


def seeds_lines(cells: pd.DataFrame, margin: float, cell=str) -> list[str]:
    """The report's section on seeds (title, note, tables); empty for a sweep of one seed."""
    if not has_seed_axis(cells):
        return []
    rows = paired_figures(cells, margin)
    out = ["## Accuracy over seeds: does AMP change what the model learns?", "", SEEDS_NOTE, ""]
    precision_rows = [r for r in rows if r.comparison == PRECISION]
    framework_rows = [r for r in rows if r.comparison == FRAMEWORK]
    if precision_rows:
        out += [f"AMP precisions against fp32, margin ±{margin:g} points of validation accuracy:", "",
                *_table(precision_rows, cell)]
    else:
        out += ["_no AMP precision and fp32 share a seed with a validation accuracy (synthetic data has none, and "
                "cells that ran with other settings than fp32 are not paired)_", ""]
    if framework_rows:
        out += ["Frameworks against each other at fp32 (the same initial weights and data order):", "",
                *_table(framework_rows, cell)]
    target = time_to_target_over_seeds(cells)
    if target:
        out += ["Time to target accuracy over seeds (the median over seeds, min–max):", "",
                "| workload | framework | precision | median time to target | range | seeds that reached it |",
                "| --- | --- | --- | --- | --- | --- |"]
        varying = {name for name in PLACE[1:] if len({row[name] for row in target}) > 1}
        for row in target:
            median = f"{row['median_s']:.3g} s" if row["reached"] else "not reached"
            spread = f"{row['min_s']:.3g}–{row['max_s']:.3g} s" if row["reached"] else "–"
            out.append(f"| {cell(_where(row, varying))} | {cell(row['framework'])} | {cell(row['precision'])} | {median} "
                       f"| {spread} | {row['reached']} of {row['seeds']} |")
        out.append("")
    return out
