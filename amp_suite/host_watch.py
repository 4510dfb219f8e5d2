"""A child process of the host (a cell's worker, torchrun, a probe) ends when the host is gone.

The host names itself in :data:`HOST_PID_ENV` when it starts a child; the
child calls :func:`die_with_host_from_env` first thing.  This module imports
nothing of amp-suite, so the worker, the launchers and the probes' bootstrap
share it without importing each other.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# Environment variable naming the host's pid; a child ends itself when its parent is another.
HOST_PID_ENV = "AMP_SUITE_HOST_PID"
# Seconds between two checks that the host is still alive.
PARENT_POLL_S = 0.5
# prctl option: signal this process when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_host(host_pid: int) -> None:
    """End this process (and its process group) as soon as the host process is gone.

    On Linux the kernel sends SIGKILL when the parent dies (``PR_SET_PDEATHSIG``);
    everywhere a watcher thread compares the parent pid with the host's twice a
    second.  So even a SIGKILL of the host leaves no worker finishing its cell.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def orphaned() -> bool:
        return os.getppid() != host_pid

    def end() -> None:
        if os.getpgrp() == os.getpid():  # our own group: take its children along
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    if orphaned():  # the host died before the kernel was told
        end()

    def watch() -> None:
        while not orphaned():
            time.sleep(PARENT_POLL_S)
        end()

    threading.Thread(target=watch, name="amp-suite-parent-watch", daemon=True).start()


def die_with_host_from_env(environ: dict[str, str] | None = None) -> None:
    """Remove :data:`HOST_PID_ENV` from the environment and watch the host it names (a no-op without one).

    The variable is removed so that processes this one starts do not watch the
    host in its place: a launcher that starts workers names itself instead.
    """
    host_pid = (os.environ if environ is None else environ).pop(HOST_PID_ENV, "")
    if host_pid.isascii() and host_pid.isdigit():
        die_with_host(int(host_pid))
