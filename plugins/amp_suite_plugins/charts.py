"""The charts reporter: PNG bar charts and loss curves beside ``report.md``.

Four charts, from the same summary as the report's tables (repeats folded
by their median).  Every framework and precision of the sweep keeps its place
and its legend entry: a failed cell's bar reads "n/a" and its status, a
precision that failed everywhere reads n/a everywhere.  The speed-up bars
carry the report's trust marks: ⚑ on a flagged cell's figure, "1 run" on a
figure from a single run (no interval), and the 95% interval as an error bar.

* ``chart-speedup.png``: speed-up over fp32 per framework and AMP precision
  (grouped bars, with a whisker for the 95% interval of each speed-up that
  has one: two or more repeats), the hardware ceiling of each bar marked when the machine
  is calibrated (``amp-suite calibrate``);
* ``chart-memory.png``: peak-memory ratio to fp32;
* ``chart-loss.png``: training loss per step, fp32 and each AMP precision,
  one panel per workload x framework (from ``step_losses`` when the results
  record them);
* ``chart-accuracy.png``: validation accuracy per precision, the difference
  from fp32 written on each bar (n/a on synthetic data);
* ``chart-curve-WORKLOAD.png``, when the sweep recorded learning curves
  (``--curve-every``): validation accuracy and loss against the step, the
  median and a min-max band over seeds per precision, one chart per workload;
* ``chart-batch.png``, when the sweep ran a workload at several batch sizes
  (``--batch-sizes``): the AMP speed-up over fp32 against the batch size, one
  line per framework, mode and AMP precision, and the peak-memory ratio
  beside it.

With several modes or batch sizes, each bar group is a workload x framework x
mode x batch size.

Every chart's plotted values are written to ``charts.json`` (the file, its
size in pixels and the series), so tests and other tools can check them
against ``results.csv``.  The figures have an opaque light background and
dark text, which read the same in dark and light viewers.  matplotlib is an
extra (``pip install 'amp-suite[charts]'``); without it this reporter writes
nothing and the report says why.  Turn it off with
``AMP_SUITE_DISABLE_PLUGINS=charts``.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

from amp_suite import hookimpl
from amp_suite.precision import BASELINE, PRECISIONS
from amp_suite.records import CellResult
from amp_suite.report.marks import FLAG_MARK, SINGLE_RUN_MARK
from amp_suite.safe_files import write_files_atomically

# Drawing uses matplotlib's object API and the Agg canvas directly: no pyplot,
# no global backend, no display needed.

SIDECAR = "charts.json"
CHARTS = {
    "speedup": "chart-speedup.png",
    "speedup_tf32": "chart-speedup-over-tf32.png",
    "memory": "chart-memory.png",
    "loss": "chart-loss.png",
    "accuracy": "chart-accuracy.png",
    "batch": "chart-batch.png",
}
DPI = 100
# What a bar without a figure reads (a failed cell, a precision that failed in every framework).
NOT_AVAILABLE = "n/a"
BACKGROUND = "#f7f7f5"  # opaque and light: dark text on it reads in dark and light viewers
TEXT = "#222222"
GRID = "#c8c8c8"
# Colour-blind-safe colours (Okabe and Ito) per precision.
COLOURS = {"fp32": "#555555", "tf32": "#0072B2", "amp_fp16": "#E69F00", "amp_bf16": "#009E73"}
EXTRA_COLOURS = ("#CC79A7", "#56B4E9", "#D55E00", "#F0E442")


def _have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _order(precisions) -> list[str]:
    precisions = list(dict.fromkeys(precisions))
    known = [p for p in PRECISIONS if p in precisions]
    return known + sorted(p for p in precisions if p not in known)


def _colour(precision: str, index: int) -> str:
    return COLOURS.get(precision, EXTRA_COLOURS[index % len(EXTRA_COLOURS)])


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _label(workload: str, framework: str, workloads: int, mode: str = "", batch: int | None = None) -> str:
    text = framework if workloads == 1 else f"{framework}\n{workload}"
    text += f"\n{mode}" if mode else ""
    text += f"\nbatch {batch}" if batch else ""
    return "\n".join(textwrap.fill(line, 14) for line in text.split("\n"))


# --- the data each chart plots (pure, no matplotlib) ---------------------------


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


# --- drawing ---------------------------------------------------------------------


def _figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, facecolor=BACKGROUND, layout="constrained")
    return fig


def _style(ax, *, title: str, ylabel: str, xlabel: str = "") -> None:
    ax.set_facecolor(BACKGROUND)
    ax.set_title(title, color=TEXT, fontsize=12)
    ax.set_ylabel(ylabel, color=TEXT)
    if xlabel:
        ax.set_xlabel(xlabel, color=TEXT)
    ax.tick_params(colors=TEXT)
    for spine in ax.spines.values():
        spine.set_color(GRID)
    ax.grid(axis="y", color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)


def _bar_width(groups: int) -> float:
    return max(6.0, 1.6 * groups + 3.0)


def _grouped_bars(data: dict[str, Any], *, title: str, ylabel: str, reference: float | None,
                  reference_label: str, value_format: str, marks: str | None = None,
                  annotate: str | None = None, empty_note: str = ""):
    groups, series = data["groups"], data["series"]
    fig = _figure(_bar_width(len(groups)), 4.8)
    ax = fig.add_subplot()
    _style(ax, title=title, ylabel=ylabel)
    count = max(len(series), 1)
    width = 0.8 / count
    xs = list(range(len(groups)))
    top = 0.0
    marked = whiskered = flags_shown = single_shown = False
    for index, item in enumerate(series):
        offsets = [x - 0.4 + width * (index + 0.5) for x in xs]
        heights = [v if v is not None else 0.0 for v in item["values"]]
        bars = ax.bar(offsets, heights, width * 0.92, label=item["precision"],
                      color=_colour(item["precision"], index), edgecolor=TEXT, linewidth=0.4)
        lows, highs = item.get("low") or [None] * len(xs), item.get("high") or [None] * len(xs)
        for offset, raw, low, high in zip(offsets, item["values"], lows, highs, strict=True):
            if raw is None or low is None or high is None:
                continue
            ax.errorbar([offset], [raw], yerr=[[max(raw - low, 0.0)], [max(high - raw, 0.0)]], fmt="none",
                        ecolor=TEXT, elinewidth=1.0, capsize=3, label=None if whiskered else "95% interval")
            whiskered = True
            top = max(top, high)
        statuses = item.get("status") or ["ok"] * len(xs)
        flagged = item.get("flagged") or [False] * len(xs)
        single = item.get("single_run") or [False] * len(xs)
        for bar, raw, extra, high, state, flag, one in zip(
                bars, item["values"], item.get(annotate or marks or "", [None] * len(xs)), highs, statuses, flagged,
                single, strict=True):
            if raw is None:  # a failed cell, or one that has no figure: the bar reads n/a, and why
                why = "" if state in ("ok", "not run") else f"\n{state}"
                ax.annotate(f"{NOT_AVAILABLE}{why}", (bar.get_x() + bar.get_width() / 2, 0), ha="center",
                            va="bottom", fontsize=8, color=TEXT, xytext=(0, 2), textcoords="offset points")
                continue
            text = value_format.format(raw)
            if flag:
                text += f" {FLAG_MARK}"
                flags_shown = True
            if one:
                text += f"\n{SINGLE_RUN_MARK}"
                single_shown = True
            if annotate and extra is not None:
                text += f"\n{extra * 100:+.1f} pt"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, max(raw, high or raw)), ha="center", va="bottom",
                        fontsize=8, color=TEXT, xytext=(0, 2), textcoords="offset points")
            top = max(top, raw)
        if marks:
            for offset, ceiling in zip(offsets, item.get(marks, []), strict=False):
                if ceiling is None:
                    continue
                ax.plot([offset - width * 0.46, offset + width * 0.46], [ceiling, ceiling], color=TEXT,
                        linewidth=2.0, solid_capstyle="butt", label=None if marked else "hardware ceiling")
                marked = True
                top = max(top, ceiling)
    if flags_shown:  # the marks explained in the legend, as the report explains them
        ax.plot([], [], " ", label=f"{FLAG_MARK} flagged: timing not to be trusted")
    if single_shown:
        ax.plot([], [], " ", label=f"{SINGLE_RUN_MARK}: a single run, no interval")
    if reference is not None:
        ax.axhline(reference, color="#aa3333", linewidth=1.0, linestyle="--", label=reference_label)
        top = max(top, reference)
    ax.set_xticks(xs, [g["label"] for g in groups])
    ax.set_ylim(0, top * 1.25 if top > 0 else 1.0)
    if empty_note and groups:
        ax.text(0.5, 0.5, empty_note, ha="center", va="center", color=TEXT, transform=ax.transAxes)
    if groups and series:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, labelcolor=TEXT, fontsize=9)
    else:
        ax.text(0.5, 0.5, empty_note or "no ok cells to compare", ha="center", va="center", color=TEXT,
                transform=ax.transAxes)
    return fig


def _loss_figure(panels: list[dict[str, Any]]):
    from matplotlib.ticker import MaxNLocator

    columns = min(3, max(len(panels), 1))
    rows = max(1, math.ceil(len(panels) / columns))
    fig = _figure(4.2 * columns + 1.6, 3.4 * rows + 0.6)
    fig.suptitle("Training loss per step (fp32 vs AMP)", color=TEXT, fontsize=12)
    if not panels or not any(p["curves"] for p in panels):
        ax = fig.add_subplot()
        _style(ax, title="", ylabel="cross-entropy loss", xlabel="training step")
        ax.text(0.5, 0.5, "no per-step losses in these results", ha="center", va="center", color=TEXT,
                transform=ax.transAxes)
        return fig
    axes = fig.subplots(rows, columns, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_visible(False)
            continue
        panel = panels[index]
        _style(ax, title=f"{panel['framework']} · {panel['workload']}", ylabel="cross-entropy loss",
               xlabel="training step")
        for series_index, curve in enumerate(panel["curves"]):
            ax.plot(range(1, len(curve["losses"]) + 1), curve["losses"], label=curve["precision"],
                    color=_colour(curve["precision"], series_index), linewidth=1.4,
                    linestyle="-" if curve["precision"] == BASELINE else "--")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if panel["curves"]:
            ax.legend(frameon=False, labelcolor=TEXT, fontsize=8)
    return fig


def _batch_figure(data: dict[str, Any]):
    """AMP speed-up against batch size (left) and the memory ratio (right), one line per framework, mode and
    precision; a log-scaled batch axis."""
    fig = _figure(12.0, 4.8)
    left, right = fig.subplots(1, 2)
    _style(left, title="AMP speed-up over fp32 by batch size", ylabel="speed-up over fp32 (x)",
           xlabel="global batch size")
    _style(right, title="Peak memory relative to fp32 by batch size", ylabel="peak memory / fp32 (x)",
           xlabel="global batch size")
    workloads = len({item["workload"] for item in data["series"]})
    lines = list(dict.fromkeys((item["framework"], item["mode"], item["workload"]) for item in data["series"]))
    for item in data["series"]:
        colour = EXTRA_COLOURS[lines.index((item["framework"], item["mode"], item["workload"])) % len(EXTRA_COLOURS)]
        name = " ".join(part for part in (item["framework"], item["mode"],
                                          item["workload"] if workloads > 1 else "", item["precision"]) if part)
        style = "-" if item["precision"] == "amp_bf16" else "--" if item["precision"] == "amp_fp16" else ":"
        for ax, column in ((left, "speedup"), (right, "memory_ratio")):
            points = [(b, v) for b, v in zip(item["batch_sizes"], item[column], strict=True) if v is not None]
            if points:
                ax.plot([b for b, _ in points], [v for _, v in points], marker="o", linestyle=style, color=colour,
                        linewidth=1.4, label=name)
    for ax in (left, right):
        ax.axhline(1.0, color="#aa3333", linewidth=1.0, linestyle="--")
        ax.set_xscale("log", base=2)
        batches = sorted({b for item in data["series"] for b in item["batch_sizes"]})
        if batches:
            ax.set_xticks(batches, [str(b) for b in batches])
    if data["series"]:
        right.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, labelcolor=TEXT, fontsize=8)
    else:
        left.text(0.5, 0.5, "no AMP cell ran at two batch sizes", ha="center", va="center", color=TEXT,
                  transform=left.transAxes)
    return fig


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    # Fixed pixel size (no "tight" bbox); no timestamps in the metadata, so equal data give equal files.
    canvas.print_png(buffer, metadata={"Software": None})
    return buffer.getvalue()


def chart_figures(data: dict[str, Any]) -> dict[str, Any]:
    """Every chart of ``data`` (:func:`chart_data`) as a matplotlib ``Figure``, by name."""
    figures = {
        "speedup": _grouped_bars(data["speedup"], title="Training speed-up over fp32 (higher is better)",
                                 ylabel="speed-up over fp32 (x)", reference=1.0, reference_label="fp32 = 1x",
                                 value_format="{:.2f}x", marks="ceiling_ratio"),
        "memory": _grouped_bars(data["memory"], title="Peak memory relative to fp32 (lower is better)",
                                ylabel="peak memory / fp32 peak memory (x)", reference=1.0,
                                reference_label="fp32 = 1x", value_format="{:.2f}x"),
        "accuracy": _grouped_bars(data["accuracy"], title="Validation accuracy per precision",
                                  ylabel="validation accuracy (fraction)", reference=None, reference_label="",
                                  value_format="{:.3f}", annotate="accuracy_delta",
                                  empty_note="n/a: synthetic data says nothing about accuracy"
                                  if data["accuracy"]["synthetic"] else ""),
        "loss": _loss_figure(data["loss"]["panels"]),
    }
    if "batch" in data:
        figures["batch"] = _batch_figure(data["batch"])
    if "speedup_tf32" in data:  # a GPU with TF32: AMP against what an untouched model runs there
        figures["speedup_tf32"] = _grouped_bars(
            data["speedup_tf32"], title="Training speed-up over tf32 (higher is better)",
            ylabel="speed-up over tf32 (x)", reference=1.0, reference_label="tf32 = 1x", value_format="{:.2f}x")
    return figures


# The last charts drawn: the HTML report embeds the very charts this reporter wrote, without drawing them again.
_last_drawn: dict[str, Any] = {"key": None, "charts": None}


def draw_charts(data: dict[str, Any]) -> dict[str, tuple[bytes, tuple[int, int]]]:
    """PNG bytes and ``(width, height)`` in pixels of every chart (equal data: the charts drawn last time)."""
    key = json.dumps(_json_safe(data), sort_keys=True, allow_nan=False)
    if _last_drawn["key"] == key:
        return dict(_last_drawn["charts"])
    out = {}
    for name, fig in chart_figures(data).items():
        width, height = fig.get_size_inches() * fig.dpi
        out[name] = (_png(fig), (int(round(width)), int(round(height))))
    _last_drawn.update(key=key, charts=dict(out))
    return out


# --- hooks ----------------------------------------------------------------------------


def curve_chart_files(results: list[CellResult]) -> dict[str, bytes]:
    """``chart-curve-WORKLOAD.png`` -> PNG bytes for each workload whose cells recorded a learning curve."""
    from amp_suite.report.curve_chart import curve_chart_png
    from amp_suite.report.curves import curve_bands, curve_points

    points = curve_points(results)
    if points.empty:
        return {}
    bands = curve_bands(points)
    out = {}
    for workload in sorted(set(bands["workload"])):
        png = curve_chart_png(bands, workload)
        if png is not None:
            out[f"chart-curve-{re.sub(r'[^A-Za-z0-9_.-]', '_', workload)}.png"] = png
    return out


def _curve_workloads(results: list[CellResult]) -> list[str]:
    return sorted({r.workload for r in results if r.status == "ok" and (r.metrics or {}).get("learning_curve")})


@hookimpl
def report_sections(results: list[CellResult]) -> list[tuple[str, str]]:
    if not _have_matplotlib():
        return [("Charts", "Charts were not drawn: matplotlib is not installed "
                           "(`pip install 'amp-suite[charts]'`).")]
    if not any(r.status == "ok" for r in results):
        return []
    lines = [
        f"![Speed-up over fp32]({CHARTS['speedup']})",
        "",
        "Speed-up over fp32 per framework and AMP precision; the black bar over each is the hardware "
        "ceiling (the measured peak of the dtype over fp32's) when the machine is calibrated.",
        "",
        *([f"![Speed-up over tf32]({CHARTS['speedup_tf32']})", "",
           "Speed-up of fp16 and bf16 over tf32, where a tf32 cell ran (a GPU with TF32: what PyTorch's "
           "convolutions and XLA run by default there).", ""]
          if {"tf32"} < {r.precision for r in results if r.status == "ok"} - {BASELINE} else []),
        f"![Peak memory ratio]({CHARTS['memory']})",
        "",
        *([f"![AMP speed-up and memory ratio by batch size]({CHARTS['batch']})", "",
           "AMP's speed-up over fp32 (left) and its peak-memory ratio (right) against the batch size, one line per "
           "framework, mode and AMP precision (solid bf16, dashed fp16), each point over fp32 at the same batch "
           "and in the same mode.", ""]
          if len({(r.workload, (r.config or {}).get("batch_size")) for r in results if r.status == "ok"})
          > len({r.workload for r in results if r.status == "ok"}) else []),
        f"![Training loss per step]({CHARTS['loss']})",
        "",
        f"![Validation accuracy]({CHARTS['accuracy']})",
        "",
        *[line for workload in _curve_workloads(results) for line in (
            f"![Learning curve of {workload}](chart-curve-{re.sub(r'[^A-Za-z0-9_.-]', '_', workload)}.png)", "")],
        f"The plotted values are in [{SIDECAR}]({SIDECAR}).",
    ]
    return [("Charts", "\n".join(lines))]


@hookimpl(tryfirst=True)  # the charts are in place before report.md, which links them, is replaced
def write_report(results: list[CellResult], out_dir: Path, environment: dict[str, Any]) -> list[Path]:
    if not any(r.status == "ok" for r in results):
        remove_stale_charts(out_dir)  # a report of no figure links no chart: older ones would only mislead
        return []
    if not _have_matplotlib():
        return []  # report_sections says why
    data = chart_data(results, environment)
    drawn = draw_charts(data)
    sidecar = {name: {"file": CHARTS[name], "width_px": size[0], "height_px": size[1], **data[name]}
               for name, (_, size) in drawn.items()}
    contents: dict[Path, bytes | str] = {out_dir / CHARTS[name]: png for name, (png, _) in drawn.items()}
    for file, png in curve_chart_files(results).items():
        contents[out_dir / file] = png
        sidecar[file.removesuffix(".png")] = {"file": file}
    contents[out_dir / SIDECAR] = json.dumps(_json_safe(sidecar), indent=2, allow_nan=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_files_atomically(contents)


def remove_stale_charts(out_dir: Path) -> None:
    """Remove the charts an earlier report drew in ``out_dir``: only the chart files its sidecar names, each a
    regular file (no link followed), then the sidecar."""
    from amp_suite.owned_paths import read_private_file

    data = read_private_file(out_dir, SIDECAR)
    if data is None:
        return
    try:
        sidecar = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return
    named = {entry.get("file") for entry in sidecar.values() if isinstance(entry, dict)} \
        if isinstance(sidecar, dict) else set()
    curves = [n for n in named if isinstance(n, str) and re.fullmatch(r"chart-curve-[A-Za-z0-9_.-]+\.png", n)]
    for name in [n for n in CHARTS.values() if n in named] + curves + [SIDECAR]:
        path = out_dir / name
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float made ``null``."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
