"""Reading what an acceptance command produced: the doctor's table, a sweep's rows, the calibration's peaks.

Pure parsers of text and files; the judges (:mod:`.acceptance_checks`) and the
report (:mod:`.acceptance_report`) share them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DoctorRow:
    scope: str
    check: str
    status: str
    detail: str


def parse_doctor_table(text: str) -> list[DoctorRow]:
    """The rows of the doctor's plain-text table (columns found from its dashed rule)."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines)
               if line.strip() and set(line.replace(" ", "")) == {"-"} and len(line.split()) == 4), None)
    if at is None:
        return []
    rule = lines[at]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    rows = []
    for line in lines[at + 1:]:
        if not line.strip():
            break
        cells = [line[a:b if i < 3 else None].strip() for i, (a, b) in enumerate(spans)]
        if not cells[0] or cells[2] not in ("passed", "failed", "skipped"):
            break
        rows.append(DoctorRow(*cells))
    return rows


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``results.jsonl``, the latest per cell key; lines that hold no result are left out."""
    latest: dict[str, dict[str, Any]] = {}
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "framework" in row and "status" in row:
            key = row.get("key") or "/".join(str(row.get(k)) for k in ("framework", "workload", "precision"))
            latest.pop(key, None)
            latest[key] = row
    return list(latest.values())


@dataclass(frozen=True)
class CalibrationFigures:
    """One framework's block of ``amp-suite calibrate`` output: peak TFLOP/s per dtype."""

    framework: str
    kind: str
    peaks: dict[str, float]


_CAL_HEAD = re.compile(r"^(\S+) .*\bon (cpu|gpu)\b.*:\s*$")
_CAL_ROW = re.compile(r"^\s+(fp32|tf32|fp16|bf16) matmul (\S+)(?: TFLOP/s)? conv (\S+)")


def parse_calibration(text: str) -> dict[str, CalibrationFigures]:
    """Each framework's peaks from ``amp-suite calibrate``'s output (the larger of matmul and conv)."""
    found: dict[str, CalibrationFigures] = {}
    current: CalibrationFigures | None = None
    for line in text.splitlines():
        if (head := _CAL_HEAD.match(line)) and not line.startswith(" "):
            current = CalibrationFigures(head.group(1), head.group(2), {})
            found[current.framework] = current
        elif current is not None and (row := _CAL_ROW.match(line)):
            values = [v for v in (_float(text) for text in row.group(2, 3)) if v]
            if values:
                current.peaks[row.group(1)] = max(values)
    return found


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def find_row(rows: list[dict[str, Any]], framework: str, workload: str, precision: str,
             devices: int = 1) -> dict[str, Any] | None:
    """The latest row of one cell (framework, workload, precision, device count), or None."""
    for row in reversed(rows):
        if (row.get("framework"), row.get("workload"), row.get("precision")) == (framework, workload, precision) \
                and (row.get("config") or {}).get("devices", 1) == devices:
            return row
    return None


def finite_number(value: Any) -> float | None:
    """A stored figure as a float, or None when it is no finite number (a bool is none)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
