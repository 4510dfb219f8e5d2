"""Which report files of an output directory amp-suite wrote, and so may write again without ``--force``.

amp-suite replaces a file only when it wrote it or you say so (docs/usage.md).
After each report, ``report-digests.json`` records the SHA-256 of every
built-in report file just written; a file it names is amp-suite's while its
bytes still have that digest, so an edit anywhere in ``report.md`` is seen.
A file it does not name (a folder written before the record existed) is
judged by how it begins: a built-in report file is amp-suite's when it begins
as its writer begins it (``report.md`` with ``# amp-suite report``,
``results.csv`` with its header, ``results.json`` with the environment's
``amp_suite_version``, ``report.html`` with its title); ``charts.json`` when
it is the charts reporter's index (an object of charts, each naming its
``file``); a ``chart-*.png`` when that index names it.  Anything else with
one of these names (your own ``results.csv``, a report you edited) is left
alone unless ``--force`` says to replace it.
Links and special files are refused earlier and always
(:func:`amp_suite.sweep.output_dir.check_sweep_paths`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.owned_paths import FORCE_FLAG, NotOursError, read_private_file
from amp_suite.report.superseded import without_superseded
from amp_suite.report.unfinished import with_unfinished
from amp_suite.safe_files import write_file_atomically
from amp_suite.sweep.output_dir import CHART_PATTERN, ENVIRONMENT_FILE, REPORT_DIGESTS_FILE, RESULTS_FILE

if TYPE_CHECKING:
    from amp_suite.plugins.host import PluginHost, ReportOutcome
    from amp_suite.records import CellResult

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
# The names only the built-in reporters write (fnmatch patterns): another reporter that changes one has it put back.
BUILT_IN_REPORT_FILES = (*_STARTS, CHARTS_INDEX, CHART_PATTERN)
# The key that marks a report-digests.json as amp-suite's record.
_DIGESTS_MARK = "amp_suite_report_digests"
# Largest report file read to check its digest (a chart is well below it; a bigger file is not one of ours).
_DIGESTED_BYTES = 256 << 20


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_report_file(name: str) -> bool:
    return name in _STARTS or name == CHARTS_INDEX or fnmatch.fnmatchcase(name, CHART_PATTERN)


def _recorded_digests(directory: Path) -> dict[str, str] | None:
    """``report-digests.json``'s name -> SHA-256; ``{}`` when there is none, None when the file there is not
    amp-suite's record."""
    data = read_private_file(directory, REPORT_DIGESTS_FILE, 1 << 20)
    if data is None:
        return {}
    try:
        record = json.loads(data)
    except ValueError:
        return None
    files = record.get("files") if isinstance(record, dict) and record.get(_DIGESTS_MARK) == 1 else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return files


def write_recorded_report(host: PluginHost, results: list[CellResult], directory: Path,
                          environment: dict[str, Any]) -> ReportOutcome:
    """Write ``results``' report into ``directory`` through ``host``'s reporters, keeping the record of digests
    true at every moment: the earlier record stays, and after each reporter the digests of the files it wrote
    replace their old ones (a report stopped half-way leaves each file recorded as it is, so an edit made after
    it is still seen).  At the end, a file the earlier report wrote and this one did not (its reporter turned
    off, or failing) is stale: it is removed, and said so, when its bytes are still those recorded.  Cells a
    later cell of their row superseded with other settings are left out, and named
    (:mod:`amp_suite.report.superseded`).
    No reporter may change the folder's ``results.jsonl`` or ``environment.json``.
    ``amp-suite run`` and ``amp-suite report`` both write their report through here."""
    directory = Path(directory)
    environment = with_unfinished(results, environment)  # a run killed part-way says so
    results, environment = without_superseded(results, environment)  # no row pools cells of two configurations
    earlier = dict(_recorded_digests(directory) or {})  # a record not amp-suite's was refused, or --force given
    current = dict(earlier)

    def record_reporter(paths: list[Path]) -> None:
        current.update(_report_digests(directory, paths))
        _write_record(directory, current)

    # no reporter may change the sweep's record of its cells (each is put back, and the reporter named)
    outcome = host.write_report(results, directory, environment, stored=(RESULTS_FILE, ENVIRONMENT_FILE),
                                built_in=BUILT_IN_REPORT_FILES, on_written=record_reporter)
    rewritten = {Path(path).name for path in outcome.written if Path(path).parent == directory}
    stale = sorted(name for name, value in earlier.items()
                   if name not in rewritten and _digest_of(directory, name) == value)
    for name in list(stale):
        path = directory / name
        try:
            if path.is_file() and not path.is_symlink():
                path.unlink(missing_ok=True)
        except OSError as exc:
            stale.remove(name)
            print(f"amp-suite: warning: cannot remove the stale {name}: {exc.strerror or exc}", file=sys.stderr)
    if stale:
        print(f"amp-suite: removed {', '.join(stale)} of the report before, which no reporter wrote this time "
              "(stale beside the new report)", file=sys.stderr)
    record_report_digests(directory, outcome.written)
    return outcome


def _report_digests(directory: Path, written: Iterable[Path]) -> dict[str, str]:
    """Name -> SHA-256 of each built-in report file among ``written`` (paths in ``directory``)."""
    digests: dict[str, str] = {}
    for path in written:
        path = Path(path)
        if path.parent == directory and _is_report_file(path.name):
            found = _digest_of(directory, path.name)
            if found is not None:
                digests[path.name] = found
    return digests


def _write_record(directory: Path, digests: dict[str, str]) -> None:
    """``report-digests.json`` holding ``digests``; one that cannot be written is a warning (the files are then
    judged by how they begin)."""
    text = json.dumps({_DIGESTS_MARK: 1, "files": dict(sorted(digests.items()))}, indent=1) + "\n"
    try:
        write_file_atomically(directory / REPORT_DIGESTS_FILE, text)
    except OSError as exc:
        print(f"amp-suite: warning: cannot record the report's digests in {str(directory)[:300]!r}: "
              f"{exc.strerror or exc}", file=sys.stderr)


def record_report_digests(directory: Path, written: Iterable[Path]) -> None:
    """Record the digest of each built-in report file among ``written`` (what a report just wrote in
    ``directory``), and of no other."""
    directory = Path(directory)
    _write_record(directory, _report_digests(directory, written))


def _digest_of(directory: Path, name: str) -> str | None:
    data = read_private_file(directory, name, _DIGESTED_BYTES)
    return None if data is None else _digest(data)


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


def foreign_report_files(directory: Path) -> list[tuple[Path, str]]:
    """The built-in report files in ``directory`` that amp-suite did not write, or that changed since it did
    (regular files only), each with what is wrong with it."""
    digests = _recorded_digests(directory)
    foreign: list[tuple[Path, str]] = []
    if digests is None:
        foreign.append((directory / REPORT_DIGESTS_FILE, _NOT_OURS))
        digests = {}
    changed = {name for name, value in digests.items() if _digest_of(directory, name) not in (None, value)}
    foreign.extend((directory / name, _CHANGED) for name in sorted(changed))
    for name, start in _STARTS.items():
        head = read_private_file(directory, name, _HEAD_BYTES)
        if name not in digests and head is not None and start.match(head) is None:
            foreign.append((directory / name, _NOT_OURS))
    charts = _indexed_charts(directory)
    if charts is None:
        if CHARTS_INDEX not in digests:
            foreign.append((directory / CHARTS_INDEX, _NOT_OURS))
        charts = set()
    for chart in sorted(directory.glob(CHART_PATTERN)):
        if chart.name not in charts and chart.name not in digests \
                and read_private_file(directory, chart.name, 1) is not None:
            foreign.append((chart, _NOT_OURS))
    return foreign


_NOT_OURS = "exists and is not a file amp-suite wrote"
_CHANGED = "was changed after amp-suite wrote it"


def check_report_files_replaceable(directory: Path, *, force: bool, other_way: str = "choose another --out") -> None:
    """Raise a one-line :class:`NotOursError` when ``directory`` holds a report file amp-suite did not write,
    unless ``force``; ``other_way`` is the command's way out besides ``--force``."""
    if force:
        return
    foreign = foreign_report_files(directory)
    if foreign:
        (first, why), rest = foreign[0], foreign[1:]
        more = (f" (and {', '.join(path.name if other == why else f'{path.name}, which {other}' for path, other in rest)}"
                " too)") if rest else ""
        raise NotOursError(f"{str(first)[:300]!r} {why}{more}; left alone "
                           f"(pass {FORCE_FLAG} to replace it, or {other_way})")
