"""The sections of ``report.html``, each from the frames ``report.md`` is built from: verdict, summary, what
ran, plugins' figures, every run, flags, seeds, charts, failures and plugins' sections."""

from __future__ import annotations

import base64
import html
from typing import Any

import pandas as pd

from amp_suite.records import CellResult
from amp_suite.report.added_figures import added_figures_table
from amp_suite.report.applied import applied_precisions
from amp_suite.report.frames import is_known
from amp_suite.report.html_parts import Cell, Chart, as_number, formatted, paragraphs, sortable_table
from amp_suite.report.marks import EMULATED_MARK, FLAG_MARK, SINGLE_RUN_MARK
from amp_suite.report.text import LINE_CHARS, html_text
from amp_suite.report.tokens import throughput_unit
from amp_suite.report.verdict import Verdict
from amp_suite.report.verdict_text import MARK_LEGEND, accuracy_cell, memory_cell, speedup_cell


def verdict_html(verdict: Verdict) -> list[str]:
    if verdict.empty:
        return ["<p>No results.</p>"]
    rows: list[list[Cell | str]] = []
    for line in verdict.lines:
        why = "; ".join(line.cautions)
        rows.append([line.place, line.label,
                     Cell(speedup_cell(line), line.speedup, why),
                     Cell(memory_cell(line), line.memory_ratio),
                     Cell(accuracy_cell(line), line.accuracy_delta_pt)])
    out = sortable_table("verdict", "Each AMP precision against fp32 in the same framework",
                 ["framework", "precision", "speed-up over fp32 (95% interval)", "peak memory vs fp32",
                  "validation accuracy vs fp32"], rows)
    out += ['<ul class="sentences">', *(f"<li>{html_text(item.sentence, LINE_CHARS)}</li>"
                                        for item in verdict.frameworks), "</ul>"]
    if any(line.marks for line in verdict.lines):
        out.append(f'<p class="legend">{html_text(MARK_LEGEND)}.</p>')
    return out


def _marks(row: Any) -> tuple[str, str]:
    """The summary row's trust marks and, for the tooltip, what they mean."""
    marks, why = [], []
    if row["status"] == "ok" and row["precision"] != "fp32":
        if row.get("flagged"):
            marks.append(FLAG_MARK)
            why.append("flagged: its timing is not to be trusted (see the measurement flags)")
        if as_number(row.get("speedup")) is not None and as_number(row.get("speedup_low")) is None:
            marks.append(SINGLE_RUN_MARK)
            why.append("a single run: no interval")
    elif row["status"] == "ok" and row.get("flagged"):
        marks.append(FLAG_MARK)
        why.append("flagged: its timing is not to be trusted (see the measurement flags)")
    if row.get("emulated"):
        marks.append(EMULATED_MARK)
        why.append("emulated: no FP8 matmul ran, its speed is the emulation's (no speed-up)")
    if row.get("settings_differ") and row["precision"] != "fp32":
        marks.append("not compared")
        why.append(str(row["settings_differ"]))
    return " ".join(marks), "; ".join(why)


def summary_html(summary: Any) -> list[str]:
    """A row per framework and precision (and workload, device, mode, batch): the figures and their ratios."""
    rows: list[list[Cell | str]] = []
    modes = "speedup_over_base_mode" in summary and bool(summary["speedup_over_base_mode"].notna().any())

    def over_base(row: Any) -> float | None:
        return as_number(row.get("speedup_over_base_mode"))

    for _, row in summary.iterrows():
        marks, why = _marks(row)
        ok = row["status"] == "ok"
        interval = ""
        if ok and as_number(row.get("speedup_low")) is not None:
            interval = f"{row['speedup_low']:.2f}–{row['speedup_high']:.2f}"
        rows.append([
            str(row["workload"]), str(row["framework"]), str(row["device"]),
            Cell(str(int(row["devices"])), float(row["devices"])), str(row["mode"] or "–"),
            Cell(str(int(row["batch_size"])), float(row["batch_size"])), str(row["precision"]),
            Cell(str(row["status"]), title=str(row.get("error") or "")),
            Cell(formatted(row["throughput"], "{:,.0f}"), as_number(row["throughput"])),
            Cell(formatted(row["speedup"], "{:.2f}x") if ok else "n/a", as_number(row["speedup"]) if ok else None, why),
            Cell(interval or "–", title="95% interval of the speed-up" if interval else ""),
            Cell(marks or "–", title=why),
            Cell(formatted(row["peak_memory_mib"], "{:,.0f}"), as_number(row["peak_memory_mib"])),
            Cell(formatted(row["memory_ratio"], "{:.2f}x"), as_number(row["memory_ratio"])),
            Cell(formatted(_pct(row["val_accuracy"]), "{:.2f}%"), _pct(row["val_accuracy"])),
            Cell(formatted(_pct(row["accuracy_delta"]), "{:+.2f} pt"), _pct(row["accuracy_delta"])),
            Cell(formatted(row["final_loss"], "{:.4f}"), as_number(row["final_loss"])),
            Cell(f"{int(row['ok_repeats'])} of {int(row['repeats'])}", float(row["ok_repeats"])),
            *([Cell(formatted(row["speedup_over_base_mode"], "{:.2f}x") + (f" over {row['base_mode']}"
                                                                          if is_known(over_base(row)) else ""),
                    over_base(row))] if modes else []),
        ])
    return sortable_table("summary", "Every framework and precision (medians over the ok repeats)",
                  ["workload", "framework", "device", "devices", "mode", "batch", "precision", "status",
                   throughput_unit(summary.get("token_workload", [])),
                   "speed-up over fp32", "95% interval", "marks", "peak memory MiB", "memory vs fp32",
                   "validation accuracy", "accuracy vs fp32", "final loss", "ok repeats",
                   *(["speed-up over the base mode"] if modes else [])], rows)


def _pct(value: Any) -> float | None:
    number = as_number(value)
    return None if number is None else number * 100.0


def applied_html(results: list[CellResult]) -> list[str]:
    entries = applied_precisions(results)
    rows: list[list[Cell | str]] = [
        [e.framework, e.precision, ", ".join(map(str, e.repeats)), e.compute_dtype or "–", e.param_dtype or "–",
         e.output_dtype or "–", e.loss_scaling_text, Cell("; ".join(e.notes) or "–", title="; ".join(e.notes))]
        for e in entries]
    return sortable_table("applied", "The precision each framework applied",
                  ["framework", "precision", "repeats", "compute", "parameters", "logits", "loss scaling", "notes"],
                  rows, limit=1500)


def added_html(results: list[CellResult]) -> list[str]:
    header, rows = added_figures_table(results)
    return sortable_table("figures", "Figures the plugins added (median over the ok repeats)", header,
                  [[*row[:2], *(Cell(text, as_number(text.replace(",", ""))) for text in row[2:])] for row in rows])


def every_run_html(cells: Any) -> list[str]:
    rows: list[list[Cell | str]] = []
    for record in cells.to_dict("records"):
        flags = str(record.get("measurement_flags") or "")
        rows.append([
            str(record["workload"]), str(record["framework"]), str(record["device_kind"] or "–"),
            str(record["mode"] or "–"), str(record["precision"]), Cell(str(record["repeat"]), float(record["repeat"])),
            Cell(str(record["status"]), title=str(record.get("error") or "")),
            Cell(formatted(record["throughput"], "{:,.0f}"), as_number(record["throughput"])),
            Cell(formatted(record["step_time_median_ms"], "{:.2f}"), as_number(record["step_time_median_ms"])),
            Cell(formatted(record["peak_memory_mib"], "{:,.0f}"), as_number(record["peak_memory_mib"])),
            Cell(formatted(record["final_loss"], "{:.4f}"), as_number(record["final_loss"])),
            Cell(formatted(_pct(record["val_accuracy"]), "{:.2f}%"), _pct(record["val_accuracy"])),
            Cell(FLAG_MARK if flags else "", title=flags),
            Cell(str(record.get("error") or ""), title=str(record.get("error") or "")),
        ])
    tokens = pd.to_numeric(cells["tokens_per_s"], errors="coerce").notna() if "tokens_per_s" in cells else []
    return sortable_table("runs", "Every run", ["workload", "framework", "device", "mode", "precision", "repeat", "status",
                                        throughput_unit(tokens), "step median ms", "peak memory MiB", "final loss",
                                        "validation accuracy", "flag", "error"], rows)


def flags_html(cells: Any) -> list[str]:
    """The measurement flags as footnotes, one per flagged run."""
    flagged = cells[(cells["status"] == "ok") & (cells["measurement_flags"].fillna("") != "")]
    if flagged.empty:
        return []
    items = []
    for r in flagged.itertuples():
        text = f"{r.workload} / {r.framework} / {r.precision} / repeat {r.repeat}: {r.measurement_flags}"
        items.append(f"<li>{html_text(text, LINE_CHARS)}</li>")
    return ['<h2 id="flags-section">Measurement flags</h2>',
            f"<p>{FLAG_MARK} marks a run whose timing is not to be trusted as it stands, for these reasons:</p>",
            '<ol class="footnotes">', *items, "</ol>"]


def seeds_html(cells: Any, margin: float) -> list[str]:
    """The paired differences over seeds and their verdicts (:mod:`amp_suite.report.seeds`); empty with one seed."""
    from amp_suite.report.seeds import SEEDS_NOTE, has_seed_axis, paired_figures

    if not has_seed_axis(cells):
        return []
    rows: list[list[Cell | str]] = []
    for row in paired_figures(cells, margin):
        digits = 2 if row.figure == "val_accuracy" else 4
        interval = "no interval" if row.seeds < 2 else f"{row.low:+.{digits}f} to {row.high:+.{digits}f}"
        verdict = row.verdict + (f" (±{row.margin:g})" if row.figure == "val_accuracy" else "")
        if row.seeds_to_settle is not None:
            verdict += f", about {row.seeds_to_settle} seeds to settle"
        rows.append([row.workload, row.framework, row.precision, row.control,
                     f"{row.figure} ({row.unit})" if row.unit else row.figure,
                     Cell(f"{row.mean:+.{digits}f}", row.mean), interval, verdict, Cell(str(row.seeds), row.seeds)])
    return ['<h2 id="seeds-section">Accuracy over seeds</h2>', *paragraphs([SEEDS_NOTE.replace("**", "")]),
            *sortable_table("seeds", f"Paired differences over seeds, margin ±{margin:g} points of accuracy",
                    ["workload", "framework", "precision", "against", "figure", "difference", "95% interval",
                     "verdict", "seeds"], rows)]


def charts_html(charts: list[Chart]) -> list[str]:
    if not charts:
        return []
    out = ['<h2 id="charts-section">Charts</h2>']
    for chart in charts:
        data = base64.b64encode(chart.png).decode("ascii")
        out.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html_text(chart.title)}">'
                   f"<figcaption>{html_text(chart.title)}</figcaption></figure>")
    return out


def failures_html(cells: Any) -> list[str]:
    failed = cells[cells["status"] != "ok"]
    if failed.empty:
        return []
    items = []
    for r in failed.itertuples():
        where = f"{r.workload} / {r.framework} / {r.precision} / repeat {r.repeat}"
        items.append(f"<li><b>{html_text(r.status)}</b> {html_text(where)}: "
                     f"{html_text(str(r.error or 'no message'), LINE_CHARS)}</li>")
    return ['<h2 id="failures-section">Runs without figures</h2>', "<ul>", *items, "</ul>"]


def sections_html(sections: list[tuple[str, str]] | tuple) -> list[str]:
    """Other plugins' report sections, their markdown shown as text."""
    out = []
    for title, body in sections:
        out += [f"<h2>{html_text(title)}</h2>", f'<pre class="section">{html.escape(str(body)[:20000])}</pre>']
    return out
