"""What amp-suite made, and so may remove or replace: folders carrying its marker.

A folder amp-suite may ever delete (an environment under ``AMP_SUITE_ENVS``)
gets the marker file :data:`MARKER` the moment it is created, before anything
else is put in it.  Before removing a folder, amp-suite checks the marker
without following a link: the folder itself must be a real directory (not a
link to one) and the marker a regular file (not a link) holding
:data:`MARKER_TEXT`.  Anything else is someone else's: it is left alone and
named in a one-line :class:`NotOursError`.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from amp_suite.errors import UsageError

MARKER = ".amp-suite-made"
MARKER_TEXT = "made by amp-suite; amp-suite may remove this folder (docs/environments.md)\n"
# Bytes of a marker read back: MARKER_TEXT and no more.
_MARKER_BYTES = len(MARKER_TEXT.encode()) + 1


class NotOursError(UsageError):
    """A path amp-suite would remove or replace was not made by amp-suite: it is left alone."""


def is_real_directory(path: Path) -> bool:
    """True for a directory that is not a link (``lstat``, nothing followed)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_in(folder: Path, name: str, limit: int) -> bytes | None:
    """The first ``limit`` bytes of the regular file ``folder/name``, opened without following a link; None
    when the folder or the file is a link, missing, or not a regular file."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def has_marker(folder: Path) -> bool:
    """True when ``folder`` is a real directory holding amp-suite's marker (no link followed anywhere)."""
    return is_real_directory(folder) and _read_in(folder, MARKER, _MARKER_BYTES) == MARKER_TEXT.encode()


def read_private_file(folder: Path, name: str, limit: int = 1 << 20) -> bytes | None:
    """``folder/name`` when both are real (a directory and a regular file, no link followed), else None."""
    return _read_in(folder, name, limit) if is_real_directory(folder) else None


def make_marked_folder(folder: Path) -> None:
    """Create ``folder`` (its parent must exist) and put the marker in it first.

    Raises :class:`FileExistsError` when something is already at ``folder``.
    """
    os.mkdir(folder)
    fd = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, MARKER_TEXT.encode())
    finally:
        os.close(fd)


def refusal(path: Path, what: str, fix: str) -> NotOursError:
    """The one-line error for ``path``, which amp-suite did not make and leaves alone."""
    try:
        kind = _kind(os.lstat(path).st_mode)
    except OSError:
        kind = "something"
    return NotOursError(f"{str(path)[:300]!r} is {kind} amp-suite did not make ({_marker_state(path)}), "
                        f"so amp-suite will not {what}; left alone: {fix}")


def _marker_state(folder: Path) -> str:
    """Why ``folder`` is not amp-suite's: not a real folder, or a folder whose marker is missing or not amp-suite's."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):  # a file, a link (to a folder too): amp-suite made no such
            return f"amp-suite makes a real folder with its {MARKER} marker in it, and follows no link to one"
        mode = os.lstat(folder / MARKER).st_mode
    except OSError:
        return f"it holds no {MARKER} marker"
    if stat.S_ISLNK(mode):
        return f"its {MARKER} marker is a symbolic link, where amp-suite writes a file"
    if not stat.S_ISREG(mode):
        return f"its {MARKER} is {_kind(mode)}, where amp-suite writes a file"
    if _read_in(folder, MARKER, _MARKER_BYTES) is None:
        return f"its {MARKER} marker cannot be read"
    return f"its {MARKER} marker does not hold what amp-suite writes"


def _kind(mode: int) -> str:
    from amp_suite.safe_files import describe_mode

    return describe_mode(mode)


def is_empty_directory(folder: Path) -> bool:
    try:
        return is_real_directory(folder) and not os.listdir(folder)
    except OSError:
        return False


def remove_marked_folder(folder: Path, *, ours: Callable[[Path], bool] = has_marker, fix: str) -> bool:
    """Remove ``folder`` if amp-suite made it (``ours``) or it is an empty directory; False when there is
    nothing at ``folder``.

    Raises :class:`NotOursError` (nothing removed) for anything else: a folder
    without the marker, a link, a file.  The removal never follows a link
    inside the folder (``shutil.rmtree`` removes links, not what they point to).
    """
    if not os.path.lexists(folder):
        return False
    if is_empty_directory(folder):  # nothing in it to lose (a build killed before its marker was written)
        os.rmdir(folder)
        return True
    if not ours(folder):
        raise refusal(folder, "remove it", fix)
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    return True


# The flag that lets a command replace a file amp-suite did not write (the same word in every command).
FORCE_FLAG = "--force"


def first_line_of(path: Path, limit: int = 4096) -> bytes | None:
    """The first line of the regular file ``path`` (no link followed); None when it is not one."""
    data = read_private_file(path.parent, path.name, limit)
    return None if data is None else data.split(b"\n", 1)[0].rstrip(b"\r")


def check_replaceable(path: Path, *, command: str, first_line: str, force: bool) -> None:
    """Raise :class:`NotOursError` unless ``command`` may replace ``path``.

    It may when nothing is there, when ``path`` is a regular file that
    ``command`` wrote (its first line begins with ``first_line``), or with
    ``force`` (the user's explicit word).  A link or a special file is never
    replaced.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NotOursError(f"cannot look at {str(path)[:300]!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise NotOursError(f"{str(path)[:300]!r} is {_kind(mode)}, not a file {command} wrote; left alone "
                           "(choose another path)")
    if force or (first_line_of(path) or b"\0").startswith(first_line.encode()):
        return
    raise NotOursError(f"{str(path)[:300]!r} exists and is not a file {command} wrote; left alone (pass "
                       f"{FORCE_FLAG} to replace it, or choose another path)")
