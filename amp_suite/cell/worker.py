"""Runs one cell: in a fresh worker process (``python -m amp_suite.cell.worker``) or inline.

The worker builds its own plugin host, so a framework is imported only here,
after the framework's environment variables are set.  Whatever happens, the
worker returns a :class:`~amp_suite.records.CellResult` with a status.

What the cell does is :mod:`amp_suite.cell.protocol` (the hooks in their
documented order); this module starts it, turns an exception into the cell's
status (:mod:`amp_suite.cell.failures`) and hands the result back.  The names
of the cell's other rooms stay importable from here, as they were.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from amp_suite.cell.extension import EXTENSION_MAX_S, TIMING_KEYS, extend_timing, short_timing
from amp_suite.cell.failures import (
    OOM_EXCEPTION_NAMES,
    OOM_MESSAGES,
    TRACEBACK_CHARS,
    classify_exception,
    write_failure,
)
from amp_suite.cell.figures import (
    ENERGY_KEYS,
    ENERGY_MIN_MEAN_WINDOW_S,
    MEMORY_KEYS,
    device_index,
    energy_figures,
    epoch_extra_metrics,
    memory_without_inputs,
    staged_bytes,
)
from amp_suite.cell.protocol import run_cell
from amp_suite.cell.validation import TOKEN_KEYS, VALIDATION_KEYS, TargetTracker, token_figures, validate
from amp_suite.errors import one_line
from amp_suite.host_watch import die_with_host_from_env
from amp_suite.plugins.host import PluginHost
from amp_suite.records import CellResult, RunSpec, Workload, cell_for_run, run_from_dict, to_plain, workload_from_dict

__all__ = [
    "ENERGY_KEYS", "ENERGY_MIN_MEAN_WINDOW_S", "EXTENSION_MAX_S", "MEMORY_KEYS", "OOM_EXCEPTION_NAMES", "OOM_MESSAGES",
    "TIMING_KEYS", "TOKEN_KEYS", "TRACEBACK_CHARS", "VALIDATION_KEYS", "TargetTracker", "classify_exception",
    "device_index", "energy_figures", "epoch_extra_metrics", "execute", "extend_timing", "main",
    "memory_without_inputs", "short_timing", "staged_bytes", "token_figures", "validate", "write_failure",
]


def execute(run: RunSpec, workload: Workload, host: PluginHost | None = None, *,
            log: TextIO | None = None) -> CellResult:
    """Run one cell in this process and return its result (never raises).

    A cell that raises keeps its traceback, innermost frames last, in
    ``metrics["traceback"]`` (the last :data:`TRACEBACK_CHARS` characters);
    with ``log``, the whole traceback is also written there (the worker
    passes its stderr, which the runner sends to the cell's log).
    """
    started = time.perf_counter()
    result = cell_for_run(run, "failed",
                          started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    try:
        if host is None:
            host = PluginHost(extra_modules=run.plugin_modules, framework=run.framework)
        run_cell(run, workload, host, result)  # the hooks in their documented order, runtime_versions last
        result.status = "ok"
    except BaseException as exc:  # every outcome becomes a row
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.status = classify_exception(exc)
        result.error = one_line(exc)
        trace = "".join(traceback.format_exception(exc))
        result.metrics["traceback"] = trace[-TRACEBACK_CHARS:]
        if log is not None:
            write_failure(log, result, trace)
    # Which interpreter ran the cell: the host's, or its environment's (amp_suite.envs).
    result.environment.update({"interpreter": sys.executable, "prefix": sys.prefix,
                               "environment": run.environment})
    result.wall_time_s = time.perf_counter() - started
    return result


def _result_line(result: CellResult) -> bytes:
    return (json.dumps(to_plain(asdict(result))) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    """The worker process.

    ``--result-fd N`` (how the runner starts it): the request is read from
    stdin and the result written to file descriptor ``N``.  ``REQUEST.json
    RESULT.json``: the same with files, for running one cell by hand.  A
    failure's whole traceback goes to stderr, which the runner makes the
    cell's log.
    """
    args = sys.argv[1:] if argv is None else argv
    die_with_host_from_env()
    result_fd = result_file = None
    if args[:1] == ["--result-fd"]:
        result_fd = int(args[1])
        os.set_inheritable(result_fd, False)  # processes the framework starts must not hold it open
        request = json.loads(sys.stdin.buffer.read())
    elif args[:1] == ["--result-file"]:  # a torchrun worker: the request is beside the result file
        result_file = args[1]
        from amp_suite.safe_files import read_regular

        request = json.loads(read_regular(result_file + ".request"))
    else:
        request = json.loads(Path(args[0]).read_text())
        result_file = args[1]
    run = run_from_dict(request["run"])
    workload = workload_from_dict(request["workload"])
    result = execute(run, workload, log=sys.stderr)  # stderr is the cell's log
    from amp_suite.launchers import this_process

    if not this_process(run).writes_result:
        # A failing rank must fail: torchrun then ends the others instead of leaving them waiting.
        return 0 if result.status == "ok" else 1
    if result_fd is not None:
        with os.fdopen(result_fd, "wb") as out:
            out.write(_result_line(result))
        return 0
    from amp_suite.safe_files import write_file_atomically

    assert result_file is not None  # no --result-fd: a result file was named
    write_file_atomically(Path(result_file), _result_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
