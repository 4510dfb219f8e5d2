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

from typing import Any

from amp_suite.records import CellResult
from amp_suite.report.context import environment_lines, methodology_lines, runtime_lines
from amp_suite.report.frames import results_frame
from amp_suite.report.html_parts import Cell, Chart, paragraphs, sortable_table
from amp_suite.report.html_sections import (
    added_html,
    applied_html,
    charts_html,
    every_run_html,
    failures_html,
    flags_html,
    sections_html,
    seeds_html,
    summary_html,
    verdict_html,
)
from amp_suite.report.html_tables import extra_tables_html
from amp_suite.report.loss_scale import HEADER, LOSS_SCALE_NOTE, loss_scale_rows
from amp_suite.report.notes import (
    busy_lines,
    incomplete_lines,
    not_compared,
    other_results_lines,
    settings_lines,
)
from amp_suite.report.repeat_spread import repeat_spread_lines
from amp_suite.report.seeds import margin_of
from amp_suite.report.summary import comparable_cells, summary_frame
from amp_suite.report.superseded import superseded_lines
from amp_suite.report.verdict import build_verdict, not_run_cells

# The pieces are html_parts.py's, the sections html_sections.py's; this module is the page.
__all__ = ["CSP", "SCRIPT", "SCRIPT_RAN", "STYLE", "Cell", "Chart", "added_html", "applied_html", "charts_html",
           "every_run_html", "failures_html", "flags_html", "render_html", "sections_html", "seeds_html", "summary_html",
           "verdict_html"]

# What the script writes on the <html> element once it ran to its end.
SCRIPT_RAN = "ran"


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
    verdict = build_verdict(summary, cells, not_run_cells(environment))
    body = ["<h1>amp-suite report</h1>", '<h2 id="verdict-section">Verdict</h2>', *verdict_html(verdict)]
    body += paragraphs(incomplete_lines(environment) + other_results_lines(environment) + settings_lines(summary)
                       + busy_lines(cells) + repeat_spread_lines(results) + superseded_lines(environment))
    if not summary.empty:
        body += ['<h2 id="summary-section">Every framework and precision</h2>', *summary_html(summary)]
        body += extra_tables_html(summary, cells, environment)
    body += seeds_html(comparable_cells(cells, summary), margin_of(environment))
    body += charts_html(list(charts))
    applied = applied_html(results)
    if applied:
        body += ['<h2 id="applied-section">What ran</h2>',
                 "<p>What each framework applied for each precision (its set_precision answer): the dtype "
                 "its convolutions and dense layers computed in, the dtypes of the parameters and the logits, "
                 "the loss scaling, and the switches that change results.</p>", *applied]
    scaled = loss_scale_rows(results)
    if scaled:
        body += ['<h2 id="loss-scale-section">Loss scaling</h2>', *paragraphs([LOSS_SCALE_NOTE]),
                 *sortable_table("loss-scale", "The loss scale of each amp_fp16 cell", HEADER,
                                 [list[Cell | str](row) for row in scaled])]
    added = added_html(results)
    if added:
        body += ['<h2 id="figures-section">Figures added by plugins</h2>', *added]
    body += flags_html(cells) if not cells.empty else []
    body += sections_html(sections)
    if not cells.empty:
        body += ['<h2 id="runs-section">Every run</h2>', *every_run_html(cells)]
        body += failures_html(cells)
    several_runs = bool(not_compared(summary))  # then the settings named are the last run's
    body += ['<h2 id="environment-section">Environment</h2>',
             *paragraphs(environment_lines(environment, several_runs) + runtime_lines(results))]
    body += ['<h2 id="method-section">How the figures were measured</h2>', *paragraphs(methodology_lines(environment))]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>amp-suite report</title>", f"<style>{STYLE}</style>", "</head>", "<body>", *body,
        f"<script>{SCRIPT}</script>", "</body>", "</html>", ""])
