"""Writes ``summary.json``: one record per workload x framework x precision, normalized to fp32.

The records are :func:`amp_suite.plugin_api.summary_frame`'s rows (speed-up,
memory ratio and accuracy difference against the same framework's fp32),
with NaN written as ``null`` so any JSON reader takes the file, beside the
environment the sweep ran in.  The file is written through
:func:`amp_suite.plugin_api.write_files_atomically`: a full disk leaves the
previous file whole.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from amp_suite.plugin_api import CellResult, hookimpl, summary_frame, to_plain, write_files_atomically

FILE_NAME = "summary.json"


def _clean(value: Any) -> Any:
    """NaN and infinities -> None (JSON has no such numbers); numpy scalars -> Python ones."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@hookimpl
def write_report(results: list[CellResult], out_dir: Path, environment: dict[str, Any]) -> list[Path]:
    records = [{key: _clean(value) for key, value in row.items()}
               for row in summary_frame(results).to_dict(orient="records")]
    document = {"environment": to_plain(environment), "summary": records}
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_files_atomically({out_dir / FILE_NAME: json.dumps(document, indent=2, allow_nan=False)})
