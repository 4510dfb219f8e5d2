"""Start a command as a process tree amp-suite owns, and end the whole tree.

:func:`start` runs a command under :mod:`amp_suite.processes.supervisor`, in a
session of its own.  The supervisor owns every process the command starts,
detached ones included (on Linux it is a child subreaper), and SIGKILLs what
is left of the tree when the command exits; :func:`end` asks it to end the tree
now (SIGTERM), and kills its process group outright if it does not exit in
:data:`STOP_GRACE_S`.  The supervisor also ends the tree when its parent dies,
SIGKILL included (parent-death signal, and a watch on its parent's pid).

:func:`run` is :func:`subprocess.run` for such a tree: a time limit ends the
whole tree before :class:`subprocess.TimeoutExpired` is raised, so no helper
holding an output pipe open can stretch the wait, and none survives it.

Limits: without Linux's subreaper (macOS, other Unixes) the supervisor ends
its process group only; a process that leaves the group (``setsid``) survives
it there.  Windows is not supported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The supervisor, run as a script (it imports the standard library only).
SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
# Seconds the supervisor has to end its tree when asked, before its process group is killed outright.
STOP_GRACE_S = 6.0
ON_LINUX = sys.platform.startswith("linux")
# Exit code of a command that could not be started (the supervisor's, as a shell's).
CANNOT_START = 127


def supervised(command: Sequence[str]) -> list[str]:
    """``command`` run by a supervisor that this process is the parent of."""
    return [sys.executable, "-I", "-S", SUPERVISOR, str(os.getpid()), *command]


def start(command: Sequence[str], **popen_options: Any) -> subprocess.Popen:
    """:class:`subprocess.Popen` of ``command`` under a supervisor, in a new session.

    ``popen_options`` are :class:`subprocess.Popen`'s (pipes, ``pass_fds``,
    ``env``, ``cwd``, ``text``...); ``pass_fds`` reach the command unchanged.
    """
    return subprocess.Popen(supervised(command), start_new_session=True, **popen_options)


def ask_to_stop(process: subprocess.Popen) -> None:
    """Send the supervised command SIGTERM (through its supervisor), so it can stop in its own way.

    The tree still ends when the command exits; follow with :func:`end` if it does not.
    """
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            pass


def end(process: subprocess.Popen) -> None:
    """End ``process``'s whole tree and reap the supervisor (never raises for a process already gone)."""
    if ON_LINUX and process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    if process.poll() is None or not ON_LINUX:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    process.wait()


def run(command: Sequence[str], *, timeout: float | None, input: str | bytes | None = None,
        capture_output: bool = False, **popen_options: Any) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` of ``command`` as a supervised tree; a time limit or an interrupt ends the tree.

    Raises :class:`subprocess.TimeoutExpired` (with what the tree wrote) after
    ``timeout`` seconds, the tree already ended; :class:`OSError` when the
    supervisor cannot start.  A command that cannot be executed exits 127 with
    the reason on its stderr.
    """
    if capture_output:
        popen_options.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen_options["stdin"] = subprocess.PIPE
    with start(command, **popen_options) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            end(process)
            try:
                out, err = process.communicate(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:  # a process outside the tree holds a pipe (not on Linux)
                out, err = None, None
            raise subprocess.TimeoutExpired(list(command), timeout or 0.0, out, err) from None
        except BaseException:
            end(process)
            raise
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)
