"""The HTML reporter: ``report.html``, one self-contained page beside ``report.md``.

The page (:mod:`amp_suite.report.html`) opens with the verdict, then tables
to sort and filter, the charts embedded as base64 PNG (the very charts the
charts reporter drew, when it ran first: :func:`amp_suite_plugins.charts.draw_charts`
draws equal data once), what ran, the plugins' figures and every run.
``amp-suite report DIR --open`` opens it in a browser.  Turn it off with
``AMP_SUITE_DISABLE_PLUGINS=html``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amp_suite import hookimpl
from amp_suite.records import CellResult
from amp_suite.safe_files import write_files_atomically

REPORT_HTML = "report.html"
# The charts the page embeds, in order, with their captions.
CHART_TITLES = {
    "speedup": "Speed-up over fp32 per framework and AMP precision (95% interval as an error bar; ⚑ flagged, "
               "1 run: no interval; n/a: no figure)",
    "speedup_tf32": "Speed-up of fp16 and bf16 over tf32",
    "memory": "Peak memory relative to fp32",
    "batch": "AMP speed-up and memory ratio by batch size",
    "loss": "Training loss per step",
    "accuracy": "Validation accuracy per precision (difference from fp32 in points)",
}


def embedded_charts(results: list[CellResult], environment: dict[str, Any]) -> list[Any]:
    """The charts to embed (none without matplotlib or without an ok cell)."""
    from amp_suite.report.html import Chart
    from amp_suite_plugins import charts

    if not charts._have_matplotlib() or not any(r.status == "ok" for r in results):
        return []
    drawn = charts.draw_charts(charts.chart_data(results, environment))
    return [Chart(title, drawn[name][0]) for name, title in CHART_TITLES.items() if name in drawn]


@hookimpl(trylast=True)  # after the charts reporter: its drawing is reused
def write_report(results: list[CellResult], out_dir: Path, environment: dict[str, Any],
                 sections: list[tuple[str, str]] | tuple[()] = ()) -> list[Path]:
    # imported here: every worker loads this plugin, and pandas and matplotlib are not a worker's business
    from amp_suite.report.html import render_html

    embedded = embedded_charts(results, environment)
    shown = [(title, body) for title, body in sections if not (embedded and title == "Charts")]  # embedded above
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_files_atomically({out_dir / REPORT_HTML: render_html(results, environment, charts=embedded,
                                                                      sections=shown)})
