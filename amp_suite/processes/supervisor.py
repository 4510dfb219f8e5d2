"""A process tree's supervisor: ``python -I -S supervisor.py PARENT_PID COMMAND...``.

It starts ``COMMAND`` and owns everything that command ever starts: on Linux
it is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a descendant whose
parent exits, one that called ``setsid`` or double-forked included, becomes
its child instead of init's.  SIGUSR1 is passed on to the command as SIGTERM
(a polite request to stop).  When the command exits, when this process is
told to stop (SIGTERM, SIGINT, SIGHUP), or when its own parent is gone
(``PR_SET_PDEATHSIG`` sends it SIGTERM; a thread also watches its parent's
pid), it sends SIGKILL to every descendant still running and reaps them, then
exits as the command did (its exit code, or killed by the same signal).

The command dies with the supervisor (``PR_SET_PDEATHSIG`` with SIGKILL, set
between fork and exec), and where the environment names the host's pid in
``AMP_SUITE_HOST_PID`` the supervisor names itself there instead, so a worker
watching its parent watches the supervisor.

Other platforms have no subreaper: there the supervisor ends its process group
only (a descendant that left the group survives) and notices its parent's
death by polling.

This file imports the standard library only and is run as a script, so it
starts in a few milliseconds and no plugin code ever runs in it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# prctl options (linux/prctl.h).
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# Environment variable naming the process a child of amp-suite watches (amp_suite.host_watch.HOST_PID_ENV).
HOST_PID_ENV = "AMP_SUITE_HOST_PID"
# Seconds between two checks that the parent is still alive (where no parent-death signal exists).
PARENT_POLL_S = 0.25
# Seconds the supervisor keeps killing and reaping a tree before it gives up (a process stuck in the kernel).
END_TREE_S = 5.0
# Exit code when the command cannot be started (as a shell's).
CANNOT_START = 127
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Sent to the supervisor: it sends the command SIGTERM, so the command can stop in its own way (a sweep
# keeps its finished cells and writes its report); the tree ends when the command exits.
ASK_TO_STOP = signal.SIGUSR1
ON_LINUX = sys.platform.startswith("linux")


class Stop(BaseException):
    """This supervisor was told to stop (or its parent is gone), by signal ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _prctl(option: int, value: int) -> bool:
    if not ON_LINUX:
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> pids of its running (not zombie) children, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """The running descendants of ``pid`` (Linux), parents before their children."""
    children = _children_map()
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def _reap_all() -> bool:
    """Reap every child that has exited (never blocks); True when this process has no child left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def end_tree() -> None:
    """SIGKILL every descendant, and reap, until this process has no child left (or :data:`END_TREE_S` passed).

    A descendant that no longer runs is not yet gone: a killed process whose
    main thread is a zombie is not reaped until its other threads have exited.
    Leaving before it is reaped would hand it to init, which reaps orphans only
    now and then, so its pid would still answer after the sweep ended.
    """
    if not ON_LINUX:  # no subreaper: the process group is all this supervisor can find
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.killpg(os.getpgrp(), signal.SIGTERM)
        except OSError:
            pass
        time.sleep(0.05)
        _reap_all()
        return
    me = os.getpid()
    deadline = time.monotonic() + END_TREE_S
    while time.monotonic() < deadline:
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if _reap_all():
            return
        time.sleep(0.005)


def _exit_like(status: int) -> None:
    """Exit as a child with wait status ``status`` did: its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # never a core file of this process
        except (ImportError, ValueError, OSError):
            pass
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal whose default action is not to end the process
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _start(command: list[str], env: dict[str, str]) -> int:
    """Fork and exec ``command``; the child dies with this process."""
    me = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: the supervisor's handlers and mask must not reach the command
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        for name in ("SIGPIPE", "SIGXFSZ"):  # Python ignores these; a command expects the default
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        signal.signal(ASK_TO_STOP, signal.SIG_DFL)
        if os.getppid() != me:  # the supervisor died before the kernel was told
            os._exit(CANNOT_START)
        os.execvpe(command[0], command, env)
    except BaseException as exc:  # noqa: BLE001 - the forked child must never return into the supervisor
        try:
            os.write(2, f"amp-suite: cannot start {command[0]!r}: {exc}\n".encode("utf-8", "replace"))
        except OSError:
            pass
    os._exit(CANNOT_START)


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop(signum)


def _forwarder(child: int):  # noqa: ANN202 - a signal handler
    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(child, signal.SIGTERM)
        except OSError:
            pass

    return forward


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> None:
    parent, command = int(argv[0]), argv[1:]
    signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP_SIGNALS, ASK_TO_STOP))
    for number in STOP_SIGNALS:
        signal.signal(number, _raise_stop)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:  # the parent died before the kernel was told
        os._exit(1)
    env = dict(os.environ)
    if HOST_PID_ENV in env:
        env[HOST_PID_ENV] = str(os.getpid())
    try:
        child = _start(command, env)
        signal.signal(ASK_TO_STOP, _forwarder(child))
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (*STOP_SIGNALS, ASK_TO_STOP))
        while True:
            pid, status = os.waitpid(-1, 0)  # reaps orphans handed to this subreaper as well
            if pid == child:
                break
    except Stop as stop:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        end_tree()
        os._exit(128 + stop.signum)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    end_tree()
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
