"""The results store: one JSON line per finished cell, flushed at once.

``results.jsonl`` only ever grows.  A cell run again (``--resume`` after a
failure) adds a newer line; readers take the latest line per cell key.

What the store guarantees:

* an append starts on a fresh line, even after a torn last line (a writer
  killed mid-line, a full disk), and a failed append leaves the file as it was;
* reading never fails on a line: torn lines, lines that are not JSON objects
  and lines that do not describe a cell are skipped and reported, line by line;
* no stored text field grows without bound: an error message is cut to
  :data:`ERROR_CHARS` characters and a long text figure (a failed worker's log
  tail, a traceback) to its last :data:`TEXT_FIGURE_CHARS` characters.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from amp_suite.records import CellResult, cell_from_dict, to_plain
from amp_suite.safe_files import append_line, read_regular
from amp_suite.stored_values import metric_problem, name_problem, number_problem, section_problem

RESULTS_FILE = "results.jsonl"
# Longest error message kept in a result.
ERROR_CHARS = 2000
# Longest text figure kept in a result (the full log stays in OUT/logs/).
TEXT_FIGURE_CHARS = 8192

# Fields a stored line must carry, with their JSON types.
_REQUIRED_TEXT = ("key", "framework", "workload", "precision", "status")
_OPTIONAL_TYPES: dict[str, type | tuple[type, ...]] = {
    "error": str, "config": dict, "applied": dict, "device": dict, "metrics": dict,
    "environment": dict, "started_at": str, "wall_time_s": (int, float),
    "fingerprint": str, "definition": dict,
}




def cut_text(text: str, limit: int, *, keep: str = "start") -> str:
    """``text`` cut to about ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "end":
        return f"[... {cut} characters cut ...]" + text[-limit:]
    return text[:limit] + f" [... {cut} characters cut]"


def bounded(result: CellResult) -> CellResult:
    """``result`` with its error message and long text figures cut to the store's limits."""
    metrics = {key: cut_text(value, TEXT_FIGURE_CHARS, keep="end") if isinstance(value, str) else value
               for key, value in (result.metrics or {}).items()}
    return replace(result, error=cut_text(result.error or "", ERROR_CHARS), metrics=metrics)


@dataclass(frozen=True)
class SkippedLine:
    """A line of ``results.jsonl`` that does not hold a cell result."""

    number: int
    reason: str


@dataclass(frozen=True)
class DroppedField:
    """A field of a stored result that could not be used (a wrong type, an impossible or oversized value)."""

    number: int
    field: str
    reason: str

    def describe(self) -> str:
        return f"line {self.number}, field {self.field}: {self.reason}"


@dataclass(frozen=True)
class StoreContents:
    """What a read of ``results.jsonl`` found: results in file order, lines skipped, and fields dropped."""

    results: list[CellResult]
    skipped: list[SkippedLine]
    dropped: list[DroppedField] = field(default_factory=list)

    def describe_dropped(self, limit: int = 3) -> str:
        """One line naming the dropped fields, e.g. ``line 2, field metrics.throughput: impossible value -5.0``."""
        shown = "; ".join(d.describe() for d in self.dropped[:limit])
        more = len(self.dropped) - limit
        return shown + (f"; and {more} more" if more > 0 else "")

    def describe_skipped(self, limit: int = 3) -> str:
        """One line naming the skipped lines, e.g. ``line 4 (torn or not JSON)``."""
        shown = ", ".join(f"line {s.number} ({s.reason})" for s in self.skipped[:limit])
        more = len(self.skipped) - limit
        return shown + (f" and {more} more" if more > 0 else "")


def _problem(data: Any) -> str | None:
    """Why a decoded line is not a cell result, or None when it is one."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__ if data is not None else 'null'}, not an object"
    for name in _REQUIRED_TEXT:
        if not isinstance(data.get(name), str):
            return f"no text field {name!r}"
    if not isinstance(data.get("repeat"), int) or isinstance(data.get("repeat"), bool):
        return "no integer field 'repeat'"
    for name, kind in _OPTIONAL_TYPES.items():
        if name in data and not isinstance(data[name], kind):
            return f"field {name!r} has the wrong type"
    return name_problem(data) or number_problem(data)  # e.g. "metrics.peak_rss_bytes is out of range"


def _usable_fields(number: int, result: CellResult, dropped: list[DroppedField]) -> CellResult:
    """``result`` without the values a report cannot use (metrics, config, device, applied, environment), each
    added to ``dropped``; its error text and start time bounded."""
    kept: dict[str, Any] = {}
    for section in ("metrics", "config", "device", "applied", "environment"):
        values = dict(getattr(result, section) or {})
        for name, value in list(values.items()):
            problem = metric_problem(name, value) if section == "metrics" else section_problem(section, name, value)
            if problem is not None:
                dropped.append(DroppedField(number, f"{section}.{name}", problem))
                del values[name]
        kept[section] = values
    return replace(result, **kept, error=cut_text(result.error or "", ERROR_CHARS),
                   started_at=cut_text(result.started_at or "", 100))


def parse_lines(data: bytes) -> StoreContents:
    """Results and skipped lines of a ``results.jsonl`` file's bytes."""
    results: list[CellResult] = []
    skipped: list[SkippedLine] = []
    dropped: list[DroppedField] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            decoded = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            skipped.append(SkippedLine(number, "torn or not JSON"))
            continue
        problem = _problem(decoded)
        if problem:
            skipped.append(SkippedLine(number, problem))
            continue
        results.append(_usable_fields(number, cell_from_dict(decoded), dropped))
    return StoreContents(results, skipped, dropped)


class ResultStore:
    """Appends and reads ``DIR/results.jsonl``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_FILE

    def append(self, result: CellResult) -> None:
        """Store ``result`` on a line of its own; ``OSError`` leaves the file as it was."""
        self.directory.mkdir(parents=True, exist_ok=True)
        line = json.dumps(to_plain(asdict(bounded(result))), sort_keys=True)
        append_line(self.path, line)

    def read(self) -> StoreContents:
        """Every stored result in file order, and the lines that hold none."""
        if not os.path.lexists(self.path):
            return StoreContents([], [])
        return parse_lines(read_regular(self.path))  # a link or a FIFO is refused, never waited on

    def load(self) -> list[CellResult]:
        """Every stored result in order; lines that hold none are skipped."""
        return self.read().results

    def latest_by_key(self) -> dict[str, CellResult]:
        latest: dict[str, CellResult] = {}
        for result in self.load():
            latest[result.key] = result
        return latest
