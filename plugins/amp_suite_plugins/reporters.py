"""The built-in reporter: ``report.md``, ``results.csv`` and ``results.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amp_suite import hookimpl
from amp_suite.records import CellResult
from amp_suite.report import render_markdown, results_frame
from amp_suite.results import to_plain


@hookimpl
def write_report(results: list[CellResult], out_dir: Path, environment: dict[str, Any]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.md"
    report.write_text(render_markdown(results, environment), encoding="utf-8")
    csv_path = out_dir / "results.csv"
    results_frame(results).to_csv(csv_path, index=False)
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(
        {"environment": to_plain(environment), "results": [to_plain(r.__dict__) for r in results]},
        indent=2, sort_keys=True,
    ), encoding="utf-8")
    return [report, csv_path, json_path]
