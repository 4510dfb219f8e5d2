"""The files of ``amp-suite numerics``: ``numerics.jsonl``, ``numerics.md`` and ``numerics-heatmap.png``.

``numerics.jsonl`` holds one line per run (``"record": "run"``, a
:class:`~amp_suite.numerics.records.NumericsRun`) and one per layer, tensor,
step and shadow (``"record": "layer"``, a
:class:`~amp_suite.numerics.records.LayerNumerics`), and after ``--bisect``
one for the search (``"record": "bisect"``);
:func:`amp_suite.shadow.stored.read_numerics_and_search` reads all three back in one pass.  The markdown and the heatmap summarise each layer over the
traced steps by its worst step, against the float32 shadow; the sentences
name the worst layers.  ``docs/numerics.md`` explains how to read them.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from amp_suite.numerics.records import BisectOutcome, LayerNumerics, NumericsRun
from amp_suite.precision import LOSS_SCALED_PRECISIONS
from amp_suite.records import to_plain

LAYERS_FILE = "numerics.jsonl"
MARKDOWN_FILE = "numerics.md"
HEATMAP_FILE = "numerics-heatmap.png"
# The files this command writes at the top of its output directory.
REPORT_FILES = (LAYERS_FILE, MARKDOWN_FILE, HEATMAP_FILE)
# How every line of numerics.jsonl begins, its first above all: what tells an earlier run's file from another's.
RECORD_PREFIX = b'{"record": '
# The shadow the summary, the heatmap and the sentences compare against.
SUMMARY_SHADOW = "fp32"
# Shares and errors below these are no finding (a sentence names nothing smaller).
SHARE_WORTH_NAMING = 1e-4
ERROR_WORTH_NAMING = 1e-3
# Heatmaps of at most this many cells carry each cell's value.
ANNOTATED_CELLS = 400


@dataclass(frozen=True)
class LayerSummary:
    """One layer of one run against one shadow, each figure at its worst traced step (``None``: no such tensor)."""

    framework: str
    workload: str
    precision: str
    shadow: str
    layer: str
    activation_error: float | None
    error_added: float | None
    gradient_error: float | None
    activation_underflow: float | None
    gradient_underflow: float | None
    underflow_without_scale: float | None
    activation_overflow: float
    gradient_overflow: float
    nonfinite: float
    headroom: float
    activation_format: str
    gradient_format: str
    loss_scale: float | None


def _worst(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return math.nan if any(math.isnan(v) for v in present) else max(present)


def summarise(layers: list[LayerNumerics]) -> list[LayerSummary]:
    """Each (framework, workload, precision, shadow, layer), in the order first met, by its worst step."""
    groups: dict[tuple[str, str, str, str, str], list[LayerNumerics]] = {}
    for row in layers:
        groups.setdefault((row.framework, row.workload, row.precision, row.shadow, row.layer), []).append(row)
    out = []
    for (framework, workload, precision, shadow, layer), rows in groups.items():
        acts = [r for r in rows if r.tensor == "activation"]
        grads = [r for r in rows if r.tensor == "gradient"]
        out.append(LayerSummary(
            framework, workload, precision, shadow, layer,
            activation_error=_worst([r.relative_error for r in acts]),
            error_added=_worst([r.error_added for r in acts]),
            gradient_error=_worst([r.relative_error for r in grads]),
            activation_underflow=_worst([r.underflow for r in acts]),
            gradient_underflow=_worst([r.underflow for r in grads]),
            underflow_without_scale=_worst([r.underflow_without_scale for r in grads]),
            activation_overflow=_worst([r.overflow for r in acts]) or 0.0,
            gradient_overflow=_worst([r.overflow for r in grads]) or 0.0,
            nonfinite=_worst([r.nonfinite for r in rows]) or 0.0,
            headroom=_worst([r.headroom for r in rows]) or 0.0,
            activation_format=acts[0].format if acts else "",
            gradient_format=grads[0].format if grads else "",
            loss_scale=next((r.loss_scale for r in rows if r.loss_scale is not None), None)))
    return out


def _percent(share: float | None) -> str:
    if share is None:
        return "–"
    if math.isnan(share):
        return "nan"
    return "0" if share == 0 else f"{100 * share:.3g}%"


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2e}" if math.isfinite(value) else str(value)


def worst_layer_sentences(summaries: list[LayerSummary]) -> list[str]:
    """One sentence per worst layer of each AMP run against the float32 shadow: where error arises, whose
    gradients are furthest off, and any layer that underflows, overflows or would underflow without the loss
    scale."""
    sentences: list[str] = []
    runs: dict[tuple[str, str, str], list[LayerSummary]] = {}
    for summary in summaries:
        if summary.shadow == SUMMARY_SHADOW:
            runs.setdefault((summary.framework, summary.workload, summary.precision), []).append(summary)

    def top(items: list[LayerSummary], key: Any, floor: float) -> LayerSummary | None:
        scored = [(key(s), s) for s in items if key(s) is not None and (math.isnan(key(s)) or key(s) >= floor)]
        if not scored:
            return None
        return max(scored, key=lambda pair: math.inf if math.isnan(pair[0]) else pair[0])[1]

    for (framework, workload, precision), items in runs.items():
        where = f"({framework}, {workload}, {precision})"
        found = top(items, lambda s: s.underflow_without_scale, SHARE_WORTH_NAMING)
        if found is not None:
            kept = found.gradient_underflow or 0.0
            sentences.append(
                f"layer {found.layer}: {_percent(found.underflow_without_scale)} of its nonzero weight gradients underflow "
                f"in {found.gradient_format} without the loss scale ({_percent(kept)} with the scale "
                f"{found.loss_scale:g}) {where}.")
        for label, key, what in (("nonzero activations", lambda s: s.activation_underflow, "underflow to zero"),
                                 ("nonzero weight gradients", lambda s: s.gradient_underflow, "underflow to zero")):
            found = top(items, key, SHARE_WORTH_NAMING)
            if found is not None:
                fmt = found.activation_format if label == "nonzero activations" else found.gradient_format
                unscaled = (" with no loss scale (loss_scaling = \"none\": the loss scale is what keeps them)"
                            if label == "nonzero weight gradients" and found.precision in LOSS_SCALED_PRECISIONS
                            and found.loss_scale is None else "")
                sentences.append(f"layer {found.layer}: {_percent(key(found))} of its {label} {what} in {fmt}"
                                 f"{unscaled} {where}.")
        found = top(items, lambda s: s.activation_overflow, SHARE_WORTH_NAMING)
        if found is not None:
            sentences.append(f"layer {found.layer}: {_percent(found.activation_overflow)} of its activations "
                             f"overflow {found.activation_format} {where}.")
        found = top(items, lambda s: s.gradient_overflow, SHARE_WORTH_NAMING)
        if found is not None:
            scaled = (f" at the loss scale {found.loss_scale:g} (a dynamic loss scale skips such a step and lowers "
                      "the scale)" if found.loss_scale is not None else "")
            sentences.append(f"layer {found.layer}: {_percent(found.gradient_overflow)} of its weight gradients "
                             f"overflow {found.gradient_format}{scaled} {where}.")
        found = top([s for s in items if s.activation_overflow == 0 and s.gradient_overflow == 0],
                    lambda s: s.nonfinite, SHARE_WORTH_NAMING)
        if found is not None:
            sentences.append(f"layer {found.layer}: {_percent(found.nonfinite)} of its values are inf or NaN "
                             f"{where}.")
        found = top(items, lambda s: s.error_added, ERROR_WORTH_NAMING)
        if found is not None:
            sentences.append(f"layer {found.layer} adds the most error to the forward pass: its output is "
                             f"{_percent(found.activation_error)} off the float32 shadow, "
                             f"{_percent(found.error_added)} more than its input {where}.")
        found = top([s for s in items if s.gradient_error is not None and math.isfinite(s.gradient_error)],
                    lambda s: s.gradient_error, ERROR_WORTH_NAMING)
        if found is not None:
            sentences.append(f"layer {found.layer}: its weight gradients are {_percent(found.gradient_error)} off "
                             f"the float32 shadow's {where}.")
    return sentences


ALL_CLEAR = "No layer loses values or adds error above the thresholds (docs/numerics.md)."


def summary_lines(layers: list[LayerNumerics], gaps: list[str] | tuple[str, ...] = ()) -> list[str]:
    """What the command prints and numerics.md lists under "Worst layers": the worst-layer sentences, or the
    all-clear when runs were set beside the float32 shadow and none is worth naming, then ``gaps`` (the runs
    not compared, and why).  Nothing compared at all is said first, never as an all-clear."""
    summaries = summarise(layers)
    sentences = worst_layer_sentences(summaries)
    lines: list[str] = []
    if not layers:
        lines.append("Nothing was compared: no layer of any run was set beside a shadow.")
    elif sentences:
        lines += sentences
    elif any(summary.shadow == SUMMARY_SHADOW for summary in summaries):
        lines.append(ALL_CLEAR if not gaps else f"Of the runs compared: {ALL_CLEAR[0].lower()}{ALL_CLEAR[1:]}")
    else:
        lines.append("No run was set beside the float32 shadow, the one the sentences judge: the tables below hold "
                     "what was compared.")
    return lines + list(gaps)


def fp8_tables(layers: list[LayerNumerics]) -> list[str]:
    """The lines of one table per run whose layers carry FP8 figures (:mod:`amp_suite.numerics.fp8_scales`): per
    layer, matmul and operand its amax, scale, and the shares its cast saturated and flushed, at the first traced
    step (every step's figures are in numerics.jsonl)."""
    from amp_suite.numerics.fp8 import RECIPE
    from amp_suite.numerics.fp8_scales import OPERANDS

    formats = {"input": RECIPE.forward_format.name, "weight": RECIPE.forward_format.name,
               "gradient": RECIPE.gradient_format.name}
    runs: dict[tuple[str, str, str], list[LayerNumerics]] = {}
    for row in layers:
        if row.extra and row.tensor == "activation" and row.shadow == SUMMARY_SHADOW and row.step == 0:
            runs.setdefault((row.framework, row.workload, row.precision), []).append(row)
    lines: list[str] = []
    for (framework, workload, precision), rows in runs.items():
        lines += [f"## FP8 scales: {framework} / {workload} / {precision}", "",
                  "Per FP8 matmul and operand, at the first traced step: the amax of the values cast, the scale "
                  "(format max / amax), and the shares the cast saturated at the format's largest value and "
                  "flushed to zero.", "",
                  "| layer | operand | format | amax | scale | saturated | flushed to zero |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in rows:
            projections = dict.fromkeys(name.rsplit(".", 1)[0] if "." in name else "" for name in row.extra)
            for projection in projections:
                prefix = f"{projection}." if projection else ""
                for operand in OPERANDS:
                    if f"{prefix}{operand}_amax" not in row.extra:
                        continue
                    figure = {key: row.extra.get(f"{prefix}{operand}_{key}")
                              for key in ("amax", "scale", "saturated", "flushed")}
                    lines.append(f"| {row.layer}{'/' + projection if projection else ''} | {operand} | "
                                 f"{formats[operand]} | {_number(figure['amax'])} | {_number(figure['scale'])} | "
                                 f"{_percent(figure['saturated'])} | {_percent(figure['flushed'])} |")
        lines.append("")
    return lines


def markdown(runs: list[NumericsRun], layers: list[LayerNumerics], search: BisectOutcome | None = None, *,
             gaps: list[str] | tuple[str, ...] = (), heatmap: bool = False) -> str:
    """``numerics.md``: the runs, the search's result (``--bisect``), the worst layers in sentences (and ``gaps``,
    the runs not compared), a link to the heatmap where ``heatmap`` says one is written, a table per AMP run
    against float32, and the FP8 layers' scales."""
    from amp_suite.shadow.bisect import bisect_lines

    lines = ["# Numerics: AMP steps beside their float32 and float64 shadows", "",
             "Each figure is the layer's worst traced step against the float32 shadow (docs/numerics.md "
             "explains the columns); every step and the float64 shadow are in numerics.jsonl.", "",
             "## Runs", "", "| framework | workload | precision | status | steps | losses | loss scales | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        note = "; ".join(text for text in (run.choices, run.note or run.error) if text)
        lines.append(f"| {run.framework} | {run.workload} | {run.precision} | {run.status} | {run.steps} | "
                     f"{', '.join(f'{v:.4g}' for v in run.losses)} | "
                     f"{', '.join('–' if v is None else f'{v:g}' for v in run.loss_scales)} | "
                     f"{note.replace('|', '/')} |")
    if search is not None:
        lines += ["", *bisect_lines(search)]
    lines += ["", "## Worst layers", ""]
    lines += [f"- {line}" for line in summary_lines(layers, gaps)]
    lines += ["", f"Heatmap: [{HEATMAP_FILE}]({HEATMAP_FILE})"] if heatmap else []
    lines.append("")
    summaries = summarise(layers)
    tables: dict[tuple[str, str, str, str], list[LayerSummary]] = {}
    for summary in summaries:
        tables.setdefault((summary.framework, summary.workload, summary.precision, summary.shadow), []).append(summary)
    for (framework, workload, precision, shadow), items in tables.items():
        lines += [f"## {framework} / {workload} / {precision} against {shadow}", "",
                  "| layer | activation error | error added | gradient error | activation underflow | "
                  "gradient underflow | without loss scale | overflow | inf/NaN | max / dtype max |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for s in items:
            lines.append(f"| {s.layer} | {_number(s.activation_error)} | {_number(s.error_added)} | "
                         f"{_number(s.gradient_error)} | {_percent(s.activation_underflow)} | "
                         f"{_percent(s.gradient_underflow)} | {_percent(s.underflow_without_scale)} | "
                         f"{_percent(max(s.activation_overflow, s.gradient_overflow))} | {_percent(s.nonfinite)} | "
                         f"{_number(s.headroom)} |")
        lines.append("")
    lines += fp8_tables(layers)
    return "\n".join(lines)


def heatmap_png(layers: list[LayerNumerics]) -> bytes | None:
    """Layers × (framework, precision) against float32, coloured by underflow share and by relative error
    (log10; a cell whose error is inf or NaN is left white and says so); None without matplotlib or rows."""
    summaries = [s for s in summarise(layers) if s.shadow == SUMMARY_SHADOW]
    if importlib.util.find_spec("matplotlib") is None or not summaries:
        return None
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(f"{s.workload}/{s.layer}" for s in summaries))
    columns = list(dict.fromkeys(f"{s.framework}\n{s.precision}" for s in summaries))
    underflow = np.full((len(names), len(columns)), np.nan)
    error = np.full((len(names), len(columns)), np.nan)
    blank = np.zeros((len(names), len(columns)), dtype=bool)
    for s in summaries:
        i, j = names.index(f"{s.workload}/{s.layer}"), columns.index(f"{s.framework}\n{s.precision}")
        shares = [v for v in (s.activation_underflow, s.gradient_underflow, s.underflow_without_scale)
                  if v is not None]
        underflow[i, j] = max(shares) if shares else np.nan
        errors = [v for v in (s.activation_error, s.gradient_error) if v is not None]
        if any(not math.isfinite(v) for v in errors):
            blank[i, j] = True  # an inf or NaN: no colour, the cell says so
        elif errors:
            error[i, j] = math.log10(max(max(errors), 1e-12))
    fig = Figure(figsize=(max(8.0, 4 + 1.6 * len(columns)), 1.8 + 0.32 * len(names)))
    finite_underflow = underflow[np.isfinite(underflow)]
    top = max(float(finite_underflow.max()) if finite_underflow.size else 0.0, 0.01)
    for index, (values, title, cmap, limits, label) in enumerate((
            (underflow, "underflow share (largest: activations,\ngradients, gradients without loss scale)", "Reds",
             (0.0, top), lambda v: f"{100 * v:.2g}%"),
            (error, "log10 relative error against float32\n(larger of activation and gradients)", "viridis",
             (None, None), lambda v: f"{v:.1f}"))):
        axes = fig.add_subplot(1, 2, index + 1)
        image = axes.imshow(values, aspect="auto", cmap=cmap, interpolation="nearest", vmin=limits[0],
                            vmax=limits[1])
        axes.set_xticks(range(len(columns)), columns, fontsize=8)
        axes.set_yticks(range(len(names)), names if index == 0 else [""] * len(names), fontsize=7)
        axes.set_title(title, fontsize=9)
        fig.colorbar(image, ax=axes, fraction=0.05)
        if values.size <= ANNOTATED_CELLS:
            for (i, j), value in np.ndenumerate(values):
                text = label(value) if np.isfinite(value) else ("inf/NaN" if index == 1 and blank[i, j] else "")
                if text:
                    axes.text(j, i, text, ha="center", va="center", fontsize=7, color="black",
                              bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0, "pad": 1})
    fig.tight_layout()
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer, metadata={"Software": None})
    return buffer.getvalue()


def write_report(out_dir: Path, runs: list[NumericsRun], layers: list[LayerNumerics],
                 search: BisectOutcome | None = None, *, planned: int | None = None,
                 gaps: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """Write the three files into ``out_dir`` (the heatmap only with matplotlib and rows against float32: an
    earlier run's heatmap is removed otherwise); their paths.  A search (``--bisect``) is one ``"record":
    "bisect"`` line of numerics.jsonl and a section of numerics.md.  ``planned``: the runs planned, where a stop
    ended the command before all of them ran (numerics.md then says so).  ``gaps``: the sentences of the runs not
    compared (:func:`summary_lines`).

    All are written through temporary files and renamed into place together, never through a link."""
    from amp_suite.safe_files import write_files_atomically

    lines = [json.dumps({"record": "run", **to_plain(asdict(run))}) for run in runs]
    if search is not None:
        lines.append(json.dumps({"record": "bisect", **to_plain(asdict(search))}))
    lines += [json.dumps({"record": "layer", **to_plain(asdict(row))}) for row in layers]
    png = heatmap_png(layers)
    text = markdown(runs, layers, search, gaps=gaps, heatmap=png is not None)
    if planned is not None:
        title, rest = text.split("\n", 1)
        text = (f"{title}\n\n**Stopped before it ended: {len(runs)} of {planned} planned runs ran**; the runs "
                f"below are all this output holds.\n{rest}")
    contents: dict[Path, str | bytes] = {out_dir / LAYERS_FILE: "\n".join(lines) + "\n", out_dir / MARKDOWN_FILE: text}
    if png is not None:
        contents[out_dir / HEATMAP_FILE] = png
    else:  # an earlier run's heatmap (--force) shows what this output does not hold; a link is removed, not followed
        (out_dir / HEATMAP_FILE).unlink(missing_ok=True)
    return write_files_atomically(contents)
