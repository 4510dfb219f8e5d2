"""The host's own ``measure`` plugin: peak resident memory of the worker.

On a CPU, the worker's peak resident set is the honest memory figure: it
counts what every framework allocates, whatever allocator it uses.  Linux
keeps the peak in ``VmHWM``; writing ``5`` to ``/proc/self/clear_refs``
resets it, so the worker can start the peak at model build time.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any

from amp_suite.markers import hookimpl


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux only)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def current_rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else None


def peak_rss_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@hookimpl
def reset_memory_peak() -> None:
    reset_peak_rss()


@hookimpl
def measure() -> dict[str, Any]:
    return {"peak_rss_bytes": peak_rss_bytes()}
