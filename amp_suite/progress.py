"""Progress of a sweep and of the cell running now, on the terminal.

Two halves:

* **In the worker**, :func:`step_done` is called after every measurement
  window (by the worker's epoch loop: never inside a timed window).  When the runner gave the
  worker a progress pipe (``AMP_SUITE_PROGRESS_FD``: its file descriptor and
  the pipe's inode, so a value inherited from elsewhere is ignored),
  a JSON line ``{"done": 120, "total": 500, "t": <monotonic s>}`` goes down
  it at most every :data:`SEND_INTERVAL_S` seconds and at the last step of
  each epoch.  The pipe is non-blocking: a step never waits for the
  terminal, and a message that does not fit is dropped.  Plugins need not
  know about any of this; inline cells report through :func:`inline_sink`.
* **In the host**, :class:`SweepProgress` prints a line per cell (with the
  sweep's ETA) and, while a cell runs, its steps done, rate and time left:
  rewritten in place twice a second on a TTY, a plain line at most every
  :data:`LOG_INTERVAL_S` seconds otherwise, so logs stay readable.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

PROGRESS_FD_ENV = "AMP_SUITE_PROGRESS_FD"
# Seconds between two messages from a worker (the last step of an epoch is always sent).
SEND_INTERVAL_S = 0.5
# Seconds between two progress lines when stderr is not a terminal.
LOG_INTERVAL_S = 5.0
# Seconds between two rewrites of the progress line on a terminal.
TTY_INTERVAL_S = 0.5
# Longest progress message read from a worker; longer lines are ignored.
MESSAGE_BYTES = 512


# --- worker side -------------------------------------------------------------

_state: dict[str, Any] = {"fd": None, "checked": False, "last": 0.0}
_inline: list[Callable[[int, int], None]] = []


def progress_fd_value(fd: int) -> str:
    """What :data:`PROGRESS_FD_ENV` says for the pipe end ``fd``: ``FD:INODE``, so the worker knows it is its own."""
    return f"{fd}:{os.fstat(fd).st_ino}"


def _own_pipe(text: str) -> int | None:
    """The descriptor :data:`PROGRESS_FD_ENV` names when it is the very pipe the runner made (else None).

    A value inherited from elsewhere (a user's shell, an outer amp-suite) names
    a descriptor that is not that pipe: it is ignored, never written to.
    """
    fd_text, _, inode = text.partition(":")
    if not (fd_text.isdigit() and inode.isdigit()):
        return None
    try:
        found = os.fstat(int(fd_text))
    except (OSError, ValueError, OverflowError):
        return None
    return int(fd_text) if stat.S_ISFIFO(found.st_mode) and found.st_ino == int(inode) else None


def _progress_fd() -> int | None:
    if not _state["checked"]:
        _state["checked"] = True
        fd = _own_pipe(os.environ.pop(PROGRESS_FD_ENV, ""))
        if fd is not None:
            try:
                os.set_inheritable(fd, False)  # processes the framework starts must not hold it open
                os.set_blocking(fd, False)
                _state["fd"] = fd
            except OSError:
                _state["fd"] = None
    return _state["fd"]


def step_done(done: int, total: int) -> None:
    """Tell the host that ``done`` of this epoch's ``total`` steps are finished.

    Costs a clock read per step; sends at most one message per
    :data:`SEND_INTERVAL_S` seconds (and always the epoch's last step).
    Never raises, never blocks.
    """
    now = time.monotonic()
    if done < total and now - _state["last"] < SEND_INTERVAL_S:
        return
    _state["last"] = now
    for sink in _inline:
        try:
            sink(done, total)
        except Exception:  # progress must never cost a result
            pass
    fd = _progress_fd()
    if fd is None:
        return
    try:
        os.write(fd, (json.dumps({"done": int(done), "total": int(total), "t": now}) + "\n").encode())
    except OSError:  # a full pipe (the host is busy) or a closed one: drop the message
        pass


@contextmanager
def inline_sink(callback: Callable[[int, int], None]):
    """Route :func:`step_done` to ``callback`` while an inline cell runs in this process."""
    _inline.append(callback)
    _state["last"] = 0.0
    try:
        yield
    finally:
        _inline.remove(callback)


# --- host side ---------------------------------------------------------------


def read_messages(fd: int, on_message: Callable[[int, int], None]) -> None:
    """Read progress lines from ``fd`` until it closes, calling ``on_message(done, total)`` for each."""
    buffer = b""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(4096):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > MESSAGE_BYTES:
                buffer = b""
            for line in lines:
                try:
                    message = json.loads(line)
                    done, total = int(message["done"]), int(message["total"])
                except (ValueError, KeyError, TypeError):
                    continue
                try:
                    on_message(done, total)
                except Exception:
                    pass


def duration_text(seconds: float) -> str:
    """``42 s``, ``3m05s``, ``1h02m``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


@dataclass
class CellProgress:
    """Steps of the running cell, from the worker's messages."""

    steps_per_epoch_cap: int
    epochs: int
    started: float = field(default_factory=time.monotonic)
    epoch: int = 0
    done: int = 0
    total: int = 0
    first_at: float | None = None
    first_steps: int = 0

    def update(self, done: int, total: int) -> None:
        if done < self.done:  # a new epoch started
            self.epoch += 1
        self.done, self.total = done, total
        steps = self.steps_done()
        if self.first_at is None:  # rate from the first message on: compilation is not a rate
            self.first_at, self.first_steps = time.monotonic(), steps

    def steps_done(self) -> int:
        return self.epoch * self.total + self.done

    def steps_total(self) -> int:
        return self.epochs * (self.total or self.steps_per_epoch_cap)

    def rate(self) -> float | None:
        if self.first_at is None:
            return None
        elapsed = time.monotonic() - self.first_at
        steps = self.steps_done() - self.first_steps
        return steps / elapsed if elapsed > 0 and steps > 0 else None

    def text(self) -> str:
        rate = self.rate()
        left = (self.steps_total() - self.steps_done()) / rate if rate else None
        parts = [f"step {self.steps_done()}/{self.steps_total()}"]
        if self.epochs > 1:
            parts.append(f"epoch {min(self.epoch + 1, self.epochs)}/{self.epochs}")
        if rate:
            parts.append(f"{rate:.2f} steps/s")
        if left is not None:
            parts.append(f"~{duration_text(left)} left")
        return ", ".join(parts)


class SweepProgress:
    """Prints the sweep's progress: a line per cell with the sweep's ETA, and steps inside a cell.

    Call it as the runner's ``progress(index, total, cell, result)`` callback;
    :meth:`step` receives the running cell's step messages.
    """

    def __init__(self, stream: IO[str] | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = TTY_INTERVAL_S if self.tty else LOG_INTERVAL_S
        self.lock = threading.Lock()
        self.cell: CellProgress | None = None
        self.label = ""
        self.last_print = 0.0
        self.pending_line = False
        self.durations: dict[tuple[str, str, str], list[float]] = {}
        self.ran: list[float] = []
        self.kept: set[int] = set()

    def keeping(self, indexes: set[int]) -> None:
        """The positions (1-based) of the cells ``--resume`` keeps: the ETA does not count them."""
        self.kept = set(indexes)

    # the runner's callback
    def __call__(self, index: int, total: int, cell, result) -> None:
        run = cell.run
        devices = f" x{run.devices}" if run.devices != 1 else ""
        pool = f" on {run.pool}" if run.pool else ""
        mode = f" {run.mode}" if getattr(run, "mode", "") else ""
        batch = f" batch {run.batch_size}" if getattr(run, "batch_axis", False) else ""
        seed = f" seed {run.seed}" if getattr(run, "seed_axis", False) else ""
        label = (f"[{index}/{total}] {run.workload} {run.label}{pool} {run.precision}{mode}{batch}{devices}{seed} "
                 f"r{run.repeat}")
        with self.lock:
            self._clear()
            if result is None:
                self.cell = CellProgress(run.steps, run.epochs)
                self.label = label
                self.last_print = time.monotonic()
                self._print(f"{label} ...")
                return
            resumed = self.cell is None or self.label != label  # a stored result: no start was announced
            self.cell = None
            if not resumed:
                self.durations.setdefault((run.workload, run.label, run.precision), []).append(
                    result.wall_time_s)
                self.ran.append(result.wall_time_s)
            kept = " (kept from the last run: --resume)" if resumed else ""
            self._print(_result_text(label, result) + kept + self._eta(index, total, cell))

    def _eta(self, index: int, total: int, cell) -> str:
        remaining = sum(1 for later in range(index + 1, total + 1) if later not in self.kept)
        if remaining <= 0 or not self.ran:
            return ""
        mean = sum(self.ran) / len(self.ran)
        cells = "cell" if remaining == 1 else "cells"
        return f"; sweep ETA ~{duration_text(mean * remaining)} ({remaining} {cells} left)"

    def step(self, done: int, total: int) -> None:
        """A step message of the running cell."""
        with self.lock:
            if self.cell is None:
                return
            self.cell.update(done, total)
            now = time.monotonic()
            last_step = self.cell.steps_done() >= self.cell.steps_total()
            if now - self.last_print < self.interval or last_step:
                return
            self.last_print = now
            text = f"{self.label} {self.cell.text()}"
            if self.tty:
                self.stream.write("\r\x1b[2K" + text)
                self.stream.flush()
                self.pending_line = True
            else:
                self._print(text)

    def _clear(self) -> None:
        if self.pending_line:
            self.stream.write("\r\x1b[2K")
            self.pending_line = False

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def _result_text(label: str, result) -> str:
    if result.status != "ok":
        log = (result.metrics or {}).get("log")
        # unsupported is by design (tf32 on a CPU): its error says all there is
        where = f"; log: {log}" if log and result.status != "unsupported" else ""
        return f"{label} {result.status}: {result.error}{where}"
    m = result.metrics
    accuracy = m.get("val_accuracy")
    synthetic = (result.config or {}).get("dataset") == "synthetic" or m.get("dataset_substituted")
    acc_text = "n/a (synthetic data)" if synthetic or accuracy is None else f"{accuracy:.3f}"
    bits = m.get("val_bits_per_char")
    if m.get("tokens_per_s") is not None and isinstance(bits, (int, float)):  # a token workload (language model)
        return (f"{label} ok: {m['tokens_per_s']:,.0f} tokens/s, val {bits:.3f} bits/char, next-token acc "
                f"{acc_text} ({result.wall_time_s:.1f} s)")
    return f"{label} ok: {m.get('throughput', 0):,.0f} img/s, val acc {acc_text} ({result.wall_time_s:.1f} s)"
