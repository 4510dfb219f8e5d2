"""What one reporter may do to an output folder: write files of its own, and nothing else.

Reporters run in the host's process, one after another, over one folder.  A
reporter that picks an obvious name (``results.jsonl``) would replace the
sweep's only record of its cells; one that writes ``report.md`` after the
built-in reporter would replace the report every other reporter builds on.
:class:`ReportGuard` keeps a copy of the folder's stored files (the sweep's
``results.jsonl`` and ``environment.json``) and of every file a reporter
listed, and after each reporter puts back any of them that changed, naming
the reporter that changed it.  A listed path that does not exist, or lies
outside the folder, is named too and not counted as written.  A guard cannot
see a file written outside the folder that the reporter does not list.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path

from amp_suite.safe_files import read_regular, write_file_atomically

# The largest file kept to be put back (a report file or a sweep's results.jsonl is far below it).
KEPT_BYTES = 1 << 30


def _read(path: Path) -> bytes | None:
    """``path``'s bytes; None when there is no regular file there."""
    try:
        return read_regular(path)
    except (OSError, ValueError):
        return None


def _too_big(path: Path) -> bool:
    """Whether ``path`` is beyond :data:`KEPT_BYTES` (then it is not watched: no copy of it is kept)."""
    try:
        return os.stat(path).st_size > KEPT_BYTES
    except OSError:
        return False


def _put_back(path: Path, data: bytes | None) -> None:
    if data is None:  # there was none: the reporter made it
        if os.path.isfile(path) and not os.path.islink(path):
            os.unlink(path)
    else:
        write_file_atomically(path, data)


@dataclass
class ReportGuard:
    """Copies of an output folder's stored files and of each reporter's listed files, checked after each reporter.

    ``stored``: the names in ``out_dir`` no reporter may change.  ``built_in``:
    the names (``fnmatch`` patterns: ``report.md``, ``chart-*.png``) only the
    built-in reporters write; another reporter that changes one has it put
    back, whichever reporter ran first.
    """

    out_dir: Path
    stored: tuple[str, ...]
    built_in: tuple[str, ...] = ()
    _stored_bytes: dict[str, bytes | None] = field(default_factory=dict)
    _written: dict[Path, tuple[str, bytes | None]] = field(default_factory=dict)  # file -> (its reporter, bytes)
    _built_in_bytes: dict[str, bytes | None] = field(default_factory=dict)  # before a third-party reporter ran

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self._stored_bytes = {name: _read(self.out_dir / name) for name in self.stored
                              if not _too_big(self.out_dir / name)}

    def _is_built_in_name(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.built_in)

    def _built_in_files(self) -> dict[str, bytes | None]:
        try:
            names = [name for name in os.listdir(self.out_dir) if self._is_built_in_name(name)]
        except OSError:
            names = []
        return {name: _read(self.out_dir / name) for name in names if not _too_big(self.out_dir / name)}

    def before(self, built_in: bool) -> None:
        """Before a reporter runs: a third-party one (``built_in`` false) has the built-in reporters' files kept."""
        self._built_in_bytes = {} if built_in else self._built_in_files()

    def check(self, plugin: str, listed: list[Path], built_in: bool = True) -> tuple[list[Path], list[str]]:
        """After reporter ``plugin`` listed ``listed``: the paths it wrote (in the folder, existing), and what it did
        wrong, a line each (each file it changed that was not its own is put back)."""
        problems: list[str] = []
        for name, before in self._stored_bytes.items():
            if _read(self.out_dir / name) != before:
                problems.append(self._restore(self.out_dir / name, before, f"{name}, the sweep's own record"))
        if not built_in:
            now = self._built_in_files()
            for name in sorted(set(now) | set(self._built_in_bytes)):
                if now.get(name) != self._built_in_bytes.get(name):
                    problems.append(self._restore(self.out_dir / name, self._built_in_bytes.get(name),
                                                  f"{name}, a file of amp-suite's built-in reporters"))
        folder = self.out_dir.resolve()
        kept: list[Path] = []
        for path in listed:
            path = Path(path)
            where = path if path.is_absolute() else Path.cwd() / path
            inside = where.resolve().parent == folder
            if not inside and folder not in where.resolve().parents:
                problems.append(f"listed {str(path)[:200]!r}, outside the output folder {str(self.out_dir)[:200]!r}; "
                                "a reporter writes into the folder it is given")
            elif inside and (where.name in self._stored_bytes or (not built_in and self._is_built_in_name(where.name))):
                continue  # named above, and put back
            elif not where.is_file():
                problems.append(f"listed {str(path)[:200]!r}, which it did not write (no such file)")
            else:
                kept.append(path)
        for path, (owner, data) in list(self._written.items()):
            if owner != plugin and _read(path) != data:
                problems.append(self._restore(path, data, f"{path.name}, which reporter {owner!r} wrote"))
                kept = [p for p in kept if Path(p).resolve() != path]
        for path in kept:
            if not _too_big(Path(path)):
                self._written.setdefault(Path(path).resolve(), (plugin, _read(Path(path))))
        return kept, problems

    def _restore(self, path: Path, data: bytes | None, what: str) -> str:
        try:
            _put_back(path, data)
        except OSError as exc:
            return f"changed {what}, and it could not be put back: {exc.strerror or exc}"
        return f"changed {what} (put back as it was); a reporter writes files of its own"
