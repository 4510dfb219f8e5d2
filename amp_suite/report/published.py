"""Published beside measured: an article's figures next to the ratios this sweep measured.

A sweep run from a preset carries the preset in its environment record
(:func:`amp_suite.config.presets.preset_record`), with the article's published figures
(``amp_suite/catalog/published.toml``).  For every figure, and every framework
of the sweep, the report's section puts the article's ratio (AMP over fp32, or
N devices over one) and the hardware it came from beside the same ratio
measured here, then lists what differs between the two runs.

How a measured ratio is formed, per metric (``compared / baseline``):

* ``epoch_time``, ``total_time``: steady-state time per step (warm-up
  excluded), i.e. ``throughput(baseline) / throughput(compared)``; at the same
  batch and steps, that is the ratio of time per epoch;
* ``peak_memory``: peak memory (the GPU allocator's, or on a CPU the worker's
  peak resident memory);
* ``val_accuracy``: validation accuracy (n/a on synthetic data).

The baseline is fp32 on one device; the compared cell is the table's
``precision`` (default ``amp_fp16``) on one device, or with
``compare = "devices"`` the same precision on the published device count (or
the most devices this sweep ran).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from amp_suite.config.catalog import PUBLISHED_METRICS
from amp_suite.precision import BASELINE

DEFAULT_PRECISION = "amp_fp16"
TIME_METRICS = ("epoch_time", "total_time")
COLUMNS = ["workload", "figure", "published", "published ratio", "published on", "framework", "measured here",
           "measured ratio", "measured on"]


def _cell(value: Any) -> str:
    """One markdown table cell: on one line, ``|`` escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _figure(value: float) -> str:
    """A measured figure with three or four significant digits, never in exponent notation."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _as_published(value: float, unit: str) -> str:
    """A published number as the article wrote it (21,000; 8.41), with its unit."""
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"
    return text + (unit if unit.startswith("%") else f" {unit}").rstrip()


def published_text(figure: dict[str, Any], baseline_label: str, compared_label: str) -> tuple[str, str]:
    """The published figure and its ratio as the table shows them."""
    unit = figure.get("unit", "")
    if "ratio_min" in figure:
        low, high = figure["ratio_min"], figure["ratio_max"]
        return (f"{compared_label} at about {low * 100:.0f}–{high * 100:.0f}% of {baseline_label}",
                f"{low:.2f}–{high:.2f}")
    if "baseline" not in figure:
        return f"{compared_label}: about {_as_published(figure['compared'], unit)}", "–"
    base, compared = figure["baseline"], figure["compared"]
    ratio = f"{compared / base:.2f}" if base else "–"
    return f"{baseline_label} {_as_published(base, '')} → {compared_label} {_as_published(compared, unit)}", ratio


def _labels(figure: dict[str, Any], precision: str) -> tuple[str, str]:
    if figure.get("compare") == "devices":
        return "1 device", f"{figure['devices']} devices"
    return BASELINE, precision


def _row(frame: pd.DataFrame, precision: str, devices: int) -> pd.Series | None:
    match = frame[(frame["precision"] == precision) & (frame["devices"] == devices)]
    return match.iloc[0] if len(match) else None


def _measured(metric: str, base: pd.Series, compared: pd.Series, batch: Any, memory_source: str) -> tuple[str, str]:
    """The measured pair and ratio for ``metric``."""
    for row in (base, compared):
        if row["status"] != "ok":
            return f"{row['precision']} on {int(row['devices'])} device(s): {row['status']}", "–"
    if metric in TIME_METRICS:
        b, c = base["throughput"], compared["throughput"]
        if not (_known(b) and _known(c)) or not b or not c:
            return "no throughput", "–"
        if isinstance(batch, (int, float)) and _known(batch):
            text = f"{_figure(batch * 1000 / b)} → {_figure(batch * 1000 / c)} ms/step"
        else:
            text = f"{b:,.0f} → {c:,.0f} images/s"
        return text, f"{b / c:.2f}"
    if metric == "peak_memory":
        b, c = base["peak_memory_mib"], compared["peak_memory_mib"]
        if not (_known(b) and _known(c)) or not b:
            return "no memory figure", "–"
        return f"{b:,.0f} → {c:,.0f} MiB ({memory_source or 'peak'})", f"{c / b:.2f}"
    b, c = base["val_accuracy"], compared["val_accuracy"]
    if not (_known(b) and _known(c)):
        return "n/a (synthetic data)", "–"
    return f"{b * 100:.2f}% → {c * 100:.2f}%", (f"{c / b:.3f}" if b else "–")


def published_frame(summary: pd.DataFrame, cells: pd.DataFrame, environment: dict[str, Any]) -> pd.DataFrame:
    """One row per published figure and framework of the sweep (``COLUMNS``)."""
    record = environment.get("preset") or {}
    published = record.get("published") or {}
    if not published.get("figures"):
        return pd.DataFrame(columns=COLUMNS)
    default_precision = published.get("precision", DEFAULT_PRECISION)
    frameworks = list(dict.fromkeys(summary["framework"])) if not summary.empty else []
    cpu = environment.get("cpu_model") or "?"
    rows = []
    for figure in published["figures"]:
        precision = figure.get("precision", default_precision)
        labels = _labels(figure, precision)
        text, ratio = published_text(figure, *labels)
        metric = PUBLISHED_METRICS.get(figure["metric"], figure["metric"])
        if figure.get("compare") == "devices":
            metric += f" ({precision}, 1 vs {figure['devices']} devices)"
        head = {"workload": figure["workload"], "figure": metric, "published": text, "published ratio": ratio,
                "published on": figure.get("hardware") or published.get("hardware", "?")}
        ran = summary[summary["workload"] == figure["workload"]] if not summary.empty else summary
        if ran.empty:
            rows.append({**head, "framework": "–", "measured here": "not run in this sweep", "measured ratio": "–",
                         "measured on": "–"})
            continue
        for framework in frameworks:
            mine = ran[ran["framework"] == framework]
            if mine.empty:
                rows.append({**head, "framework": framework, "measured here": "not run", "measured ratio": "–",
                             "measured on": "–"})
                continue
            for kind in dict.fromkeys(mine["device_kind"]):
                rows.append({**head, "framework": framework,
                             **_measured_cells(figure, mine[mine["device_kind"] == kind], cells, precision, cpu)})
    return pd.DataFrame([{k: _cell(v) for k, v in row.items()} for row in rows], columns=COLUMNS)


def _measured_cells(figure: dict[str, Any], rows: pd.DataFrame, cells: pd.DataFrame, precision: str,
                    cpu: str) -> dict[str, str]:
    """The measured columns for one framework and device kind."""
    first = rows.iloc[0]
    device = first["device"]
    on = f"cpu ({cpu})" if first["device_kind"] == "cpu" else str(device)
    if figure.get("compare") == "devices":
        base = _row(rows, precision, 1)
        counts = sorted(int(n) for n in rows[rows["precision"] == precision]["devices"] if int(n) > 1)
        wanted = figure["devices"] if figure["devices"] in counts else (counts[-1] if counts else None)
        if base is None or wanted is None:
            return {"measured here": f"{precision} not run on 1 and several devices", "measured ratio": "–",
                    "measured on": on}
        compared = _row(rows, precision, wanted)
        on += f", 1 vs {wanted} devices"
    else:
        base, compared = _row(rows, BASELINE, 1), _row(rows, precision, 1)
        if base is None or compared is None:
            missing = BASELINE if base is None else precision
            return {"measured here": f"{missing} not run", "measured ratio": "–", "measured on": on}
    mine = cells[(cells["workload"] == first["workload"]) & (cells["framework"] == first["framework"])
                 & (cells["device_kind"] == first["device_kind"])]
    batch = next((b for b in mine["batch_size"] if _known(b)), None)
    source = next((s for s in mine["memory_source"] if s), "")
    text, ratio = _measured(figure["metric"], base, compared, batch, source)
    return {"measured here": text, "measured ratio": ratio, "measured on": on}


def difference_lines(environment: dict[str, Any], cells: pd.DataFrame, substituted: bool) -> list[str]:
    """What differs between the article's run and this one, one bullet each."""
    record = environment.get("preset") or {}
    published = record.get("published") or {}
    lines = [f"- {note}" for note in record.get("notes", [])]
    gpus = [g.get("name", "?") for g in environment.get("gpus") or []]
    kinds = {k for k in cells["device_kind"] if k} if not cells.empty else set()
    hardware = published.get("hardware", "?")
    if "gpu" in kinds:
        lines.append(f"- Hardware: the article ran on {hardware}; this sweep on {', '.join(sorted(set(gpus))) or 'a GPU'}.")
    else:
        lines.append(f"- Hardware: the article ran on {hardware}; this sweep ran on the CPU "
                     f"({environment.get('cpu_model') or '?'}; flags: "
                     f"{', '.join(environment.get('cpu_flags') or []) or 'none of interest'}), with no GPU: "
                     "AMP's reduced-precision math runs on CPU kernels rather than a GPU's, so the ratios here "
                     "say what AMP does on this CPU, not whether the article's GPU figures hold.")
    for note in record.get("adjusted", []):
        lines.append(f"- Devices: {note}.")
    changed = record.get("command_line") or {}
    if changed:
        parts = [f"{key} {_shown(v['used'])}" + (f" (the preset: {_shown(v['preset'])})" if v["preset"] is not None
                                                  else "") for key, v in changed.items()]
        lines.append(f"- Command line: {'; '.join(parts)}.")
    if substituted:
        lines.append("- Data: the dataset could not be had, so synthetic data stood in (see the data lines "
                     "above): accuracy is n/a and the images are not the article's.")
    if published.get("framework"):
        lines.append(f"- Framework: the article measured one, {published['framework']}; this sweep runs "
                     "every framework from the same initial weights and batches.")
    if not cells.empty and "process RSS" in " ".join(str(s) for s in cells["memory_source"]):
        lines.append("- Memory: on a CPU the figure here is the worker process's peak resident memory "
                     "(the framework runtime included, so ratios stay near 1), not a GPU allocator's peak.")
    lines.append("- Time: ratios here are of steady-state time per step (warm-up excluded); the article's are "
                 "of whole epochs or runs as it timed them.")
    return lines


def _shown(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def published_section(summary: pd.DataFrame, cells: pd.DataFrame, environment: dict[str, Any],
                      substituted: bool = False) -> tuple[str, str] | None:
    """``(title, markdown)`` of the section, or ``None`` when the sweep came from no preset with figures."""
    record = environment.get("preset") or {}
    published = record.get("published") or {}
    if not published.get("figures"):
        return None
    table = published_frame(summary, cells, environment)
    intro = [
        f"Preset `{record.get('name')}` ({record.get('source', '?')}): {record.get('description', '')}",
        "",
        f"The article: *{published.get('article', '?')}* — {published.get('framework', '')}, on "
        f"{published.get('hardware', '?')}." + (f" Setup: {published['setup']}." if published.get("setup") else "")
        + (f" Context: {published['context']}." if published.get("context") else ""),
        "",
        "Each ratio is compared over baseline: AMP over fp32 (or several devices over one). Time below 1 is "
        "faster, memory below 1 is smaller. Each published figure's source is in "
        "`amp_suite/catalog/published.toml` (docs/presets.md).",
        "",
        table.to_markdown(index=False, disable_numparse=True),
        "",
    ]
    notes = [f"- {figure['workload']}, {PUBLISHED_METRICS.get(figure['metric'], figure['metric'])}: "
             f"{figure['where']}" + (f" ({figure['note']})" if figure.get("note") else "")
             for figure in published["figures"]]
    body = intro + ["Where each published figure comes from:", "", *notes, "",
                    "### What differs here from the article", "",
                    *difference_lines(environment, cells, substituted)]
    return f"Published beside measured: {published.get('article', record.get('name'))}", "\n".join(body)
