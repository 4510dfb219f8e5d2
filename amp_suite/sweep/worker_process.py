"""One cell in a fresh worker process: started under a supervisor, its result read back from a pipe, its log kept.

Each worker is a new interpreter, never a fork, started under a supervisor
(:mod:`amp_suite.processes.tree`) that owns everything the worker starts,
detached children included.  Only JSON crosses the process boundary: the
request goes to the worker's stdin and the result comes back through a pipe.
A worker that crashes, hangs, is killed or answers nothing becomes a result
with a status, carrying its log's path and last lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from amp_suite import progress as progress_channel
from amp_suite.cell import worker
from amp_suite.errors import StorageError, one_line
from amp_suite.host_watch import HOST_PID_ENV
from amp_suite.launchers import launcher_for
from amp_suite.launchers.single import OWN_PATH, import_root, worker_import_path
from amp_suite.processes import tree as process_tree
from amp_suite.records import CellResult, RunSpec
from amp_suite.safe_files import create_new, open_for_writing, open_regular, read_regular
from amp_suite.sweep.planned_cell import Cell
from amp_suite.sweep.store import TEXT_FIGURE_CHARS, parse_lines

# Lines of a failed worker's log kept in its result (at most TEXT_FIGURE_CHARS characters).
LOG_TAIL_LINES = 25
# Largest result a worker may send back; more is a failed cell.
RESULT_BYTES = 64 * 2**20
# Seconds to wait for the result pipe to close after the worker exited.
RESULT_DRAIN_S = 10.0


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
    return with_log(cell.result(status, error=error, wall_time_s=time.perf_counter() - started),
                    log_path)


def with_log(result: CellResult, log_path: Path) -> CellResult:
    """``result``, and for a cell that is not ``ok`` its log: ``metrics["log"]`` (the path) and ``log_tail``."""
    if result.status != "ok":
        result.metrics["log_tail"] = _log_tail(log_path)
        result.metrics["log"] = str(log_path)
    return result
