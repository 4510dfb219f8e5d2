"""Exceptions with a meaning for the CLI and the runner."""

from __future__ import annotations

# The exit codes of every amp-suite command: success, cells that failed (or, for `env create`, a build
# that failed), bad input.  A command stopped by a signal exits 128 + the signal's number.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input from the user: the CLI prints one line and exits 2."""


class StoredValueError(UsageError):
    """A value read back from a sweep's files (a wrong type, an impossible or oversized value), named by file,
    line and field."""


class UnsupportedError(Exception):
    """The cell cannot run on this machine by design (tf32 on a CPU)."""


class FrameworkUnavailableError(Exception):
    """The framework's modules are not installed; the message names the extra."""


class DivergedError(Exception):
    """Training produced a NaN or infinite loss."""


class PluginError(Exception):
    """A plugin broke its hook contract (duplicate keys, missing answers)."""


# Longest message :func:`one_line` keeps.
ONE_LINE_CHARS = 1000


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most :data:`ONE_LINE_CHARS`) for a one-line report of ``exc``."""
    try:
        text = str(exc).strip().splitlines()
    except Exception:  # a message that cannot be made: the type alone describes it
        return f"{_type_name(exc)} (its message cannot be shown)"
    first = text[0] if text else ""
    if len(first) > ONE_LINE_CHARS:
        first = first[:ONE_LINE_CHARS] + f" [... {len(first) - ONE_LINE_CHARS} characters cut]"
    return f"{_type_name(exc)}: {first}" if first else _type_name(exc)


def message_line(exc: BaseException, *, last: bool = False, limit: int = 300) -> str:
    """The first (or, with ``last``, the last) non-blank line of ``exc``'s message, at most ``limit`` characters.

    Where the telling line sits depends on who wrote the message: Ray puts its
    summary first, a tool that failed under submitit its own complaint last.
    A message with no text gives the exception's type name.
    """
    try:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    except Exception:  # a message that cannot be made
        lines = []
    if not lines:
        return _type_name(exc)
    return (lines[-1] if last else lines[0])[:limit]


def _type_name(exc: BaseException) -> str:
    name = getattr(type(exc), "__name__", None)
    return name if isinstance(name, str) else "exception"


class StorageError(Exception):
    """The output directory stopped taking writes (full disk, read-only): the sweep stops."""


class SweepInterrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP: the sweep stops, keeps its finished cells, and reports them."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
