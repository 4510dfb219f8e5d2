"""Writes that never leave a half-written file behind, and never follow a link.

* :func:`write_files_atomically` writes every file to a temporary file beside
  it, flushes it to disk, and only when all of them are complete renames them
  into place.  A full disk or a kill leaves the previous files as they were.
* :func:`append_line` adds one line to a line-per-record file.  It starts on a
  fresh line when the file ends in a torn line (a writer killed mid-line), and
  when the write itself fails it cuts the file back to its old length, so a
  failed append never tears the next one.

Every file is opened relative to a descriptor of its directory, with
``O_NOFOLLOW`` and ``O_NONBLOCK``: a symbolic link, a FIFO, a socket or a
device where a regular file is expected is refused with
:class:`UnsafeFileError` (an ``OSError`` whose text names the path and what it
is), before a byte is read or written and without waiting on a FIFO.
Temporary files get random names, are created with ``O_EXCL`` and take the
mode a plain write would give: an existing file's mode, else ``0666`` less the
umask.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

# Flags every open of a file the suite manages carries.
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The mode a new file is created with; the kernel applies the umask.
_PLAIN_MODE = 0o666
# Characters of a target's name kept in its temporary file's name (a name stays under NAME_MAX).
_TMP_NAME_CHARS = 100


class UnsafeFileError(OSError):
    """A path the suite would read or write is not a regular file (a link, a FIFO, a device)."""

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        super().__init__(errno.EINVAL, f"{str(path)!r} is {what}, not a regular file; amp-suite refuses "
                                       "to follow or open it (remove it or choose another directory)")
        self.path_text = str(path)
        self.what = what

    def __str__(self) -> str:
        return str(self.strerror)


def describe_mode(mode: int) -> str:
    """What a file of mode ``mode`` is, in words: ``a symbolic link``, ``a FIFO``."""
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file"))
    return next((text for test, text in kinds if test(mode)), "a special file")


def check_regular_or_absent(path: str | os.PathLike[str]) -> None:
    """Raise :class:`UnsafeFileError` unless ``path`` is missing or a regular file (links not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(path, describe_mode(mode))


def check_real_directory(path: str | os.PathLike[str]) -> None:
    """Raise :class:`UnsafeFileError` unless ``path`` is missing or a directory that is not a link."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        error = UnsafeFileError(path, describe_mode(mode))
        error.strerror = f"{str(path)!r} is {describe_mode(mode)}, not a directory; amp-suite refuses to follow it"
        raise error


@contextmanager
def directory_fd(directory: str | os.PathLike[str]) -> Iterator[int]:
    """A descriptor of ``directory`` (the directory the user named may itself be a link)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _refusal(path: Path, name: str, dir_fd: int, exc: OSError) -> OSError:
    """The error for a failed open: what the path is when that explains it, else ``exc``."""
    if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EMLINK, errno.EWOULDBLOCK, errno.ENODEV):
        try:
            mode = os.lstat(name, dir_fd=dir_fd).st_mode
        except OSError:
            return exc
        if not stat.S_ISREG(mode):
            return UnsafeFileError(path, describe_mode(mode))
    return exc


def open_in(dir_fd: int, path: Path, flags: int, mode: int = _PLAIN_MODE) -> int:
    """Open ``path.name`` in the directory ``dir_fd``: a regular file only, never through a link."""
    try:
        fd = os.open(path.name, flags | _SAFE_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise _refusal(path, path.name, dir_fd, exc) from None
    try:
        what = os.fstat(fd).st_mode
        if not stat.S_ISREG(what):
            raise UnsafeFileError(path, describe_mode(what))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = _PLAIN_MODE) -> int:
    """A descriptor of the regular file ``path`` opened with ``flags``; links and special files refused."""
    path = Path(path)
    with directory_fd(path.parent) as dir_fd:
        return open_in(dir_fd, path, flags, mode)


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (the first ``limit`` only, when given)."""
    fd = open_regular(path, os.O_RDONLY)
    chunks: list[bytes] = []
    kept = 0
    with os.fdopen(fd, "rb") as handle:
        while limit is None or kept < limit:
            chunk = handle.read(1 << 20 if limit is None else min(1 << 20, limit - kept))
            if not chunk:
                break
            chunks.append(chunk)
            kept += len(chunk)
    return b"".join(chunks)


def open_for_writing(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` emptied (or created) for writing, as a binary file; links and special files refused."""
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def create_new(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``, which must not exist yet (``O_EXCL``)."""
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_fd(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:
        pass


def _existing_mode(dir_fd: int, path: Path) -> int | None:
    """The permission bits of ``path`` when it is a regular file; None when it is missing."""
    try:
        mode = os.lstat(path.name, dir_fd=dir_fd).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(path, describe_mode(mode))
    return stat.S_IMODE(mode)


def _write_temporary(dir_fd: int, path: Path, data: bytes) -> str:
    """A new temporary file beside ``path`` holding ``data``, flushed; returns its name in ``dir_fd``."""
    keep = _existing_mode(dir_fd, path)
    name = f".{path.name[:_TMP_NAME_CHARS]}.{secrets.token_hex(8)}.tmp"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _SAFE_FLAGS, _PLAIN_MODE, dir_fd=dir_fd)
    try:
        if keep is not None:
            os.fchmod(fd, keep)
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(dir_fd, name)
        raise
    os.close(fd)
    return name


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def write_files_atomically(contents: Mapping[Path, str | bytes]) -> list[Path]:
    """Write every ``path -> text`` pair, all complete or none changed.

    Each file is written to a temporary sibling and renamed over its target
    only after every temporary file was written and flushed.  On an error no
    temporary file is left and the targets keep their old contents.  A target
    that is a link or a special file is refused (:class:`UnsafeFileError`).
    """
    directories: dict[Path, int] = {}
    pending: list[tuple[int, str, Path]] = []
    try:
        for path, content in contents.items():
            path = Path(path)
            data = content.encode("utf-8") if isinstance(content, str) else content
            if path.parent not in directories:
                directories[path.parent] = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            dir_fd = directories[path.parent]
            pending.append((dir_fd, _write_temporary(dir_fd, path, data), path))
        for dir_fd, tmp_name, path in pending:
            _existing_mode(dir_fd, path)  # still regular or missing at the last moment
            os.replace(tmp_name, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        for dir_fd in directories.values():
            _fsync_fd(dir_fd)
    finally:
        for dir_fd, tmp_name, _ in pending:
            _unlink_quietly(dir_fd, tmp_name)  # gone already when it was renamed
        for dir_fd in directories.values():
            os.close(dir_fd)
    return [path for _, _, path in pending]


def write_file_atomically(path: Path, content: str | bytes) -> Path:
    """Write one file through a temporary sibling and a rename."""
    return write_files_atomically({Path(path): content})[0]


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline to ``path``, on a line of its own, flushed to disk.

    Raises ``OSError`` (a full disk, a read-only file; :class:`UnsafeFileError`
    for a link or a special file) with the file as it was.
    """
    if "\n" in line or "\r" in line:
        raise ValueError("a stored line cannot contain a line break")
    data = line.encode("utf-8") + b"\n"
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
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
