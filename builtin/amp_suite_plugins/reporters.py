"""The built-in reporter: ``report.md``, ``results.csv`` and ``results.json``.

The three files are rendered in memory first and then written together
(temporary files renamed into place), so a full disk or a kill leaves the
previous report whole instead of a truncated one beside stale tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amp_suite import hookimpl
from amp_suite.records import CellResult, to_plain
from amp_suite.safe_files import write_files_atomically


@hookimpl
def write_report(results: list[CellResult], out_dir: Path, environment: dict[str, Any],
                 sections: list[tuple[str, str]] | tuple[()] = ()) -> list[Path]:
    # imported here: every worker loads this plugin, and pandas alone is half a worker's start
    from amp_suite.report.normalize import render_markdown, results_frame

    out_dir.mkdir(parents=True, exist_ok=True)
    contents = {
        out_dir / "report.md": render_markdown(results, environment, sections),
        out_dir / "results.csv": results_frame(results, environment).to_csv(index=False),
        out_dir / "results.json": json.dumps(
            {"environment": to_plain(environment), "results": [to_plain(r.__dict__) for r in results]},
            indent=2, sort_keys=True,
        ),
    }
    return write_files_atomically(contents)
