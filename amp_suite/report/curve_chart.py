"""The learning-curve chart of one workload: validation accuracy and loss against the step, a band per precision.

One line per framework and precision (the median over seeds) with its
min–max band shaded, accuracy on the left and loss on the right, from the
frame of :func:`amp_suite.report.curves.curve_bands`.  Drawn with
matplotlib's object API on the Agg canvas (no pyplot, no display), imported
only here and only when a chart is drawn; :func:`curve_chart_png` answers
None where matplotlib is not installed.  A reporter writes the bytes (the
charts plugin would name them ``chart-curves-WORKLOAD.png``).
"""

from __future__ import annotations

import importlib.util
import io
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# Line styles by framework (the colour says the precision), cycled beyond these.
STYLES = ("-", "--", ":", "-.")
# Colours by precision, cycled beyond these.
COLOURS = {"fp32": "#4c72b0", "tf32": "#8172b3", "amp_bf16": "#55a868", "amp_fp16": "#c44e52", "fp64": "#937860"}
EXTRA_COLOURS = ("#dd8452", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")


def _colour(precision: str, index: int) -> str:
    return COLOURS.get(precision, EXTRA_COLOURS[index % len(EXTRA_COLOURS)])


def curve_figure(bands: pd.DataFrame, workload: str) -> Any:
    """The chart of ``workload``'s rows of ``bands`` as a matplotlib ``Figure``."""
    from matplotlib.figure import Figure

    rows = bands[bands["workload"] == workload]
    fig = Figure(figsize=(11, 4.2), dpi=100)
    accuracy_axes, loss_axes = fig.subplots(1, 2)
    frameworks = list(dict.fromkeys(rows["framework"]))
    precisions = list(dict.fromkeys(rows["precision"]))
    for (framework, precision), curve in rows.groupby(["framework", "precision"], sort=False):
        colour = _colour(precision, precisions.index(precision))
        style = STYLES[frameworks.index(framework) % len(STYLES)]
        label = f"{framework} {precision}"
        steps = curve["steps"].astype(float).tolist()
        for axes, column, scale in ((accuracy_axes, "val_accuracy", 100.0), (loss_axes, "val_loss", 1.0)):
            median = [v * scale for v in curve[f"{column}_median"].astype(float)]
            if all(math.isnan(v) for v in median):
                continue
            low = [v * scale for v in curve[f"{column}_min"].astype(float)]
            high = [v * scale for v in curve[f"{column}_max"].astype(float)]
            axes.plot(steps, median, style, color=colour, marker="o", markersize=3, label=label)
            axes.fill_between(steps, low, high, color=colour, alpha=0.18, linewidth=0)
    seeds = int(rows["seeds"].max()) if len(rows) else 0
    accuracy_axes.set(title="validation accuracy (median, min–max band)", xlabel="training step",
                      ylabel="accuracy, %")
    loss_axes.set(title="validation loss (median, min–max band)", xlabel="training step", ylabel="loss")
    for axes in (accuracy_axes, loss_axes):
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize=8)
        else:
            axes.text(0.5, 0.5, "no figure (synthetic data has no accuracy)", ha="center", va="center",
                      transform=axes.transAxes)
    fig.suptitle(f"{workload}: learning curves over {seeds} seed{'s' if seeds != 1 else ''}")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.84, wspace=0.22)
    return fig


def curve_chart_png(bands: pd.DataFrame, workload: str) -> bytes | None:
    """The chart as PNG bytes (equal data give equal bytes); None without matplotlib or rows for ``workload``."""
    if importlib.util.find_spec("matplotlib") is None or not (bands["workload"] == workload).any():
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(curve_figure(bands, workload))
    buffer = io.BytesIO()
    canvas.print_png(buffer, metadata={"Software": None})
    return buffer.getvalue()
