"""Which report files of an output directory amp-suite wrote, and so may write again without ``--force``.

amp-suite replaces a file only when it wrote it or you say so (docs/usage.md).
A built-in report file is amp-suite's when it begins as its writer begins it
(``report.md`` with ``# amp-suite report``, ``results.csv`` with its header,
``results.json`` with the environment's ``amp_suite_version``, ``report.html``
with its title); ``charts.json`` when it is the charts reporter's index (an
object of charts, each naming its ``file``); a ``chart-*.png`` when that index
names it.  Anything else with one of these names (your own ``results.csv``, a
report whose first line you changed) is left alone unless ``--force`` says to
replace it.  Only the beginning is read: an edit below an unchanged first line
is not seen.
Links and special files are refused earlier and always
(:func:`amp_suite.sweep.output_dir.check_sweep_paths`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from amp_suite.owned_paths import FORCE_FLAG, NotOursError, read_private_file
from amp_suite.sweep.output_dir import CHART_PATTERN

# How each built-in report file begins as amp-suite writes it (its first KiB is read).
_STARTS = {
    "report.md": re.compile(rb"# amp-suite report"),
    "results.csv": re.compile(rb"workload,framework,precision,"),
    "results.json": re.compile(rb'\s*\{\s*"environment":\s*\{\s*"amp_suite_version"'),
    "report.html": re.compile(rb"<!DOCTYPE html>.{0,900}?<title>amp-suite report</title>", re.S),
}
_HEAD_BYTES = 1024
# The charts reporter's index of the charts it drew.
CHARTS_INDEX = "charts.json"


def _indexed_charts(directory: Path) -> set[str] | None:
    """The chart files ``directory``'s ``charts.json`` names; None when a ``charts.json`` is there that the
    charts reporter did not write (an empty set when there is none)."""
    data = read_private_file(directory, CHARTS_INDEX, 64 << 20)
    if data is None:
        return set()
    try:
        index = json.loads(data)
    except ValueError:
        return None
    if not isinstance(index, dict) or not all(isinstance(chart, dict) and isinstance(chart.get("file"), str)
                                              for chart in index.values()):
        return None
    return {chart["file"] for chart in index.values()}


def foreign_report_files(directory: Path) -> list[Path]:
    """The built-in report files in ``directory`` that amp-suite did not write (regular files only)."""
    foreign = []
    for name, start in _STARTS.items():
        head = read_private_file(directory, name, _HEAD_BYTES)
        if head is not None and start.match(head) is None:
            foreign.append(directory / name)
    charts = _indexed_charts(directory)
    if charts is None:
        foreign.append(directory / CHARTS_INDEX)
        charts = set()
    for chart in sorted(directory.glob(CHART_PATTERN)):
        if chart.name not in charts and read_private_file(directory, chart.name, 1) is not None:
            foreign.append(chart)
    return foreign


def check_report_files_replaceable(directory: Path, *, force: bool) -> None:
    """Raise a one-line :class:`NotOursError` when ``directory`` holds a report file amp-suite did not write,
    unless ``force``."""
    if force:
        return
    foreign = foreign_report_files(directory)
    if foreign:
        more = f" (nor {', '.join(p.name for p in foreign[1:])})" if len(foreign) > 1 else ""
        raise NotOursError(f"{str(foreign[0])[:300]!r} exists and is not a file amp-suite wrote{more}; left alone "
                           f"(pass {FORCE_FLAG} to replace it, or choose another --out)")
