"""Signals that stop a command the way Ctrl-C does, and the exit code of each."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from amp_suite.errors import SweepInterrupted

# Signals that stop a sweep the way Ctrl-C does.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _exit_code_for(signum: int) -> int:
    """The shell's code for a process ended by ``signum`` (130 for Ctrl-C)."""
    return 128 + signum


@contextmanager
def _stop_signals_interrupt() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`SweepInterrupted` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise SweepInterrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
