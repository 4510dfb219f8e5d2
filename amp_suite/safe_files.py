"""Writes that never leave a half-written file behind.

* :func:`write_files_atomically` writes every file to a temporary file beside
  it, flushes it to disk, and only when all of them are complete renames them
  into place.  A full disk or a kill leaves the previous files as they were.
* :func:`append_line` adds one line to a line-per-record file.  It starts on a
  fresh line when the file ends in a torn line (a writer killed mid-line), and
  when the write itself fails it cuts the file back to its old length, so a
  failed append never tears the next one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_files_atomically(contents: Mapping[Path, str | bytes]) -> list[Path]:
    """Write every ``path -> text`` pair, all complete or none changed.

    Each file is written to a temporary sibling and renamed over its target
    only after every temporary file was written and flushed.  On an error no
    temporary file is left and the targets keep their old contents.
    """
    pending: list[tuple[Path, Path]] = []
    try:
        for path, content in contents.items():
            path = Path(path)
            data = content.encode("utf-8") if isinstance(content, str) else content
            fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            pending.append((Path(tmp_name), path))
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        for tmp, path in pending:
            os.replace(tmp, path)
    finally:
        for tmp, _ in pending:
            try:
                tmp.unlink()  # gone already when it was renamed
            except OSError:
                pass
    for directory in {path.parent for _, path in pending}:
        _fsync_directory(directory)
    return [path for _, path in pending]


def write_file_atomically(path: Path, content: str | bytes) -> Path:
    """Write one file through a temporary sibling and a rename."""
    return write_files_atomically({Path(path): content})[0]


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline to ``path``, on a line of its own, flushed to disk.

    Raises ``OSError`` (a full disk, a read-only file) with the file as it was.
    """
    if "\n" in line or "\r" in line:
        raise ValueError("a stored line cannot contain a line break")
    data = line.encode("utf-8") + b"\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # the last line is torn: leave it alone, start afresh
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
