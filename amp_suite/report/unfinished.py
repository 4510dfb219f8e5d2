"""A run that ended without recording a stop: the cells it planned that have no result.

A sweep stopped by a signal it can catch (Ctrl-C, SIGTERM) or by a failed
store records what did not run (``environment["incomplete"]``).  One killed
outright (SIGKILL, the machine going down) records nothing, and its report
would read as a finished sweep: "fp32 is the only precision that ran".  The
sweep records its planned cells when it starts (``planned_cells``); a report
of the folder counts those without a result as not run, and says the run
ended without recording why.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from amp_suite.records import CellResult

REASON = ("the run ended before every planned cell had a readable result, and recorded no stop (killed, its machine "
          "stopped, or a stored line torn)")


def _planned(environment: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    listed = environment.get("planned_cells")
    if not isinstance(listed, list):
        return []
    return [(item[0], item[1], item[2], item[3]) for item in listed
            if isinstance(item, list) and len(item) == 4 and all(isinstance(part, str) for part in item)]


def with_unfinished(results: Iterable[CellResult], environment: dict[str, Any]) -> dict[str, Any]:
    """``environment``, with ``incomplete`` filled in (a copy) where its run planned cells that have no result
    among ``results`` and recorded no stop of its own."""
    if isinstance(environment.get("incomplete"), dict):
        return environment
    planned = _planned(environment)
    present = {result.key for result in results}
    missing = [cell for cell in planned if cell[0] not in present]
    if not missing:
        return environment
    return {**environment, "incomplete": {"reason": REASON, "planned": len(planned),
                                          "not_run": [key for key, *_ in missing],
                                          "not_run_cells": [[label, workload, precision]
                                                            for _, label, workload, precision in missing]}}
