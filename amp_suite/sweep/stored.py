"""A sweep read back from its output directory: its latest results and its ``environment.json``.

What ``amp-suite report``, ``amp-suite compare`` and :func:`amp_suite.load`
read.  Nothing here runs a cell; values read from disk are checked
(:mod:`amp_suite.stored_values`) before anything uses them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from amp_suite.errors import StoredValueError, UsageError
from amp_suite.records import CellResult
from amp_suite.sweep.output_dir import ENVIRONMENT_FILE


def warn_skipped_lines(store, contents=None) -> None:
    """One warning naming the lines of ``results.jsonl`` that hold no result, one naming the fields dropped."""
    contents = store.read() if contents is None else contents
    if contents.skipped:
        print(f"amp-suite: warning: {store.path}: skipped {len(contents.skipped)} line(s) that hold no "
              f"result: {contents.describe_skipped()}", file=sys.stderr)
    if contents.dropped:
        print(f"amp-suite: warning: {store.path}: ignoring {len(contents.dropped)} stored value(s) a report "
              f"cannot use: {contents.describe_dropped()}", file=sys.stderr)


# Settings of where and how long a sweep runs, not of what its cells compute: --resume with another --timeout or
# --data-dir finishes the same sweep (a trial was told to give the first run's timeout again, the one that failed).
PLACE_SETTINGS = ("out", "timeout", "data_dir", "download")


def warn_about_other_settings(directory: Path, settings: dict[str, Any]) -> None:
    """``--resume`` plans from this command's flags and config, not from the stored sweep: one warning line
    naming every setting that differs from the one ``environment.json`` recorded (nothing when there is none)."""
    from amp_suite.safe_files import read_regular

    path = Path(directory) / ENVIRONMENT_FILE
    try:
        stored = json.loads(read_regular(path).decode("utf-8")).get("settings")  # no link followed, no FIFO waited on
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, AttributeError):
        return
    if not isinstance(stored, dict):
        return
    now = json.loads(json.dumps(settings, default=str))  # tuples as the stored lists
    changed = [f"{name} {_shown_setting(stored[name])} -> {_shown_setting(value)}" for name, value in now.items()
               if name not in PLACE_SETTINGS and name in stored and stored[name] != value]
    if changed:
        print(f"amp-suite: warning: --resume plans this command's sweep, which differs from the one stored in "
              f"{directory} ({'; '.join(changed)}); give the first run's flags again to finish that one",
              file=sys.stderr)


def _shown_setting(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


# What the warning for an unusable environment.json says follows from it, per reader.
STANDS_IN = "this machine's environment stands in for it, and the report says so"
UNKNOWN_IN_COMPARISON = "its machine, versions and settings are unknown, and the comparison says so"


def stored_environment(directory: Path, *, warn: bool = True, consequence: str = STANDS_IN) -> dict[str, Any]:
    """A sweep's ``environment.json``; this machine's environment, with a warning (ending in ``consequence``),
    if it is unusable."""
    from amp_suite.machine.environment import host_environment

    path = Path(directory) / ENVIRONMENT_FILE
    problem = "is missing"
    if path.exists():
        try:
            from amp_suite.safe_files import read_regular

            environment = json.loads(read_regular(path).decode("utf-8"))  # no link followed, no FIFO waited on
            if isinstance(environment, dict):
                _drop_unusable_fields(path, environment, warn)
                return environment
            problem = "is not a JSON object"
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            problem = "is unreadable or truncated"
    if warn:
        print(f"amp-suite: warning: {path} {problem}; {consequence}", file=sys.stderr)
    environment = host_environment()
    # said in the report (and compare) too, not only on stderr: the machine and the date are not the sweep's
    environment["environment_substituted"] = f"{ENVIRONMENT_FILE} {problem}"
    environment["date"] = "unknown (not recorded)"
    return environment


def _drop_unusable_fields(path: Path, environment: dict[str, Any], warn: bool) -> None:
    from amp_suite.stored_values import clean_environment

    dropped = clean_environment(environment)
    if dropped and warn:
        print(f"amp-suite: warning: {path}: ignoring {'; '.join(dropped)}", file=sys.stderr)


def load_results(directory: str | Path, *, strict: bool = False,
                 missing_environment: str | None = STANDS_IN) -> tuple[list[CellResult], dict[str, Any]]:
    """The latest result of every cell in ``DIR/results.jsonl`` and the sweep's environment.

    The environment gains this machine's calibration when the sweep's has none
    (``amp-suite calibrate`` after the sweep).  Raises :class:`UsageError`
    when ``DIR`` holds no readable ``results.jsonl``; with ``strict``,
    :class:`StoredValueError` naming the first stored value a report cannot
    use (instead of dropping it with a warning).  ``missing_environment``: what the warning for an unusable
    ``environment.json`` says follows for the caller (None: no warning, for a caller that reads no environment).
    """
    from amp_suite.calibration.ceiling import attach_calibration
    from amp_suite.sweep.store import RESULTS_FILE, ResultStore

    if not str(directory).strip():
        raise UsageError(f"no sweep's output directory given ({str(directory)!r}); pass a sweep's output "
                         "directory")
    directory = Path(directory)
    store = ResultStore(directory)
    try:
        if os.path.lexists(directory) and not directory.is_dir():
            what = "a link that leads nowhere (or in a loop)" if directory.is_symlink() and not directory.exists() \
                else "not a directory"
            raise UsageError(f"{str(directory)[:300]!r} is {what}; pass a sweep's output directory")
        is_file, exists = store.path.is_file(), store.path.exists()
    except (OSError, ValueError) as exc:  # an over-long name, a NUL, an unreadable parent
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot look at {str(store.path)[:200]!r}: {reason}") from None
    if not is_file:
        if not exists and (directory / ENVIRONMENT_FILE).is_file():  # a sweep stopped before its first result
            raise UsageError(f"{str(store.path)!r} does not exist: no cell of the sweep in {str(directory)!r} "
                             "finished, so there is nothing to report (run it again, with --resume)")
        what = "is not a file" if exists else "does not exist"
        raise UsageError(f"{str(store.path)!r} {what}; pass a sweep's output directory (it holds {RESULTS_FILE})")
    try:
        contents = store.read()
    except OSError as exc:
        raise UsageError(f"cannot read {str(store.path)!r}: {exc.strerror or exc}") from None
    if strict and contents.dropped:
        raise StoredValueError(f"{store.path}: {contents.describe_dropped(limit=1)} (load(..., strict=False) "
                               "drops such values with a warning)")
    warn_skipped_lines(store, contents)
    environment = stored_environment(directory, warn=missing_environment is not None,
                                     consequence=missing_environment or STANDS_IN)
    attach_calibration(environment)
    latest = {result.key: result for result in contents.results}
    return list(latest.values()), environment
