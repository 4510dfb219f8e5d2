"""Runs a sweep: every cell in its own fresh worker process, with a timeout.

Each worker is a new interpreter, never a fork, started under a supervisor
(:mod:`amp_suite.processes.tree`) that owns everything the worker starts,
detached children included: when the worker exits, times out, or the sweep
is stopped (Ctrl-C, SIGTERM, SIGHUP) or killed, the whole tree ends.  Only
JSON crosses the process boundary: the request goes to the worker's stdin
and the result comes back through a pipe, so no temporary file or directory
exists to be left behind.  The worker dies with the host (see
:mod:`amp_suite.cell.worker`).  Its import path is the host's minus the
current directory.  A worker that crashes, hangs or is killed becomes a result row
with a status; the sweep goes on, and each finished cell is appended to
``results.jsonl`` at once.  A worker's stdout and stderr go to the cell's log
(``OUT/logs/KEY.log``), where a failing cell's worker also writes its
traceback; a cell that is not ``ok`` carries the log's path and last lines
(``metrics["log"]``, ``metrics["log_tail"]``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from amp_suite import progress as progress_channel
from amp_suite.cell import worker
from amp_suite.errors import StorageError, one_line
from amp_suite.records import CellResult, RunSpec
from amp_suite.safe_files import open_for_writing
from amp_suite.sweep.planned_cell import Cell
from amp_suite.sweep.store import ResultStore
from amp_suite.sweep.worker_process import (
    LOG_TAIL_LINES,
    RESULT_BYTES,
    RESULT_DRAIN_S,
    gpu_numbering,
    interpreter_problem,
    one_gpu_visible,
    run_in_worker,
    signal_name,
    with_log,
    worker_path,
)

# The worker process is worker_process.py's, the cell it runs planned_cell.py's; the names stay importable here.
__all__ = [
    "LOG_TAIL_LINES", "RESULT_BYTES", "RESULT_DRAIN_S", "Cell", "ProgressCallback", "cell_log_path", "gpu_numbering",
    "interpreter_problem", "iter_sweep", "one_gpu_visible", "run_in_worker", "run_inline", "run_sweep",
    "signal_name", "store_result", "with_fingerprint", "with_log", "worker_path",
]

ProgressCallback = Callable[[int, int, Cell, "CellResult | None"], None]


def cell_log_path(directory: Path, run: RunSpec) -> Path:
    """Where the log of ``run``'s cell is written: ``DIRECTORY/logs/KEY.log`` (``/`` of the key as ``__``)."""
    return directory / "logs" / (run.key.replace("/", "__") + ".log")


def run_inline(cell: Cell, *, log_path: Path) -> CellResult:
    """Run ``cell`` in this process; a failure's traceback goes to the cell's log, as a worker's does.

    Raises :class:`StorageError` when the cell's log cannot be created.
    """
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = io.TextIOWrapper(open_for_writing(log_path), encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot write the log {str(log_path)!r}: {exc.strerror or one_line(exc)}") from None
    with log:
        result = worker.execute(cell.run, cell.workload, log=log)
    return with_log(result, log_path)


def iter_sweep(
    cells: Iterable[Cell],
    store: ResultStore,
    *,
    inline: bool = False,
    kept: Mapping[str, CellResult] | None = None,
    env: dict[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> Iterator[CellResult]:
    """Run every cell in order, appending each result to ``store`` and yielding it.

    ``kept``: the stored results ``--resume`` keeps, by cell key
    (:func:`amp_suite.sweep.fingerprint.kept_results`); those cells are not run, and their stored result
    is yielded.  A ``progress`` callback that has a ``step(done, total)``
    method also receives the running cell's step messages.  Raises
    :class:`StorageError` (and stops) when a result cannot be stored.
    """
    cells = list(cells)
    kept = kept or {}
    kept_in_order = [kept.get(cell.run.key) for cell in cells]
    keeping = getattr(progress, "keeping", None)
    if keeping is not None:  # the ETA counts only the cells that run
        keeping({index for index, previous in enumerate(kept_in_order, start=1) if previous is not None})
    for index, (cell, previous) in enumerate(zip(cells, kept_in_order, strict=True), start=1):
        if previous is not None:
            if progress:
                progress(index, len(cells), cell, previous)
            yield previous
            continue
        if progress:
            progress(index, len(cells), cell, None)
        on_step = getattr(progress, "step", None)
        log_path = cell_log_path(store.directory, cell.run)
        if inline:
            if on_step is not None:
                with progress_channel.inline_sink(on_step):
                    result = run_inline(cell, log_path=log_path)
            else:
                result = run_inline(cell, log_path=log_path)
        else:
            result = run_in_worker(cell, log_path=log_path, env=env, on_step=on_step)
        result = store_result(store, cell, result)
        if progress:
            progress(index, len(cells), cell, result)
        yield result


def with_fingerprint(cell: Cell, result: CellResult) -> CellResult:
    """``result`` carrying its cell's definition and fingerprint."""
    from amp_suite.records.definition import fingerprint

    definition = cell.definition
    return replace(result, definition=definition, fingerprint=fingerprint(definition))


def store_result(store: ResultStore, cell: Cell, result: CellResult) -> CellResult:
    """Append ``result`` (with its cell's fingerprint) to ``store`` and return what was stored;
    :class:`StorageError` (the sweep stops) when it cannot be stored."""
    result = with_fingerprint(cell, result)
    try:
        store.append(result)
    except OSError as exc:
        raise StorageError(
            f"cannot append to {str(store.path)!r}: {exc.strerror or one_line(exc)}; "
            f"the result of {cell.run.key} ({result.status}) is not stored"
        ) from None
    return result


def run_sweep(cells: Iterable[Cell], store: ResultStore, **options: Any) -> list[CellResult]:
    """Every cell's result, in order (see :func:`iter_sweep` for the options)."""
    return list(iter_sweep(cells, store, **options))
