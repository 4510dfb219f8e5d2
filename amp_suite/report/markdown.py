"""``report.md``: the sections of the report in their order, from the frames, tables and notes.

The verdict first, then the environment, the ceiling, the comparison tables
with their notes, the sections that appear only when the sweep has them
(pools, variants, Keras's cost, tokens, time to target, seeds, curves,
flags, published figures, plugins' sections, scaling), what ran, the
method, and every run.
"""

from __future__ import annotations

from typing import Any

from amp_suite.records import CellResult
from amp_suite.report.added_figures import added_figures_lines
from amp_suite.report.context import ceiling_lines, environment_lines, methodology_lines, runtime_lines
from amp_suite.report.curves import curve_lines
from amp_suite.report.extra_tables import TableInputs
from amp_suite.report.extra_tables import markdown_lines as extra_table_lines
from amp_suite.report.frames import device_label, is_synthetic, results_frame
from amp_suite.report.loss_scale import loss_scale_lines
from amp_suite.report.notes import (
    best_configuration_lines,
    busy_lines,
    energy_scope_lines,
    incomplete_lines,
    interval_lines,
    memory_noise_lines,
    mode_lines,
    not_compared,
    other_results_lines,
    settings_lines,
)
from amp_suite.report.published import published_section
from amp_suite.report.repeat_spread import repeat_spread_lines
from amp_suite.report.seeds import margin_of, seeds_lines
from amp_suite.report.summary import comparable_cells, summary_frame
from amp_suite.report.superseded import superseded_lines
from amp_suite.report.tables import comparison_tables
from amp_suite.report.text import REPORT_FIRST_LINE, flat_text, no_raw_html, table_text
from amp_suite.report.tokens import dataset_line

# Why synthetic data has no accuracy figure.
SYNTHETIC_ACCURACY_NOTE = ("Validation accuracy is n/a on synthetic data: its class-prototype images are "
                           "separable by design, so every precision scores about 100% and the figure "
                           "measures nothing about a real task. Use --dataset mnist (the default) for "
                           "real accuracies.")


def render_markdown(results: list[CellResult], environment: dict[str, Any],
                    sections: list[tuple[str, str]] | tuple = ()) -> str:
    """The whole ``report.md``; ``sections`` are other plugins' ``(title, markdown)`` sections."""
    summary = summary_frame(results, environment)
    cells = results_frame(results, environment)
    from amp_suite.report.applied import applied_lines
    from amp_suite.report.every_run import every_run_lines
    from amp_suite.report.keras_backends import backend_lines
    from amp_suite.report.variants import environment_lines as variant_environment_lines
    from amp_suite.report.verdict import build_verdict, not_run_cells
    from amp_suite.report.verdict_text import markdown_lines

    verdict = build_verdict(summary, cells, not_run_cells(environment))
    out = [REPORT_FIRST_LINE, "", "## Verdict", "", *markdown_lines(verdict, table_text),
           "## Environment", "", *environment_lines(environment, bool(not_compared(summary))),
           *runtime_lines(results), *variant_environment_lines(cells), *backend_lines(cells), ""]
    if not cells.empty:
        devices = sorted({device_label(k, [n])
                          for k, n in zip(cells["device_kind"], cells["device"], strict=True) if k})
        out += [f"- devices used: {', '.join(devices) or 'none reached'}",
                f"- dataset: {dataset_line(cells)}", ""]
        notes = sorted({(r.metrics or {}).get("dataset_note", "") for r in results} - {""})
        out += [f"- data: {n}" for n in notes] + ([""] if notes else [])
        if any((r.metrics or {}).get("dataset_substituted") for r in results):
            out += ["> **Data substitution:** synthetic data stood in for a dataset that could not be had "
                    "(see the data lines above). Accuracy figures do not describe the real dataset.", ""]
        if any(is_synthetic(r) for r in results if r.status == "ok"):
            out += [f"> {SYNTHETIC_ACCURACY_NOTE}", ""]
    out += (incomplete_lines(environment) + other_results_lines(environment) + settings_lines(summary)
            + busy_lines(cells) + repeat_spread_lines(results) + superseded_lines(environment))
    out += ["## Hardware ceiling", "", *ceiling_lines(environment, cells),
            "Beside each speed-up, its ceiling is the measured peak of the AMP dtype over the fp32 peak "
            "(the speed-up a compute-bound model could reach); beside each achieved TFLOP/s, the fraction of "
            "its dtype's peak.", ""]
    for title, table in comparison_tables(summary, environment).items():
        out += [f"## {title}", "", table.to_markdown(index=False, disable_numparse=True) if not table.empty else "_no results_", ""]
        if title.startswith("Throughput"):
            out += interval_lines(summary, environment) + mode_lines(summary)
            best = best_configuration_lines(summary)
            if best:
                out += ["Best configuration per framework (fastest mode, batch and precision of the sweep):", "",
                        *best]
        if title.startswith("Peak memory"):
            out += memory_noise_lines(summary)
        if title.startswith("Energy"):
            out += energy_scope_lines(summary)
    inputs = TableInputs(summary, cells, environment)
    out += extra_table_lines(inputs, "middle")
    out += seeds_lines(comparable_cells(cells, summary), margin_of(environment), table_text)
    out += curve_lines(results, table_text)
    out += loss_scale_lines(results)
    flagged = cells[(cells["status"] == "ok") & (cells["measurement_flags"].fillna("") != "")]
    if not flagged.empty:
        out += ["## Measurement flags", "",
                "⚑ in the throughput table: a cell whose timing is not to be trusted as it stands, for the "
                "reasons below (docs/measurement.md).", ""]
        out += [flat_text(f"- {r.workload} / {r.framework} / {r.precision}"
                          + (f" / {r.devices} devices" if r.devices != 1 else "")
                          + (f" / seed {r.seed}" if r.seed_axis else "")
                          + f" / repeat {r.repeat}: {r.measurement_flags}") for r in flagged.itertuples()]
        out.append("")
    published = published_section(summary, cells, environment,
                                  substituted=any((r.metrics or {}).get("dataset_substituted") for r in results))
    if published is not None:
        out += [f"## {flat_text(published[0])}", "", published[1], ""]
    for title, body in sections:
        out += [f"## {flat_text(title)}", "", body, ""]
    out += extra_table_lines(inputs, "end")
    out += ["## What ran", "", *(applied_lines(results) or ["_no cell recorded the precision it applied_", ""])]
    added = added_figures_lines(results)
    if added:
        out += ["## Figures added by plugins", "", *added]
    out += ["## How the figures were measured", "", *methodology_lines(environment)]
    out += ["## Every run", "", *every_run_lines(cells)]
    failed = cells[~cells["status"].isin(["ok"])]
    if not failed.empty:
        out += ["## Runs without figures", ""]
        out += [flat_text(f"- {r.workload} / {r.framework} / {r.precision}"
                          + (f" / {r.devices} devices" if r.devices != 1 else "") + f" / repeat {r.repeat}: **{r.status}**"
                          f" — {r.error or 'no message'}") for r in failed.itertuples()]
        out.append("")
    return no_raw_html("\n".join(out))
