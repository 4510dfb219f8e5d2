"""``amp-suite compare BASE NEW``: did a change make AMP better or worse?

Two sweep directories (two machines, two framework versions, two commits, a
GPU and another) are matched cell by cell: the same workload, framework,
precision, device count and device kind.  For each matched cell and metric
(throughput, speed-up over fp32, peak memory, validation accuracy; for a
token workload also tokens/s and validation bits per character) the
comparison gives BASE, NEW, their ratio NEW/BASE with a 95% interval and a
verdict.

The two sweeps ran apart, so nothing pairs their repeats: each side is a log
mean with the variance of that mean (:class:`~amp_suite.report.intervals.LogEstimate`)
and the ratio's interval is Welch's t-interval on the difference of the log
means.  BASE and NEW are each side's geometric mean over its runs (the exp of
its log mean), so NEW/BASE is their ratio.  Each side's spread comes from its
repeats (two or more fresh processes) and, in a sweep with seeds, from its
seeds: a seed is one more run of the same cell, so accuracy's spread over
seeds is part of its interval.  A side with one run shows that run's figure
and falls back on the spread of its process's timed windows (centred on the
figure), which misses the process-to-process variation and is said so.
A speed-up's repeats are the paired per-repeat ratios of that sweep.  A ratio
whose interval contains 1.0 is "no measurable difference"; where either
side has no spread to judge by (one repeat of one timed window), the ratio
gets no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from amp_suite.comparison_environment import environment_differences
from amp_suite.precision import BASELINE, PRECISIONS
from amp_suite.records import CellResult
from amp_suite.records.definition import definition_changes, shown_value
from amp_suite.report.intervals import Interval, LogEstimate, log_interval, paired_ratios
from amp_suite.report.settings_match import PRECISION_OPTIONS, settings_key
from amp_suite.report.superseded import current_results

MIB = 1024 * 1024
# The first line of every comparison: how `compare --out` knows a file it may replace.
FIRST_LINE = "# amp-suite compare"
# Metrics compared, in order: (key, title, which way is better, verdict words for higher / lower).
METRICS = (
    ("throughput", "Throughput, images/s", "higher", ("faster", "slower")),
    ("speedup", "Speed-up over fp32", "higher", ("faster", "slower")),
    ("peak_memory_mib", "Peak memory, MiB", "lower", ("more memory", "less memory")),
    ("val_accuracy", "Validation accuracy", "higher", ("higher", "lower")),
    # Token workloads only (language models): their throughput in tokens and their validation loss in bits.
    ("tokens_per_s", "Throughput, tokens/s", "higher", ("faster", "slower")),
    ("val_bits_per_char", "Validation bits per character", "lower", ("more bits", "fewer bits")),
)
NO_DIFFERENCE = "no measurable difference"
NO_VERDICT = "no verdict (no spread measured)"
# Metrics whose regression --fail-above checks.
GUARDED = ("throughput", "speedup")
COLUMNS = ["metric", "workload", "framework", "precision", "devices", "device_kind", "mode", "batch_size", "base",
           "new", "ratio", "low", "high", "basis", "verdict"]
def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _devices(result: CellResult) -> int:
    value = (result.config or {}).get("devices", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _memory(metrics: dict[str, Any]) -> float | None:
    for key in ("device_peak_memory_bytes", "peak_rss_bytes_max_rank", "peak_rss_bytes"):
        value = _num(metrics.get(key))
        if value is not None:
            return value / MIB
    return None


def _cell_key(result: CellResult) -> tuple[str, str, str, int, str, str, int]:
    """(workload, framework, precision, devices, device kind, mode, batch): the mode and batch only where the sweep
    named them (``--modes``, ``--batch-sizes``), so sweeps of default modes match whatever each framework ran."""
    config = result.config or {}
    batch = config.get("batch_size") if config.get("batch_axis") else 0
    return (result.workload, result.framework, result.precision, _devices(result),
            (result.device or {}).get("kind", "") or "–", str(config.get("mode") or ""),
            batch if isinstance(batch, int) else 0)


@dataclass
class Side:
    """One sweep's figures of one cell: per run (seed, repeat), and the timed windows of each run."""

    figures: dict[str, dict[tuple[int, int], float]] = field(default_factory=dict)
    windows: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    # what its ok cells ran but for precision and seed (amp_suite.report.settings_match): a speed-up is taken
    # only over an fp32 of the same settings, as the report takes it
    settings: set[str] = field(default_factory=set)


def _run_of(result: CellResult) -> tuple[int, int]:
    """(seed, repeat): the run of a cell; a sweep's seeds are runs of one cell, as its repeats are."""
    seed = (result.config or {}).get("seed", 0)
    return (seed if isinstance(seed, int) and not isinstance(seed, bool) else 0, int(result.repeat))


def _sides(results: list[CellResult]) -> dict[tuple, Side]:
    out: dict[tuple, Side] = {}
    for r in results:
        side = out.setdefault(_cell_key(r), Side())
        if r.status != "ok":
            continue
        side.settings.add(settings_key(r, PRECISION_OPTIONS))
        m = r.metrics or {}
        synthetic = (r.config or {}).get("dataset") == "synthetic" or m.get("dataset_substituted")
        for key, value in (("throughput", _num(m.get("throughput"))), ("peak_memory_mib", _memory(m)),
                           ("val_accuracy", None if synthetic else _num(m.get("val_accuracy"))),
                           ("tokens_per_s", _num(m.get("tokens_per_s"))),
                           ("val_bits_per_char", None if synthetic else _num(m.get("val_bits_per_char")))):
            if value is not None:
                side.figures.setdefault(key, {})[_run_of(r)] = value
        windows = [w for w in (_num(x) for x in (m.get("window_throughputs") or [])) if w]
        if windows:
            side.windows[_run_of(r)] = windows
    return out


def _centred(estimate: LogEstimate | None, value: float) -> LogEstimate | None:
    """A one-run side's estimate centred on the run's own figure: its timed windows give only the spread."""
    return replace(estimate, mean=math.log(value)) if estimate is not None and value > 0 else None


def _estimate(side: Side, metric: str, sides: dict[tuple, Side], key: tuple) -> tuple[float, LogEstimate | None]:
    """The side's figure and its log estimate (None: no spread to judge by), the estimate centred on the figure.

    A figure is the geometric mean over the side's runs (repeats and seeds; one
    run: its own figure); a speed-up, the geometric mean of the paired
    per-repeat ratios, the figure the report shows for the same sweep.
    """
    if metric == "speedup":
        base = sides.get((*key[:2], BASELINE, *key[3:]))
        if base is None or key[2] == BASELINE:
            return math.nan, None
        if len(side.settings | base.settings) > 1 and "" not in side.settings | base.settings:
            return math.nan, None  # fp32 of other steps, data or versions: no speed-up of AMP's
        ratios = paired_ratios(side.figures.get("throughput", {}), base.figures.get("throughput", {}))
        if not ratios:
            return math.nan, None
        value = log_interval(ratios).value
        if len(ratios) >= 2:
            return value, LogEstimate.of(ratios, "repeats")
        mine, theirs = _window_estimate(side), _window_estimate(base)
        return value, _centred(mine - theirs, value) if mine is not None and theirs is not None else None
    values = side.figures.get(metric, {})
    if not values:
        return math.nan, None
    estimate = LogEstimate.of(values.values(), "repeats")
    if estimate is not None:
        return math.exp(estimate.mean), estimate
    # One run, or runs of which at most one is above zero: the others have no logarithm, as in the estimate.
    value = max(values.values())
    if metric == "throughput" and len(values) == 1:
        return value, _centred(_window_estimate(side), value)
    return value, None


def _window_estimate(side: Side) -> LogEstimate | None:
    """A one-repeat side's log throughput from its process's timed windows."""
    if len(side.figures.get("throughput", {})) != 1 or not side.windows:
        return None
    return LogEstimate.of(next(iter(side.windows.values())), "timed windows")


def _verdict(interval: Interval, better: str, words: tuple[str, str], exact: bool) -> str:
    if interval.known:
        if interval.contains(1.0):
            return NO_DIFFERENCE
        up = interval.low > 1.0
        return words[0] if up else words[1]
    if exact:  # identical figures without spread (a deterministic accuracy)
        return NO_DIFFERENCE
    return NO_VERDICT


def compare_results(base: list[CellResult], new: list[CellResult]) -> pd.DataFrame:
    """One row per matching cell and metric (:data:`COLUMNS`); see the module for the method."""
    base_sides, new_sides = _sides(base), _sides(new)
    rows = []
    for metric, _title, better, words in METRICS:
        for key in base_sides:
            if key not in new_sides:
                continue
            b_value, b_est = _estimate(base_sides[key], metric, base_sides, key)
            n_value, n_est = _estimate(new_sides[key], metric, new_sides, key)
            if math.isnan(b_value) or math.isnan(n_value):
                continue
            ratio = n_value / b_value if b_value else math.nan  # the estimates are centred on these figures
            if b_est is not None and n_est is not None:
                interval = (n_est - b_est).interval()
                basis = interval.basis
            else:
                interval, basis = Interval(ratio), ""
            rows.append({"metric": metric, "workload": key[0], "framework": key[1], "precision": key[2],
                         "devices": key[3], "device_kind": key[4], "mode": key[5], "batch_size": key[6],
                         "base": b_value, "new": n_value,
                         "ratio": ratio,
                         "low": interval.low, "high": interval.high, "basis": basis,
                         "verdict": _verdict(interval, better, words, exact=b_value == n_value)})
    return pd.DataFrame(rows, columns=COLUMNS)


def unjudged(frame: pd.DataFrame) -> pd.DataFrame:
    """Throughput and speed-up rows without a verdict: ``--fail-above`` cannot judge them."""
    if frame.empty:
        return frame
    return frame[frame["metric"].isin(GUARDED) & (frame["verdict"] == NO_VERDICT)]


def regressions(frame: pd.DataFrame, percent: float) -> pd.DataFrame:
    """Throughput and speed-up rows that are slower beyond ``percent`` and outside the noise.

    A row counts when its verdict is "slower" (the interval lies wholly below
    1.0) and its ratio is below ``1 - percent / 100``.
    """
    if frame.empty:
        return frame
    limit = 1.0 - percent / 100.0
    return frame[frame["metric"].isin(GUARDED) & (frame["verdict"] == "slower") & (frame["ratio"] < limit)]


def definition_differences(base: list[CellResult], new: list[CellResult], limit: int = 3) -> list[str]:
    """``definition workload.input_size: 28 → 56 (3 cells: torch/mnist_cnn/fp32, ...)`` for every value of the
    cells' definitions (:mod:`amp_suite.records.definition`) that differs between matched cells; one line saying
    so where a side recorded no definition (a sweep stored before fingerprints)."""
    def definitions(results: list[CellResult]) -> dict[tuple, dict[str, Any]]:
        found: dict[tuple, dict[str, Any]] = {}
        for result in results:
            if result.definition:
                found[_cell_key(result)] = result.definition  # the latest stored line wins
        return found

    base_defs, new_defs = definitions(base), definitions(new)
    matched = {_cell_key(r) for r in base} & {_cell_key(r) for r in new}
    cells: dict[str, list[str]] = {}
    for key in sorted(matched & set(base_defs) & set(new_defs)):
        for change in definition_changes(base_defs[key], new_defs[key]):
            text = f"definition {change.section}.{change.path}: {shown_value(change.before)} → " \
                   f"{shown_value(change.after)}"
            cells.setdefault(text, []).append(f"{key[1]}/{key[0]}/{key[2]}")
    lines = []
    for text, names in cells.items():
        unique = list(dict.fromkeys(names))
        shown = ", ".join(unique[:limit]) + (f" and {len(unique) - limit} more" if len(unique) > limit else "")
        lines.append(f"{text} ({len(unique)} cell{'' if len(unique) == 1 else 's'}: {shown})")
    for name, defs in (("BASE", base_defs), ("NEW", new_defs)):
        missing = len(matched - set(defs))
        if missing:
            lines.append(f"definition: {name} recorded none for {missing} matched cell{'' if missing == 1 else 's'} "
                         "(stored before fingerprints): their workloads, data and options cannot be compared")
    return lines


def _busy(results: list[CellResult]) -> int:
    from amp_suite.machine.noise import is_busy_flag

    return sum(1 for r in results if r.status == "ok"
               and any(is_busy_flag(f) for f in (r.metrics or {}).get("measurement_flags") or []))


def _fmt(value: float, metric: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if metric == "speedup":
        return f"{value:.2f}x"
    if metric == "val_accuracy":
        return f"{value * 100:.2f}%"
    if metric == "val_bits_per_char":
        return f"{value:.4f}"
    return f"{value:,.0f}"


def render_comparison(base_dir: str | Path, new_dir: str | Path, frame: pd.DataFrame,
                      base: tuple[list[CellResult], dict[str, Any]],
                      new: tuple[list[CellResult], dict[str, Any]],
                      superseded: tuple[list[str], list[str]] = ([], [])) -> str:
    """The markdown comparison: environment differences, one table per metric, unmatched cells; ``superseded``:
    each side's cells left out (:func:`amp_suite.report.superseded.current_results`)."""
    from amp_suite.report.normalize import table_text

    out = [FIRST_LINE, "",
           f"- BASE: {base_dir} ({base[1].get('date', '?')})", f"- NEW: {new_dir} ({new[1].get('date', '?')})", "",
           "## Environment differences", ""]
    diffs = environment_differences(base[1], new[1]) + definition_differences(base[0], new[0])
    out += [f"- {table_text(d)}" for d in diffs] or ["- none recorded (same versions, device, CPU flags, settings "
                                                     "and cell definitions)"]
    out.append("")
    for name, left_out in (("BASE", superseded[0]), ("NEW", superseded[1])):
        if left_out:
            out += [f"> **{name} left out {len(left_out)} superseded cell{'' if len(left_out) == 1 else 's'}** "
                    "(a later run of the same row with other settings; the latest's value -> its): "
                    f"{table_text('; '.join(left_out[:6]))}{' and more' if len(left_out) > 6 else ''}.", ""]
    for name, results in (("BASE", base[0]), ("NEW", new[0])):
        busy = _busy(results)
        if busy:
            out += [f"> **{name} ran on a busy machine:** {busy} of its cells {'was' if busy == 1 else 'were'} "
                    "flagged (other processes competed for the CPU); their figures are likely low and noisy.", ""]
    out += ["BASE and NEW are each sweep's geometric mean over its repeats (a single repeat: its own figure), and "
            "NEW/BASE is their ratio with its 95% interval: Welch's t-interval on log figures, each side's spread "
            "from its repeats or, for a side with a single repeat, from its process's timed windows (which miss "
            "the variation between processes: run both with `--repeats 3` for a fair verdict). A verdict is "
            f"given only outside the noise: an interval containing 1.0 is \"{NO_DIFFERENCE}\".", ""]
    with_devices = not frame.empty and bool((frame["devices"] != 1).any())
    with_modes = not frame.empty and bool((frame["mode"] != "").any())
    with_batches = not frame.empty and bool((frame["batch_size"] != 0).any())
    for metric, title, better, _words in METRICS:
        rows = frame[frame["metric"] == metric] if not frame.empty else frame
        if rows.empty:
            continue
        order = {p: i for i, p in enumerate(PRECISIONS)}
        rows = rows.sort_values(by=["workload", "framework", "mode", "batch_size", "precision"],
                                key=lambda s: s.map(order) if s.name == "precision" else s)
        records = []
        for r in rows.itertuples():
            ratio = "–" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
            if not math.isnan(r.low):
                ratio += f" ({r.low:.3f}–{r.high:.3f})"
            records.append({"workload": table_text(r.workload), "framework": table_text(r.framework),
                            "device": table_text(r.device_kind),
                            **({"devices": str(r.devices)} if with_devices else {}),
                            **({"mode": table_text(r.mode or "–")} if with_modes else {}),
                            **({"batch": str(r.batch_size or "–")} if with_batches else {}),
                            "precision": table_text(r.precision), "BASE": _fmt(r.base, metric),
                            "NEW": _fmt(r.new, metric), "NEW/BASE (95%)": ratio,
                            "spread from": r.basis or "–", "verdict": r.verdict})
        out += [f"## {title} ({better} is better)", "",
                pd.DataFrame(records).to_markdown(index=False, disable_numparse=True), ""]
        if metric == "val_accuracy":
            out += ["Accuracy has a verdict only with two or more repeats on both sides (or identical figures).", ""]
    base_keys, new_keys = {_cell_key(r) for r in base[0]}, {_cell_key(r) for r in new[0]}
    only = [("BASE", sorted(base_keys - new_keys)), ("NEW", sorted(new_keys - base_keys))]
    if any(keys for _, keys in only):
        out += ["## Cells in one run only", ""]
        for name, keys in only:
            if keys:
                out.append(f"- {name} only: " + table_text("; ".join(
                    f"{w} / {f} / {p}" + (f" / {m}" if m else "") + (f" / batch {b}" if b else "")
                    + (f" / {d} devices" if d != 1 else "") + f" / {k}"
                    for w, f, p, d, k, m, b in keys)))
        out.append("")
    return "\n".join(out)


def compare(base: str | Path, new: str | Path) -> pd.DataFrame:
    """One row per matching cell and metric of two sweep directories (:data:`COLUMNS`).

    ``frame.attrs`` holds ``environment_differences`` and ``definition_differences`` (lines), ``base_only``
    and ``new_only`` (cell keys present in one directory only) and
    ``markdown`` (what ``amp-suite compare`` prints).
    """
    from amp_suite.sweep.stored import UNKNOWN_IN_COMPARISON, load_results

    base_loaded, new_loaded = (load_results(base, missing_environment=UNKNOWN_IN_COMPARISON),
                               load_results(new, missing_environment=UNKNOWN_IN_COMPARISON))
    # within each folder, a cell a later run of its row superseded with other settings is left out, and named
    (base_kept, base_superseded), (new_kept, new_superseded) = (current_results(base_loaded[0]),
                                                                current_results(new_loaded[0]))
    base_loaded, new_loaded = (base_kept, base_loaded[1]), (new_kept, new_loaded[1])
    frame = compare_results(base_loaded[0], new_loaded[0])
    base_keys = {_cell_key(r) for r in base_loaded[0]}
    new_keys = {_cell_key(r) for r in new_loaded[0]}
    frame.attrs.update(
        environment_differences=environment_differences(base_loaded[1], new_loaded[1]),
        definition_differences=definition_differences(base_loaded[0], new_loaded[0]),
        base_only=sorted(base_keys - new_keys), new_only=sorted(new_keys - base_keys),
        superseded={"base": base_superseded, "new": new_superseded},
        markdown=render_comparison(base, new, frame, base_loaded, new_loaded,
                                   superseded=(base_superseded, new_superseded)))
    return frame
