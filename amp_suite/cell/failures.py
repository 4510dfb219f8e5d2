"""What a failed cell's exception means: its status (oom, unsupported, unavailable, diverged, failed) and its log.

A plugin's exception keeps its causes: an out-of-memory error wrapped in a
plugin's own error still makes the cell ``oom``.  The whole traceback goes to
the cell's log; its innermost frames go into the result.
"""

from __future__ import annotations

import errno
import sys
from typing import TextIO

from amp_suite.errors import DivergedError, FrameworkUnavailableError, UnsupportedError
from amp_suite.records import CellResult

# Exception names (any module) that mean the device or host ran out of memory.
OOM_EXCEPTION_NAMES = ("OutOfMemoryError", "ResourceExhaustedError", "MemoryError")
# Messages of out-of-memory errors that come as a generic type: PyTorch's CPU
# allocator ("DefaultCPUAllocator: can't allocate memory"), XLA's
# RESOURCE_EXHAUSTED, TensorFlow's "OOM when allocating", C++'s std::bad_alloc,
# and an address-space limit (ENOMEM: "Cannot allocate memory").
OOM_MESSAGES = (
    "RESOURCE_EXHAUSTED", "out of memory", "Out of memory", "OOM when allocating",
    "can't allocate memory", "Cannot allocate memory", "Unable to allocate", "std::bad_alloc",
    "failed to allocate memory",
)
# Characters of a failure's traceback kept in its result (the innermost frames); the log holds all of it.
TRACEBACK_CHARS = 4000


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, innermost last."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _is_oom(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names.intersection(OOM_EXCEPTION_NAMES):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    text = str(exc)[:4000]
    return any(message in text for message in OOM_MESSAGES)


def classify_exception(exc: BaseException) -> str:
    """The cell status an exception stands for (its causes count too: a plugin's OOM stays oom)."""
    chain = _chain(exc)
    for kind, status in ((UnsupportedError, "unsupported"), (FrameworkUnavailableError, "unavailable"),
                         (DivergedError, "diverged")):
        if isinstance(exc, kind):
            return status
    if any(_is_oom(link) for link in chain):
        return "oom"
    return "failed"


def write_failure(log: TextIO, result: CellResult, trace: str) -> None:
    """The cell's status, its one-line error and its whole traceback, appended to ``log`` (never raises)."""
    try:
        sys.stdout.flush()  # what the plugin printed comes before its traceback
    except (OSError, ValueError):
        pass
    try:
        log.write(f"amp-suite worker: cell {result.key} {result.status}: {result.error}\n{trace}")
        log.flush()
    except (OSError, ValueError):
        pass
