"""The results store: one JSON line per finished cell, flushed at once.

``results.jsonl`` only ever grows.  A cell run again (``--resume`` after a
failure) adds a newer line; readers take the latest line per cell key.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from amp_suite.records import CellResult, cell_from_dict

RESULTS_FILE = "results.jsonl"


def to_plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars become numbers, non-finite floats stay readable."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return to_plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def plain_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run configuration as stored, without settings that do not change figures."""
    out = to_plain(config)
    out.pop("timeout_s", None)
    return out


class ResultStore:
    """Appends and reads ``DIR/results.jsonl``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_FILE

    def append(self, result: CellResult) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        line = json.dumps(to_plain(asdict(result)), sort_keys=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def load(self) -> list[CellResult]:
        """Every stored line in order; a torn last line (killed writer) is skipped."""
        if not self.path.exists():
            return []
        results = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                results.append(cell_from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError):
                continue
        return results

    def latest_by_key(self) -> dict[str, CellResult]:
        latest: dict[str, CellResult] = {}
        for result in self.load():
            latest[result.key] = result
        return latest
