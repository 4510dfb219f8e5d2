"""The output directory of a sweep: checked before the first cell, and locked while a run uses it.

:func:`prepare_output_dir` refuses an empty path, a path that is a file, ``/``,
the home directory, the root of the current directory's filesystem, a
directory holding other things than an amp-suite output, a directory (or
``results.jsonl``) that cannot take a write, and a link or special file where
the suite writes a file (:func:`check_sweep_paths`), each with one line,
before any cell runs.  :class:`OutputLock` holds an advisory lock
(``flock``) on ``OUT/.amp-suite.lock`` for the whole run: a second run on the
same directory stops at once, naming the run that holds it.  The kernel drops
the lock when its holder exits, however it exits, so a killed run never leaves
a stale lock behind.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from amp_suite.errors import UsageError
from amp_suite.launchers.torchrun import LOG_FOLDER_SUFFIX as TORCHRUN_LOG_FOLDER_SUFFIX
from amp_suite.safe_files import (
    UnsafeFileError,
    check_real_directory,
    check_regular_or_absent,
    open_regular,
    read_regular,
)
from amp_suite.sweep.store import RESULTS_FILE

try:  # POSIX; elsewhere runs are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".amp-suite.lock"
# Name prefix of the file that proves a new output directory takes a write (removed at once).
PROBE_PREFIX = ".amp-suite-probe-"
LOGS_DIR = "logs"
ENVIRONMENT_FILE = "environment.json"
# The record of each report file's digest, written after each report (amp_suite.sweep.report_files).
REPORT_DIGESTS_FILE = "report-digests.json"
# Files a sweep (its built-in reporters included) writes at the top of its output directory.
SWEEP_FILES = (RESULTS_FILE, LOCK_FILE, ENVIRONMENT_FILE, "report.md", "report.html", "results.csv",
               "results.json", "charts.json", REPORT_DIGESTS_FILE, "chart-speedup.png",
               "chart-speedup-over-tf32.png", "chart-memory.png", "chart-loss.png", "chart-accuracy.png",
               "chart-batch.png")
# The charts named after a workload (chart-curve-WORKLOAD.png): every one already there is checked too.
CHART_PATTERN = "chart-*.png"
# Files of a sweep that nothing can rebuild: no command replaces them, whatever it is told.
STORED_FILES = (RESULTS_FILE, ENVIRONMENT_FILE, LOCK_FILE)
# Files a cell writes beside its log (a torchrun cell's request and result).
CELL_FILE_SUFFIXES = ("", ".result", ".result.request", ".result.tmp")
# The key that opens every environment.json a sweep writes (amp_suite.machine.environment.host_environment).
ENVIRONMENT_MARK = "amp_suite_version"
_ENVIRONMENT_START = re.compile(rb'\s*\{\s*"' + ENVIRONMENT_MARK.encode() + rb'"')
# Fields every stored cell result has (amp_suite.records.CellResult).
RESULT_FIELDS = ("key", "framework", "precision", "status")
# Bytes written (and removed) to prove the directory can take a write.
PROBE_BYTES = 64 * 1024


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _resolved(directory: Path) -> Path:
    try:
        return directory.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, an over-long name
        reason = _reason(exc) if isinstance(exc, OSError) else "a symbolic link loop"
        raise UsageError(f"cannot resolve the output directory {str(directory)!r}: {reason}") from None


def _filesystem_root(start: Path) -> Path:
    """The mount point holding ``start``: the highest parent on the same device."""
    current = start
    device = os.stat(current).st_dev
    while current.parent != current and os.stat(current.parent).st_dev == device:
        current = current.parent
    return current


def refuse_system_directory(directory: Path) -> None:
    """A one-line :class:`UsageError` for ``/``, the home directory or the current filesystem's root."""
    where = _resolved(directory)
    refused = {Path("/"): "the root directory"}
    try:
        refused.setdefault(Path.home().resolve(), "your home directory")
    except (OSError, RuntimeError):
        pass
    try:
        refused.setdefault(_filesystem_root(Path.cwd().resolve()), "the root of the current filesystem")
    except OSError:
        pass
    if where in refused:
        raise UsageError(f"refusing output directory {str(directory)!r}: it is {refused[where]}; "
                         "choose a directory of its own (e.g. --out amp-suite-results)")


def _has_result_line(path: Path) -> bool:
    """True when ``path`` (its first MiB) holds a line that is a cell's result: a JSON object with the fields
    every stored result has (a user's own ``results.jsonl`` of other objects is not one)."""
    try:
        head = read_regular(path, limit=1 << 20)
    except OSError:
        return False
    for line in head.split(b"\n"):
        if not line.strip().startswith(b"{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:  # a torn line, or the last one cut at the limit
            continue
        if isinstance(value, dict) and all(field in value for field in RESULT_FIELDS):
            return True
    return False


def _is_suite_environment(path: Path) -> bool:
    """True when ``path`` is an ``environment.json`` a sweep wrote: a regular file holding a JSON object whose
    first key is ``amp_suite_version`` (or one cut short after it: a disk that filled mid-write elsewhere)."""
    try:
        data = read_regular(path, limit=1 << 20)
    except OSError:
        return False
    try:
        value = json.loads(data)
    except ValueError:
        return _ENVIRONMENT_START.match(data) is not None
    return isinstance(value, dict) and next(iter(value), None) == ENVIRONMENT_MARK  # the first key, as written


def is_suite_output(directory: Path) -> bool:
    """True when ``directory`` holds a sweep's files: the lock, an ``environment.json`` a sweep wrote, or a
    cell's result in ``results.jsonl``.  A file of another program that has one of these names does not count."""
    if _is_regular(directory / LOCK_FILE) or _is_suite_environment(directory / ENVIRONMENT_FILE):
        return True
    return _has_result_line(directory / RESULTS_FILE)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_empty(directory: Path) -> bool:
    """True when ``directory`` holds nothing, or only a ``logs`` directory empty but for write probes.

    A run that has just created a new directory writes a probe file into its
    ``logs`` before it takes the lock: a second run starting at the same moment
    sees the directory so, and must go on to the lock (and its message: in use
    by another run), not call it foreign.
    """
    entries = os.listdir(directory)
    if entries == [LOGS_DIR] and (directory / LOGS_DIR).is_dir() and not (directory / LOGS_DIR).is_symlink():
        return all(name.startswith(PROBE_PREFIX) for name in os.listdir(directory / LOGS_DIR))
    return not entries


def _why_not_ours(directory: Path) -> str:
    """Why ``directory`` is not a sweep's output, in a few words for a refusal."""
    environment = (f"its {ENVIRONMENT_FILE} does not open with {ENVIRONMENT_MARK!r} as amp-suite's does"
                   if os.path.lexists(directory / ENVIRONMENT_FILE) else f"no {ENVIRONMENT_FILE}")
    results = (f"no result in its {RESULTS_FILE}" if os.path.lexists(directory / RESULTS_FILE)
               else f"no {RESULTS_FILE}")
    return f"{environment}, {results}"


def refuse_foreign_directory(directory: Path) -> None:
    """A one-line :class:`UsageError` when ``directory`` is neither empty nor an amp-suite output."""
    try:
        if _is_empty(directory) or is_suite_output(directory):
            return
    except OSError as exc:
        raise UsageError(f"cannot read the output directory {str(directory)!r}: {_reason(exc)}") from None
    raise UsageError(f"{str(directory)!r} is not an amp-suite output directory ({_why_not_ours(directory)}) and "
                     "is not empty; amp-suite writes only into its own or an empty directory: choose another --out")


def check_sweep_paths(directory: Path, cell_logs: Iterable[Path] = ()) -> None:
    """A one-line :class:`UsageError` for any path the sweep will write that is a link or a special file.

    Covers the store, the lock, ``environment.json``, the built-in reports
    (``report.html`` among them) and every chart, the ``logs`` directory, and each cell's log with its torchrun
    request and result files and torchrun's log folder.
    """
    try:
        check_real_directory(directory / LOGS_DIR)
        for name in SWEEP_FILES:
            check_regular_or_absent(directory / name)
        for chart in directory.glob(CHART_PATTERN):
            check_regular_or_absent(chart)
        for log in cell_logs:
            for suffix in CELL_FILE_SUFFIXES:
                check_regular_or_absent(log.with_name(log.name + suffix))
            check_real_directory(log.with_name(log.name + TORCHRUN_LOG_FOLDER_SUFFIX))
    except UnsafeFileError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot check the output directory {str(directory)!r}: {_reason(exc)}") from None


def expanded_path(text: str | os.PathLike[str]) -> Path:
    """``text`` as a path, a leading ``~`` or ``~USER`` made the home directory as a shell makes it (a
    ``benchmarks.toml`` or Python caller has no shell to do it: ``out = "~/results"`` had made ``./~/results``)."""
    return Path(os.path.expanduser(os.fspath(text)))


def output_path(text: str | os.PathLike[str]) -> Path:
    """The path a command's output directory goes to (``run``'s and ``numerics``' ``--out``), before whether it
    is the command's own is asked: a one-line :class:`UsageError` for empty text, a NUL, ``/``, the home
    directory, the current filesystem's root, a broken link and a file."""
    if not str(text).strip():
        raise UsageError("the output directory is empty; pass --out DIR (an unset variable?)")
    if "\0" in str(text):
        raise UsageError("the output directory contains a NUL character")
    directory = expanded_path(text)
    refuse_system_directory(directory)
    try:
        if directory.is_symlink() and not directory.exists():
            raise UsageError(f"output directory {str(directory)!r} is a broken symbolic link (to "
                             f"{os.readlink(directory)!r}); remove it or choose another --out")
        if directory.exists() and not directory.is_dir():
            raise UsageError(f"output directory {str(directory)!r} is a file, not a directory")
    except OSError as exc:
        raise UsageError(f"cannot check the output directory {str(directory)!r}: {_reason(exc)}") from None
    return directory


def check_output_dir(text: str | os.PathLike[str]) -> Path:
    """The output directory a sweep may write, checked and left as it is; a one-line :class:`UsageError` if not.

    The checks of :func:`prepare_output_dir` that change nothing, so a plan
    (``amp-suite run --dry-run``) refuses what the sweep would refuse.
    """
    directory = output_path(text)
    try:
        if directory.is_dir():
            refuse_foreign_directory(directory)
        check_real_directory(directory / LOGS_DIR)
    except UnsafeFileError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot create output directory {str(directory)!r}: {_reason(exc)}") from None
    return directory


def prepare_output_dir(text: str | os.PathLike[str]) -> Path:
    """The output directory, created and proven writable; a one-line :class:`UsageError` if not."""
    directory = check_output_dir(text)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / LOGS_DIR).mkdir(exist_ok=True)
    except UnsafeFileError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        what = "output directory" if not directory.is_dir() else f"{LOGS_DIR}/ in the output directory"
        raise UsageError(f"cannot create {what} {str(directory)!r}: {_reason(exc)}") from None
    if (directory / RESULTS_FILE).is_dir():
        raise UsageError(f"{str(directory / RESULTS_FILE)!r} must be a file")
    check_sweep_paths(directory)
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=directory / LOGS_DIR)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"output directory {str(directory)!r} cannot take a write: {_reason(exc)}") from None
    refuse_unwritable(directory)  # the report's files go beside logs/, which may be writable where it is not
    results = directory / RESULTS_FILE
    if results.exists():
        try:
            os.close(open_regular(results, os.O_RDWR | os.O_APPEND))
        except OSError as exc:
            raise UsageError(f"cannot append to {str(results)!r}: {_reason(exc)}") from None
    return directory


def _remove_stale_requests(logs: Path) -> None:
    """Remove torchrun request files a killed run left in ``logs`` (only regular files, no links followed)."""
    try:
        names = [n for n in os.listdir(logs) if n.endswith((".result.request", ".result.tmp"))]
    except OSError:
        return
    for name in names:
        try:
            if os.path.isfile(logs / name) and not os.path.islink(logs / name):
                os.unlink(logs / name)
        except OSError:
            pass


def _holder_text() -> str:
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    command = " ".join(sys.argv)[:300]
    return " ".join(f"pid {os.getpid()} on {platform.node()}, started {started}: {command}".split())


class OutputLock:
    """An exclusive lock on an output directory for the lifetime of one run."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise a one-line :class:`UsageError` naming its holder."""
        if fcntl is None:
            return
        try:
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)
        except UnsafeFileError as exc:
            raise UsageError(f"cannot use the lock file: {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot open the lock file {str(self.path)!r}: {_reason(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = " ".join(os.pread(fd, 1000, 0).decode("utf-8", "replace").split()) or "holder unknown"
            os.close(fd)
            raise UsageError(
                f"output directory {str(self.path.parent)!r} is in use by another amp-suite run "
                f"({holder}); wait for it to end or choose another --out"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_text().encode("utf-8", "replace"), 0)
        except OSError:
            pass  # the lock holds even when its description cannot be written
        self._fd = fd
        _remove_stale_requests(self.path.parent / LOGS_DIR)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def refuse_unwritable(directory: Path) -> None:
    """A one-line :class:`UsageError` when no file can be made in ``directory`` itself (a read-only or immutable
    folder): a small file is created there and removed again."""
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"output directory {str(directory)!r} cannot take a write: {_reason(exc)}") from None


def report_lock(text: str | os.PathLike[str]) -> OutputLock:
    """The lock ``amp-suite report DIR`` holds while it reads the store and writes the report.

    Refuses, each with one line: a path that cannot be looked up (an over-long
    name, a link loop), one that is not a directory, and a directory that is
    not an amp-suite output.  Holding the lock, the report cannot race a run
    writing the same directory, so it is never older than the store it read.
    """
    if not str(text).strip():
        raise UsageError(f"no output directory given ({str(text)!r}); pass a sweep's output directory")
    directory = Path(text)
    try:
        mode = os.stat(directory).st_mode
    except OSError as exc:
        raise UsageError(f"cannot open {str(directory)!r}: {_reason(exc)}; pass a sweep's output "
                         "directory") from None
    if not stat.S_ISDIR(mode):
        raise UsageError(f"{str(directory)!r} is not a directory; pass a sweep's output directory")
    try:
        suite_output = is_suite_output(directory)
    except OSError as exc:
        raise UsageError(f"cannot read {str(directory)!r}: {_reason(exc)}") from None
    if not suite_output:
        raise UsageError(f"{str(directory)!r} is not an amp-suite output directory ({_why_not_ours(directory)}); "
                         "the report is not written there")
    check_sweep_paths(directory)
    refuse_unwritable(directory)
    return OutputLock(directory)
