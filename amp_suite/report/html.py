"""``report.html``: the report as one self-contained page.

The verdict first, then tables a reader can sort (click a header) and filter
(type in the box above a table), the charts embedded as base64 PNG, what ran,
the plugins' figures, every run, and the environment and methodology last.
Trust marks carry their reasons as tooltips (``title``) and as footnotes.

Everything comes from the frames ``report.md`` is built from, so both say the
same.  The page loads nothing: its CSS and script are inline, and its content
security policy forbids any other source.  Every stored text (a workload's
name, an error message, a plugin's note) is escaped with
:func:`amp_suite.report.text.html_text`, so no stored text can open a tag.

The script marks the page when it ran (``data-report-script="ran"`` on the
``<html>`` element) and records a script error in ``data-script-error``; a
location hash ``#sort=TABLE:COLUMN[:desc]&filter=TABLE:TEXT`` sorts and
filters on load (a view to share, and what the browser test checks).
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from typing import Any

from amp_suite.records import CellResult
from amp_suite.report.added_figures import added_figures_table
from amp_suite.report.applied import applied_precisions
from amp_suite.report.loss_scale import HEADER, LOSS_SCALE_NOTE, loss_scale_rows
from amp_suite.report.marks import FLAG_MARK, SINGLE_RUN_MARK
from amp_suite.report.normalize import (
    busy_lines,
    environment_lines,
    incomplete_lines,
    methodology_lines,
    results_frame,
    runtime_lines,
    summary_frame,
)
from amp_suite.report.seeds import margin_of
from amp_suite.report.text import LINE_CHARS, html_text
from amp_suite.report.verdict import MARK_LEGEND, Verdict, accuracy_cell, build_verdict, memory_cell, speedup_cell

# What the script writes on the <html> element once it ran to its end.
SCRIPT_RAN = "ran"


@dataclass(frozen=True)
class Chart:
    """A chart to embed: its caption and its PNG bytes."""

    title: str
    png: bytes


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, the value it sorts by (a number, where it has one) and its tooltip."""

    text: str
    sort: float | None = None
    title: str = ""


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(value: Any, pattern: str) -> str:
    number = _number(value)
    return "–" if number is None else pattern.format(number)


def _td(cell: Cell | str, *, limit: int = 300) -> str:
    if isinstance(cell, str):
        cell = Cell(cell)
    attributes = ""
    if cell.sort is not None:
        attributes += f' data-sort="{cell.sort!r}"'
    if cell.title:
        attributes += f' title="{html_text(cell.title, LINE_CHARS)}"'
    return f"<td{attributes}>{html_text(cell.text, limit)}</td>"


def _table(table_id: str, caption: str, header: list[str], rows: list[list[Cell | str]], *,
           limit: int = 300) -> list[str]:
    """A sortable, filterable table: a filter box, then the table (each header cell a sort button)."""
    if not rows:
        return []
    safe_id = html.escape(table_id, quote=True)
    out = [f'<div class="table" id="{safe_id}-box">',
           f'<input type="search" class="filter" data-table="{safe_id}" placeholder="filter rows" '
           f'aria-label="filter the rows of {html_text(caption)}">',
           f'<table class="sortable" id="{safe_id}"><caption>{html_text(caption)}</caption>',
           "<thead><tr>" + "".join(f'<th scope="col" tabindex="0">{html_text(h)}</th>' for h in header)
           + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(_td(cell, limit=limit) for cell in row) + "</tr>" for row in rows]
    out += ["</tbody></table></div>"]
    return out


def _paragraphs(lines: list[str]) -> list[str]:
    """Markdown-ish lines (paragraphs, ``- `` bullets, ``> `` notes) as escaped HTML."""
    out: list[str] = []
    bullets: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("- "):
            bullets.append(f"<li>{html_text(line[2:].replace('`', ''), LINE_CHARS)}</li>")
            continue
        if bullets:
            out += ["<ul>", *bullets, "</ul>"]
            bullets = []
        if line.startswith("> "):
            out.append(f'<p class="note">{html_text(line[2:].replace("**", "").replace("`", ""), LINE_CHARS)}</p>')
        elif line.strip():
            out.append(f"<p>{html_text(line.replace('`', ''), LINE_CHARS)}</p>")
    return out


# --- sections ---------------------------------------------------------------------------


def verdict_html(verdict: Verdict) -> list[str]:
    if verdict.empty:
        return ["<p>No results.</p>"]
    rows: list[list[Cell | str]] = []
    for line in verdict.lines:
        why = "; ".join(line.cautions)
        rows.append([line.place, line.precision,
                     Cell(speedup_cell(line), line.speedup, why),
                     Cell(memory_cell(line), line.memory_ratio),
                     Cell(accuracy_cell(line), line.accuracy_delta_pt)])
    out = _table("verdict", "Each AMP precision against fp32 in the same framework",
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
        if _number(row.get("speedup")) is not None and _number(row.get("speedup_low")) is None:
            marks.append(SINGLE_RUN_MARK)
            why.append("a single run: no interval")
    elif row["status"] == "ok" and row.get("flagged"):
        marks.append(FLAG_MARK)
        why.append("flagged: its timing is not to be trusted (see the measurement flags)")
    return " ".join(marks), "; ".join(why)


def summary_html(summary: Any) -> list[str]:
    """A row per framework and precision (and workload, device, mode, batch): the figures and their ratios."""
    rows: list[list[Cell | str]] = []
    for _, row in summary.iterrows():
        marks, why = _marks(row)
        ok = row["status"] == "ok"
        interval = ""
        if ok and _number(row.get("speedup_low")) is not None:
            interval = f"{row['speedup_low']:.2f}–{row['speedup_high']:.2f}"
        rows.append([
            str(row["workload"]), str(row["framework"]), str(row["device"]),
            Cell(str(int(row["devices"])), float(row["devices"])), str(row["mode"] or "–"),
            Cell(str(int(row["batch_size"])), float(row["batch_size"])), str(row["precision"]),
            Cell(str(row["status"]), title=str(row.get("error") or "")),
            Cell(_fmt(row["throughput"], "{:,.0f}"), _number(row["throughput"])),
            Cell(_fmt(row["speedup"], "{:.2f}x") if ok else "n/a", _number(row["speedup"]) if ok else None, why),
            Cell(interval or "–", title="95% interval of the speed-up" if interval else ""),
            Cell(marks or "–", title=why),
            Cell(_fmt(row["peak_memory_mib"], "{:,.0f}"), _number(row["peak_memory_mib"])),
            Cell(_fmt(row["memory_ratio"], "{:.2f}x"), _number(row["memory_ratio"])),
            Cell(_fmt(_pct(row["val_accuracy"]), "{:.2f}%"), _pct(row["val_accuracy"])),
            Cell(_fmt(_pct(row["accuracy_delta"]), "{:+.2f} pt"), _pct(row["accuracy_delta"])),
            Cell(_fmt(row["final_loss"], "{:.4f}"), _number(row["final_loss"])),
            Cell(f"{int(row['ok_repeats'])} of {int(row['repeats'])}", float(row["ok_repeats"])),
        ])
    return _table("summary", "Every framework and precision (medians over the ok repeats)",
                  ["workload", "framework", "device", "devices", "mode", "batch", "precision", "status", "images/s",
                   "speed-up over fp32", "95% interval", "marks", "peak memory MiB", "memory vs fp32",
                   "validation accuracy", "accuracy vs fp32", "final loss", "ok repeats"], rows)


def _pct(value: Any) -> float | None:
    number = _number(value)
    return None if number is None else number * 100.0


def applied_html(results: list[CellResult]) -> list[str]:
    entries = applied_precisions(results)
    rows: list[list[Cell | str]] = [
        [e.framework, e.precision, ", ".join(map(str, e.repeats)), e.compute_dtype or "–", e.param_dtype or "–",
         e.output_dtype or "–", e.loss_scaling_text, Cell("; ".join(e.notes) or "–", title="; ".join(e.notes))]
        for e in entries]
    return _table("applied", "The precision each framework applied",
                  ["framework", "precision", "repeats", "compute", "parameters", "logits", "loss scaling", "notes"],
                  rows, limit=1500)


def added_html(results: list[CellResult]) -> list[str]:
    header, rows = added_figures_table(results)
    return _table("figures", "Figures the plugins added (median over the ok repeats)", header,
                  [[*row[:2], *(Cell(text, _number(text.replace(",", ""))) for text in row[2:])] for row in rows])


def every_run_html(cells: Any) -> list[str]:
    rows: list[list[Cell | str]] = []
    for record in cells.to_dict("records"):
        flags = str(record.get("measurement_flags") or "")
        rows.append([
            str(record["workload"]), str(record["framework"]), str(record["device_kind"] or "–"),
            str(record["mode"] or "–"), str(record["precision"]), Cell(str(record["repeat"]), float(record["repeat"])),
            Cell(str(record["status"]), title=str(record.get("error") or "")),
            Cell(_fmt(record["throughput"], "{:,.0f}"), _number(record["throughput"])),
            Cell(_fmt(record["step_time_median_ms"], "{:.2f}"), _number(record["step_time_median_ms"])),
            Cell(_fmt(record["peak_memory_mib"], "{:,.0f}"), _number(record["peak_memory_mib"])),
            Cell(_fmt(record["final_loss"], "{:.4f}"), _number(record["final_loss"])),
            Cell(_fmt(_pct(record["val_accuracy"]), "{:.2f}%"), _pct(record["val_accuracy"])),
            Cell(FLAG_MARK if flags else "", title=flags),
            Cell(str(record.get("error") or ""), title=str(record.get("error") or "")),
        ])
    return _table("runs", "Every run", ["workload", "framework", "device", "mode", "precision", "repeat", "status",
                                        "images/s", "step median ms", "peak memory MiB", "final loss",
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
    return ['<h2 id="seeds-section">Accuracy over seeds</h2>', *_paragraphs([SEEDS_NOTE.replace("**", "")]),
            *_table("seeds", f"Paired differences over seeds, margin ±{margin:g} points of accuracy",
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


# --- the page -------------------------------------------------------------------------


STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 78em;
       padding: 0 1em; color: #222; background: #fbfbf9; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.4em 0 1em; font-size: 0.92em; }
caption { text-align: left; font-weight: 600; padding: 0.2em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #eeeeea; cursor: pointer; user-select: none; white-space: nowrap; }
th[aria-sort="ascending"]::after { content: " \\25B2"; } th[aria-sort="descending"]::after { content: " \\25BC"; }
td[title] { text-decoration: underline dotted #999; }
tbody tr:nth-child(even) { background: #f3f3ef; }
.table { overflow-x: auto; } .filter { margin-top: 0.6em; padding: 0.2em 0.4em; width: 18em; }
#verdict-box table { font-size: 1.05em; } .sentences li { margin: 0.3em 0; }
.note { background: #fff4d6; border-left: 4px solid #e0a800; padding: 0.4em 0.7em; }
.legend { color: #555; font-size: 0.9em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
pre.section { white-space: pre-wrap; background: #f3f3ef; padding: 0.6em; }
"""

SCRIPT = """
(function () {
  "use strict";
  var root = document.documentElement;
  window.addEventListener("error", function (event) {
    root.setAttribute("data-script-error", String(event.message || "error"));
  });
  function key(cell) {
    var sort = cell.getAttribute("data-sort");
    if (sort !== null && sort !== "" && !isNaN(parseFloat(sort))) { return parseFloat(sort); }
    return cell.textContent.trim().toLowerCase();
  }
  function sortTable(table, column, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (x, y) {
      var a = key(x.cells[column]), b = key(y.cells[column]);
      if (typeof a !== typeof b) { return typeof a === "number" ? -1 : 1; }  // no figure: last either way
      var order = typeof a === "number" ? a - b : (a < b ? -1 : (a > b ? 1 : 0));
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      if (index === column) { th.setAttribute("aria-sort", descending ? "descending" : "ascending"); }
      else { th.removeAttribute("aria-sort"); }
    });
    table.setAttribute("data-sorted", column + (descending ? ":desc" : ":asc"));
  }
  function filterTable(table, text) {
    var query = text.trim().toLowerCase();
    var shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var hit = !query || row.textContent.toLowerCase().indexOf(query) >= 0;
      row.hidden = !hit;
      if (hit) { shown += 1; }
    });
    table.setAttribute("data-shown", String(shown));
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      function click() { sortTable(table, index, th.getAttribute("aria-sort") === "ascending"); }
      th.addEventListener("click", click);
      th.addEventListener("keydown", function (event) { if (event.key === "Enter") { click(); } });
    });
    table.setAttribute("data-shown", String(table.tBodies[0].rows.length));
  });
  Array.prototype.forEach.call(document.querySelectorAll("input.filter"), function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    input.addEventListener("input", function () { filterTable(table, input.value); });
  });
  location.hash.replace(/^#/, "").split("&").forEach(function (part) {
    var pair = part.split("="), name = pair[0], value = decodeURIComponent(pair.slice(1).join("="));
    var fields = value.split(":"), table = document.getElementById(fields[0]);
    if (!table || !table.classList.contains("sortable")) { return; }
    if (name === "sort") { sortTable(table, parseInt(fields[1], 10) || 0, fields[2] === "desc"); }
    if (name === "filter") {
      var text = fields.slice(1).join(":");
      var input = document.querySelector('input.filter[data-table="' + fields[0] + '"]');
      if (input) { input.value = text; }
      filterTable(table, text);
    }
  });
  root.setAttribute("data-sortable-tables", String(tables.length));
  root.setAttribute("data-report-script", "SCRIPT_RAN");
})();
""".replace("SCRIPT_RAN", SCRIPT_RAN)

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def render_html(results: list[CellResult], environment: dict[str, Any], *, charts: list[Chart] | tuple = (),
                sections: list[tuple[str, str]] | tuple = ()) -> str:
    """The whole ``report.html``: one self-contained page."""
    summary = summary_frame(results, environment)
    cells = results_frame(results, environment)
    verdict = build_verdict(summary, cells)
    body = ["<h1>amp-suite report</h1>", '<h2 id="verdict-section">Verdict</h2>', *verdict_html(verdict)]
    body += _paragraphs(incomplete_lines(environment) + busy_lines(cells))
    if not summary.empty:
        body += ['<h2 id="summary-section">Every framework and precision</h2>', *summary_html(summary)]
    body += seeds_html(cells, margin_of(environment))
    body += charts_html(list(charts))
    applied = applied_html(results)
    if applied:
        body += ['<h2 id="applied-section">What ran</h2>',
                 "<p>What each framework applied for each precision (its set_precision answer): the dtype "
                 "its convolutions and dense layers computed in, the dtypes of the parameters and the logits, "
                 "the loss scaling, and the switches that change results.</p>", *applied]
    scaled = loss_scale_rows(results)
    if scaled:
        body += ['<h2 id="loss-scale-section">Loss scaling</h2>', *_paragraphs([LOSS_SCALE_NOTE]),
                 *_table("loss-scale", "The loss scale of each amp_fp16 cell", HEADER,
                         [list[Cell | str](row) for row in scaled])]
    added = added_html(results)
    if added:
        body += ['<h2 id="figures-section">Figures added by plugins</h2>', *added]
    body += flags_html(cells) if not cells.empty else []
    body += sections_html(sections)
    if not cells.empty:
        body += ['<h2 id="runs-section">Every run</h2>', *every_run_html(cells)]
        body += failures_html(cells)
    body += ['<h2 id="environment-section">Environment</h2>', *_paragraphs(environment_lines(environment)
                                                                   + runtime_lines(results))]
    body += ['<h2 id="method-section">How the figures were measured</h2>', *_paragraphs(methodology_lines(environment))]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>amp-suite report</title>", f"<style>{STYLE}</style>", "</head>", "<body>", *body,
        f"<script>{SCRIPT}</script>", "</body>", "</html>", ""])
