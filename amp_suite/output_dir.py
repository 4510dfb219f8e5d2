"""The output directory of a sweep: checked before the first cell, and locked while a run uses it.

:func:`prepare_output_dir` refuses an empty path, a path that is a file, and a
directory (or ``results.jsonl``) that cannot take a write, each with one line,
before any cell runs.  :class:`OutputLock` holds an advisory lock
(``flock``) on ``OUT/.amp-suite.lock`` for the whole run: a second run on the
same directory stops at once, naming the run that holds it.  The kernel drops
the lock when its holder exits, however it exits, so a killed run never leaves
a stale lock behind.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import tempfile
from pathlib import Path

from amp_suite.errors import UsageError
from amp_suite.results import RESULTS_FILE

try:  # POSIX; elsewhere runs are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".amp-suite.lock"
LOGS_DIR = "logs"
# Bytes written (and removed) to prove the directory can take a write.
PROBE_BYTES = 64 * 1024


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def prepare_output_dir(text: str | os.PathLike[str]) -> Path:
    """The output directory, created and proven writable; a one-line :class:`UsageError` if not."""
    if not str(text).strip():
        raise UsageError("the output directory is empty; pass --out DIR (an unset variable?)")
    if "\0" in str(text):
        raise UsageError("the output directory contains a NUL character")
    directory = Path(text)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"output directory {str(directory)!r} is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / LOGS_DIR).mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output directory {str(directory)!r}: {_reason(exc)}") from None
    for child in (directory / LOGS_DIR, directory / RESULTS_FILE):
        if child.exists() and child.is_dir() != (child.name == LOGS_DIR):
            kind = "a directory" if child.name == LOGS_DIR else "a file"
            raise UsageError(f"{str(child)!r} must be {kind}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".amp-suite-probe-", dir=directory / LOGS_DIR)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"output directory {str(directory)!r} cannot take a write: {_reason(exc)}") from None
    results = directory / RESULTS_FILE
    if results.exists():
        try:
            os.close(os.open(results, os.O_RDWR | os.O_APPEND))
        except OSError as exc:
            raise UsageError(f"cannot append to {str(results)!r}: {_reason(exc)}") from None
    return directory


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
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
