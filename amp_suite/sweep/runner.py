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
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from amp_suite import progress as progress_channel
from amp_suite.cell import worker
from amp_suite.errors import StorageError, one_line
from amp_suite.host_watch import HOST_PID_ENV
from amp_suite.launchers import launcher_for
from amp_suite.launchers.single import OWN_PATH, import_root, worker_import_path
from amp_suite.processes import tree as process_tree
from amp_suite.records import CellResult, RunSpec, Workload, cell_for_run
from amp_suite.safe_files import create_new, open_for_writing, open_regular, read_regular
from amp_suite.sweep.store import TEXT_FIGURE_CHARS, ResultStore, parse_lines

# Lines of a failed worker's log kept in its result (at most TEXT_FIGURE_CHARS characters).
LOG_TAIL_LINES = 25
# Largest result a worker may send back; more is a failed cell.
RESULT_BYTES = 64 * 2**20
# Seconds to wait for the result pipe to close after the worker exited.
RESULT_DRAIN_S = 10.0


@dataclass(frozen=True)
class Cell:
    """A cell to run: the run and the workload it names.

    ``unavailable`` says why the cell cannot start (its environment is not
    built): the runner then stores it ``unavailable`` with that reason and
    starts no worker.  ``environment`` is the environment part of the cell's
    definition (:func:`amp_suite.sweep.fingerprint.environment_record`; empty:
    the environment's name alone).
    """

    run: RunSpec
    workload: Workload
    unavailable: str = ""
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def definition(self) -> dict[str, Any]:
        """Everything that determines the cell's figures (:func:`amp_suite.sweep.fingerprint.cell_definition`)."""
        from amp_suite.sweep.fingerprint import cell_definition

        return cell_definition(self.run, self.workload, self.environment or None)


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


def _log_tail(path: Path) -> str:
    """The last lines of a log, read from its last :data:`TEXT_FIGURE_CHARS` bytes only."""
    try:
        with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - TEXT_FIGURE_CHARS))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = tail.splitlines()
    if size > TEXT_FIGURE_CHARS and lines:
        lines[0] = "[...] " + lines[0]
    return "\n".join(lines[-LOG_TAIL_LINES:])




def worker_path(run: RunSpec) -> list[str]:
    """``run``'s worker import path: the host's (:func:`worker_import_path`), or in an environment its own.

    An environment's worker keeps its interpreter's path (its site-packages and
    the amp-suite installed there), less the current directory; plugin modules
    given with ``-p`` are found where the host found them, last.
    """
    if not run.python:
        return worker_import_path(run.plugin_modules)
    roots = [root for root in (import_root(name) for name in run.plugin_modules)
             if root and not _installed_here(root)]  # never the host's site-packages
    return [OWN_PATH, *dict.fromkeys(roots)]


def _installed_here(path: str) -> bool:
    """Whether ``path`` lies in this interpreter's installation (its prefix or its base's)."""
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(Path(prefix).resolve()) for prefix in {sys.prefix, sys.base_prefix})


def interpreter_problem(run: RunSpec) -> str:
    """Why ``run``'s environment interpreter cannot start a worker ("" when it can, or when it has none)."""
    if run.environment and not run.python:
        return f"environment {run.environment!r} is not built: run `amp-suite env create {run.environment}`"
    if run.python and not (os.path.isfile(run.python) and os.access(run.python, os.X_OK)):
        return (f"environment {run.environment!r} is broken: its interpreter {run.python} is missing; run "
                f"`amp-suite env create {run.environment}`")
    return ""


def _read_all(fd: int, into: list[bytes]) -> None:
    """Read ``fd`` to its end, keeping at most :data:`RESULT_BYTES` bytes."""
    kept = 0
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(1 << 16):
            if kept <= RESULT_BYTES:
                into.append(chunk)
                kept += len(chunk)


def one_gpu_visible(run: RunSpec, environ: dict[str, str]) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for a one-device cell: the first GPU it may use, alone.

    Without it TensorFlow and JAX open a context (and reserve memory) on every
    visible GPU, and a one-device cell's ``DeviceInfo.count`` counts them all.
    A list the user set is narrowed to its first entry; an empty one (no GPU)
    is left alone, as are CPU and data-parallel cells.
    """
    if run.devices != 1 or run.device == "cpu":
        return {}
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return {"CUDA_VISIBLE_DEVICES": "0"}
    first = visible.split(",")[0].strip()
    return {"CUDA_VISIBLE_DEVICES": first} if first else {}


def gpu_numbering(run: RunSpec) -> dict[str, str]:
    """``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for a cell that may use a GPU.

    The suite reads a GPU's telemetry through NVML, which numbers GPUs in PCI
    bus order, and narrows ``CUDA_VISIBLE_DEVICES`` by those numbers; CUDA's
    own default order is fastest first, so on a machine of mixed GPUs device
    0 of the two could be different cards.  With this variable CUDA numbers
    them as NVML does (CUDA's programming guide, "CUDA Environment Variables").
    """
    return {} if run.device == "cpu" else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def run_in_worker(cell: Cell, *, log_path: Path, env: dict[str, str] | None = None,
                  on_step: Callable[[int, int], None] | None = None) -> CellResult:
    """Run ``cell`` in a fresh interpreter; every outcome becomes a result.

    With ``on_step``, the worker's step messages (:mod:`amp_suite.progress`)
    arrive there, ``(done, total)`` of the current epoch, from a reader thread.
    Raises :class:`StorageError` when the cell's log cannot be created.
    """
    run = cell.run
    started = time.perf_counter()
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open_for_writing(log_path)
    except OSError as exc:
        raise StorageError(f"cannot write the log {str(log_path)!r}: {exc.strerror or one_line(exc)}") from None
    problem = cell.unavailable or interpreter_problem(run)
    if problem:
        log.close()
        return _failure(cell, "unavailable", problem, started, log_path)
    request = json.dumps({"run": asdict(run), "workload": asdict(cell.workload)}).encode("utf-8")
    child_env = {**os.environ, **(env or {}), "AMP_SUITE_WORKER_PATH": os.pathsep.join(worker_path(run)),
                 HOST_PID_ENV: str(os.getpid())}
    if run.python:  # an environment's interpreter: none of the host's import settings
        child_env.pop("PYTHONPATH", None)
        child_env.pop("PYTHONHOME", None)
    child_env.update(one_gpu_visible(run, child_env))
    child_env.update(gpu_numbering(run))
    oom_before = _oom_kills()
    result_r, result_w = os.pipe()
    launcher = launcher_for(run)
    # A launcher whose processes cannot inherit pipes reports no progress inside the cell.
    wants_progress = on_step is not None and launcher.inherits_pipes
    progress_r, progress_w = os.pipe() if wants_progress else (None, None)
    if progress_w is not None:
        child_env[progress_channel.PROGRESS_FD_ENV] = progress_channel.progress_fd_value(progress_w)
    received: list[bytes] = []
    # Processes that cannot inherit the result pipe write their node's result to a file beside the log.
    result_file = None if launcher.inherits_pipes else log_path.with_name(log_path.name + ".result")
    if result_file is not None:
        command = launcher.command(run, str(result_file), worker.__name__)
        _remove(result_file)
        try:
            create_new(Path(str(result_file) + ".request"), request)
        except OSError as exc:
            log.close()
            os.close(result_r)
            os.close(result_w)
            raise StorageError(f"cannot write {str(result_file)!r}.request: {exc.strerror or one_line(exc)}") from None
    else:
        command = launcher.command(run, str(result_w), worker.__name__)
    with log:
        try:
            proc = process_tree.start(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
                pass_fds=(result_w,) if progress_w is None else (result_w, progress_w), env=child_env,
            )
        except OSError as exc:
            os.close(result_r)
            if progress_r is not None:
                os.close(progress_r)
            return _failure(cell, "failed", f"cannot start a worker: {one_line(exc)}", started, log_path)
        finally:
            os.close(result_w)
            if progress_w is not None:
                os.close(progress_w)
        reader = threading.Thread(target=_read_all, args=(result_r, received), daemon=True)
        reader.start()
        if progress_r is not None:  # a daemon: a grandchild holding the pipe open never blocks the sweep
            threading.Thread(target=progress_channel.read_messages, args=(progress_r, on_step),
                             name="amp-suite-progress", daemon=True).start()
        try:
            assert proc.stdin is not None  # started with stdin=PIPE
            try:
                proc.stdin.write(request)
                proc.stdin.close()
            except OSError:  # the worker died before reading its request
                pass
            proc.wait(timeout=run.timeout_s)
        except subprocess.TimeoutExpired:
            process_tree.end(proc)
            return _failure(cell, "timeout", f"no result after {run.timeout_s:g} s; worker killed",
                            started, log_path)
        except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: end the worker, keep what finished
            process_tree.end(proc)
            raise
        finally:
            reader.join(RESULT_DRAIN_S)
            if result_file is not None:
                process_tree.end(proc)  # the launcher's group; its workers end with it
                received.append(_read_and_remove(result_file))
    answer = parse_lines(b"".join(received)).results
    code = proc.returncode
    if answer and code and code > 0 and answer[-1].status != "ok":
        answer[-1].error = launcher.failed_with_result(code, answer[-1].error)
    if answer and (code == 0 or answer[-1].status != "ok"):
        return with_log(answer[-1], log_path)
    if code is not None and code < 0:
        sig = signal_name(-code)
        oom_after = _oom_kills()
        if sig == "SIGKILL" and oom_before is not None and oom_after is not None and oom_after > oom_before:
            return _failure(cell, "oom", "worker killed by the kernel's OOM killer", started, log_path)
        return _failure(cell, "failed", f"worker killed by {sig}", started, log_path)
    return _failure(cell, "failed", launcher.failed_without_result(code), started, log_path)


def signal_name(number: int) -> str:
    """``SIGKILL`` for a signal with a name, ``signal 40`` for one without (a real-time signal)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _remove(path: Path) -> None:
    for leftover in (path, Path(str(path) + ".request"), Path(str(path) + ".tmp")):
        try:
            leftover.unlink()
        except FileNotFoundError:
            pass


def _read_and_remove(path: Path) -> bytes:
    """A result file (empty without one), as a launcher without inherited pipes leaves it; then removed."""
    try:
        data = read_regular(path, limit=RESULT_BYTES)
    except OSError:
        data = b""
    _remove(path)
    return data


def _failure(cell: Cell, status: str, error: str, started: float, log_path: Path) -> CellResult:
    return with_log(cell_for_run(cell.run, status, error=error, wall_time_s=time.perf_counter() - started),
                    log_path)


def with_log(result: CellResult, log_path: Path) -> CellResult:
    """``result``, and for a cell that is not ``ok`` its log: ``metrics["log"]`` (the path) and ``log_tail``."""
    if result.status != "ok":
        result.metrics["log_tail"] = _log_tail(log_path)
        result.metrics["log"] = str(log_path)
    return result


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
    resume: bool = False,
    env: dict[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> Iterator[CellResult]:
    """Run every cell in order, appending each result to ``store`` and yielding it.

    With ``resume``, cells whose latest stored result is ``ok`` for the same
    configuration are skipped and their stored result is yielded.  A
    ``progress`` callback that has a ``step(done, total)`` method also
    receives the running cell's step messages.  Raises
    :class:`StorageError` (and stops) when a result cannot be stored.
    """
    cells = list(cells)
    done = store.latest_by_key() if resume else {}
    kept = [resumable(done, cell) for cell in cells]  # decided first: the rerun notes come before any cell
    keeping = getattr(progress, "keeping", None)
    if keeping is not None:  # the ETA counts only the cells that run
        keeping({index for index, previous in enumerate(kept, start=1) if previous is not None})
    for index, (cell, previous) in enumerate(zip(cells, kept, strict=True), start=1):
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


def resumable(done: dict[str, CellResult], cell: Cell) -> CellResult | None:
    """The stored result that ``--resume`` keeps for ``cell``: ``ok`` with the cell's fingerprint; else None.

    A stored ``ok`` result that is not kept gets one line on standard error
    saying why (``torch/mnist_cnn/fp32/r0: rerun, its workload changed
    (input_size 28 -> 56)``).
    """
    from amp_suite.sweep.fingerprint import resume_reason

    previous = done.get(cell.run.key)
    if previous is None or previous.status != "ok":
        return None
    reason = resume_reason(previous, cell.definition)
    if not reason:
        return previous
    print(f"amp-suite: {cell.run.key}: {reason}", file=sys.stderr)
    return None


def with_fingerprint(cell: Cell, result: CellResult) -> CellResult:
    """``result`` carrying its cell's definition and fingerprint."""
    from amp_suite.sweep.fingerprint import fingerprint

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
