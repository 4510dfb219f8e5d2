"""Cells a later run of the same row replaced with other settings: left out of the report, and named.

A folder's ``results.jsonl`` keeps one result per cell key, the latest.  A
row of the report (workload, framework, precision, mode, batch size, device
count and kind, pool) pools its cells' repeats, and after
``run --precisions fp32 --steps 6`` into a folder of 3-step cells its
repeat 0 holds the 6-step run and its repeat 1 still the 3-step one: their
mean is a figure no configuration produced.  Within a row, only the cells
that ran the settings of its latest cell (the seed aside where seeds are the
sweep's axis) are reported; the others are superseded, and the report's
header names them.  Results stored before definitions are not judged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from amp_suite.records import CellResult
from amp_suite.report.settings_match import differences, settings_key

# Superseded cells a note names before "and N more".
NAMED = 6


def _row(result: CellResult) -> tuple:
    config = result.config or {}
    return (result.workload, result.framework, result.precision, result.mode or "", config.get("batch_size"),
            config.get("devices", 1), (result.device or {}).get("kind", ""), config.get("pool") or "")


def current_results(results: Iterable[CellResult]) -> tuple[list[CellResult], list[str]]:
    """``results`` without the cells a later cell of their row superseded with other settings, in their order;
    and a line per superseded cell (``torch/mnist_cnn/fp32/r1 (steps 6 -> 3)``: the latest's value first)."""
    results = list(results)
    keys = [settings_key(result) for result in results]
    latest: dict[tuple, tuple[str, int, str]] = {}
    for index, (result, key) in enumerate(zip(results, keys, strict=True)):
        if not key:
            continue
        order = (result.started_at or "", index)
        row = _row(result)
        if row not in latest or order >= latest[row][:2]:
            latest[row] = (*order, key)
    kept: list[CellResult] = []
    superseded: list[str] = []
    for result, key in zip(results, keys, strict=True):
        newest = latest.get(_row(result))
        if key and newest is not None and key != newest[2]:
            superseded.append(f"{result.key} ({differences(results[newest[1]], result)})")
        else:
            kept.append(result)
    return kept, superseded


def superseded_lines(environment: dict[str, Any]) -> list[str]:
    """The report header's note on the superseded cells (``environment["superseded"]``, given by the report's
    writer and never stored)."""
    lines = environment.get("superseded")
    named = [str(line) for line in lines if isinstance(line, str)] if isinstance(lines, list) else []
    if not named:
        return []
    more = f" and {len(named) - NAMED} more" if len(named) > NAMED else ""
    return [f"> **Superseded:** {len(named)} cell{'' if len(named) == 1 else 's'} of `results.jsonl` ran with other "
            f"settings than the latest run of {'its' if len(named) == 1 else 'their'} row and "
            f"{'is' if len(named) == 1 else 'are'} left out, so no figure pools two configurations (the latest's "
            f"value -> the left-out cell's): "
            f"{'; '.join(named[:NAMED])}{more}. Run them again alike (the same command with `--resume`) to have "
            "them back.", ""]


def without_superseded(results: list[CellResult],
                       environment: dict[str, Any]) -> tuple[list[CellResult], dict[str, Any]]:
    """The results a report shows, and its environment with the note of what it left out (a copy, only when it
    left something out)."""
    kept, superseded = current_results(results)
    return kept, ({**environment, "superseded": superseded} if superseded else environment)
