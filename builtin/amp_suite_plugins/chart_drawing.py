"""The charts reporter's drawing: each chart's figure from its data, with matplotlib's object API.

Drawing uses matplotlib's object API and the Agg canvas directly: no pyplot,
no global backend, no display needed.  matplotlib is imported inside the
functions, so importing this module costs nothing without it.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

from amp_suite.precision import BASELINE
from amp_suite.report.marks import FLAG_MARK, SINGLE_RUN_MARK
from amp_suite_plugins.chart_data import NOT_AVAILABLE, json_safe

DPI = 100
BACKGROUND = "#f7f7f5"  # opaque and light: dark text on it reads in dark and light viewers
TEXT = "#222222"
GRID = "#c8c8c8"
# Colour-blind-safe colours (Okabe and Ito) per precision.
COLOURS = {"fp32": "#555555", "tf32": "#0072B2", "amp_fp16": "#E69F00", "amp_bf16": "#009E73"}
EXTRA_COLOURS = ("#CC79A7", "#56B4E9", "#D55E00", "#F0E442")


def _colour(precision: str, index: int) -> str:
    return COLOURS.get(precision, EXTRA_COLOURS[index % len(EXTRA_COLOURS)])


def _figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, facecolor=BACKGROUND, layout="constrained")
    return fig


def _style(ax, *, title: str, ylabel: str, xlabel: str = "") -> None:
    ax.set_facecolor(BACKGROUND)
    ax.set_title(title, color=TEXT, fontsize=12, loc="left")  # centred, a long title left the figure beside a legend
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
    key = json.dumps(json_safe(data), sort_keys=True, allow_nan=False)
    if _last_drawn["key"] == key:
        return dict(_last_drawn["charts"])
    out = {}
    for name, fig in chart_figures(data).items():
        width, height = fig.get_size_inches() * fig.dpi
        out[name] = (_png(fig), (int(round(width)), int(round(height))))
    _last_drawn.update(key=key, charts=dict(out))
    return out
