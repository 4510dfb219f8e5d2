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
import json
import re
from pathlib import Path
from typing import Any

from amp_suite import hookimpl
from amp_suite.precision import BASELINE
from amp_suite.records import CellResult
from amp_suite.report.marks import FLAG_MARK, SINGLE_RUN_MARK
from amp_suite.safe_files import write_files_atomically
from amp_suite_plugins.chart_data import NOT_AVAILABLE, chart_data, json_safe
from amp_suite_plugins.chart_drawing import chart_figures, draw_charts

# The data each chart plots is chart_data.py's, the drawing chart_drawing.py's; this module is the reporter.
__all__ = ["CHARTS", "FLAG_MARK", "NOT_AVAILABLE", "SIDECAR", "SINGLE_RUN_MARK", "chart_data", "chart_figures",
           "draw_charts", "report_sections", "write_report"]

SIDECAR = "charts.json"
CHARTS = {
    "speedup": "chart-speedup.png",
    "speedup_tf32": "chart-speedup-over-tf32.png",
    "memory": "chart-memory.png",
    "loss": "chart-loss.png",
    "accuracy": "chart-accuracy.png",
    "batch": "chart-batch.png",
}


def _have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


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
    contents[out_dir / SIDECAR] = json.dumps(json_safe(sidecar), indent=2, allow_nan=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_charts(out_dir)
    written = write_files_atomically(contents)
    # a chart this report does not draw (no --batch-sizes now) would sit beside it, linked from nowhere
    _remove(out_dir, sorted(earlier - {path.name for path in written}))
    return written


def earlier_charts(out_dir: Path) -> set[str]:
    """The chart files the sidecar an earlier report wrote in ``out_dir`` names (the built-in charts' names and
    learning curves only)."""
    from amp_suite.owned_paths import read_private_file

    data = read_private_file(out_dir, SIDECAR)
    if data is None:
        return set()
    try:
        sidecar = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return set()
    named = {entry.get("file") for entry in sidecar.values() if isinstance(entry, dict)} \
        if isinstance(sidecar, dict) else set()
    return {name for name in named if isinstance(name, str)
            and (name in CHARTS.values() or re.fullmatch(r"chart-curve-[A-Za-z0-9_.-]+\.png", name))}


def _remove(out_dir: Path, names: list[str]) -> None:
    """Remove each of ``names`` in ``out_dir`` that is a regular file (no link followed)."""
    for name in names:
        path = out_dir / name
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)


def remove_stale_charts(out_dir: Path) -> None:
    """Remove the charts an earlier report drew in ``out_dir``, then its sidecar."""
    _remove(out_dir, [*sorted(earlier_charts(out_dir)), SIDECAR])
