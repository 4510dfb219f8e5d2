"""Runs a sweep: every cell in its own fresh worker process, with a timeout.

Each worker is a new interpreter (``python -m amp_suite.worker``), never a
fork, started in its own session so that a timeout or Ctrl-C can end it and
everything it started.  Only JSON crosses the process boundary.  A worker that
crashes, hangs or is killed becomes a result row with a status; the sweep goes
on, and each finished cell is appended to ``results.jsonl`` at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from amp_suite import worker
from amp_suite.records import CellResult, RunSpec, Workload, cell_for_run, cell_from_dict
from amp_suite.results import ResultStore, plain_config

# Lines of a failed worker's log kept in its result.
LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class Cell:
    """A cell to run: the run and the workload it names."""

    run: RunSpec
    workload: Workload


ProgressCallback = Callable[[int, int, Cell, "CellResult | None"], None]


def _oom_kills() -> int | None:
    """The kernel's count of OOM kills (``/proc/vmstat``), if readable."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def run_in_worker(cell: Cell, *, log_path: Path, env: dict[str, str] | None = None) -> CellResult:
    """Run ``cell`` in a fresh interpreter; every outcome becomes a result."""
    run = cell.run
    started = time.perf_counter()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="amp-suite-cell-") as tmp:
        request = Path(tmp) / "request.json"
        response = Path(tmp) / "result.json"
        request.write_text(json.dumps({"run": asdict(run), "workload": asdict(cell.workload)}))
        child_env = {**os.environ, **(env or {})}
        oom_before = _oom_kills()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "amp_suite.worker", str(request), str(response)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=child_env, start_new_session=True,
            )
            try:
                proc.wait(timeout=run.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return _failure(cell, "timeout", f"no result after {run.timeout_s:g} s; worker killed",
                                started, log_path)
            except BaseException:  # Ctrl-C: end the worker, keep what finished
                _kill_group(proc)
                raise
        if response.exists():
            return cell_from_dict(json.loads(response.read_text()))
        code = proc.returncode
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            oom_after = _oom_kills()
            if sig == "SIGKILL" and oom_before is not None and oom_after is not None and oom_after > oom_before:
                return _failure(cell, "oom", "worker killed by the kernel's OOM killer", started, log_path)
            return _failure(cell, "failed", f"worker killed by {sig}", started, log_path)
        return _failure(cell, "failed", f"worker exited with code {code} and no result", started, log_path)


def _failure(cell: Cell, status: str, error: str, started: float, log_path: Path) -> CellResult:
    return cell_for_run(cell.run, status, error=error,
                        metrics={"log_tail": _log_tail(log_path), "log": str(log_path)},
                        wall_time_s=time.perf_counter() - started)


def iter_sweep(
    cells: Iterable[Cell],
    store: ResultStore,
    *,
    inline: bool = False,
    resume: bool = False,
    env: dict[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> Iterator[CellResult]:
    """Run every cell in order, appending each result to ``store`` and yielding it.

    With ``resume``, cells whose latest stored result is ``ok`` for the same
    configuration are skipped and their stored result is yielded.
    """
    cells = list(cells)
    done = store.latest_by_key() if resume else {}
    for index, cell in enumerate(cells, start=1):
        previous = done.get(cell.run.key)
        if (previous is not None and previous.status == "ok"
                and plain_config(previous.config) == plain_config(asdict(cell.run))):
            if progress:
                progress(index, len(cells), cell, previous)
            yield previous
            continue
        if progress:
            progress(index, len(cells), cell, None)
        if inline:
            result = worker.execute(cell.run, cell.workload)
        else:
            log_path = store.directory / "logs" / (cell.run.key.replace("/", "__") + ".log")
            result = run_in_worker(cell, log_path=log_path, env=env)
        store.append(result)
        if progress:
            progress(index, len(cells), cell, result)
        yield result


def run_sweep(cells: Iterable[Cell], store: ResultStore, **options: Any) -> list[CellResult]:
    """Every cell's result, in order (see :func:`iter_sweep` for the options)."""
    return list(iter_sweep(cells, store, **options))
