"""Progress inside a cell: the worker's step messages reach the host; logs stay readable."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

from amp_suite import progress
from amp_suite.records import CellResult, RunSpec


def test_step_messages_cross_a_pipe_from_another_process():
    read_fd, write_fd = os.pipe()
    code = ("from amp_suite import progress\n"
            "for step in range(1, 201):\n"
            "    progress.step_done(step, 200)\n")
    env = {**os.environ, progress.PROGRESS_FD_ENV: progress.progress_fd_value(write_fd)}
    received: list[tuple[int, int]] = []
    reader = threading.Thread(target=progress.read_messages, args=(read_fd, lambda d, t: received.append((d, t))))
    reader.start()
    child = subprocess.run([sys.executable, "-c", code], env=env, pass_fds=(write_fd,), timeout=60)
    os.close(write_fd)
    reader.join(10)
    assert child.returncode == 0
    assert received[-1] == (200, 200)  # the epoch's last step is always sent
    assert len(received) < 20  # throttled: not one message per step


def test_a_worker_without_a_progress_pipe_is_unaffected(monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_FD_ENV, raising=False)
    progress.step_done(1, 2)  # no pipe, no error


def _cell(epochs=2, steps=100):
    return SimpleNamespace(run=RunSpec(framework="f", workload="w", precision="fp32", steps=steps, epochs=epochs))


def test_not_a_tty_prints_a_line_at_most_every_few_seconds(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    show = progress.SweepProgress(stream, tty=False)
    show(1, 3, _cell(), None)
    for step in range(1, 101):  # one step per 0.1 s: 10 s for the first epoch
        clock[0] += 0.1
        show.step(step, 100)
    lines = stream.getvalue().splitlines()
    steps_lines = [line for line in lines if "steps/s" in line]
    assert 1 <= len(steps_lines) <= 2, lines
    assert "epoch 1/2" in steps_lines[0] and "left" in steps_lines[0] and "\r" not in stream.getvalue()
    result = CellResult(key="k", framework="f", workload="w", precision="fp32", repeat=0, status="ok",
                        metrics={"throughput": 10.0, "val_accuracy": 0.5}, config={"dataset": "mnist"},
                        wall_time_s=20.0)
    show(1, 3, _cell(), result)
    assert stream.getvalue().splitlines()[-1].endswith("sweep ETA ~40 s (2 cells left)")
    assert "kept from the last run" not in stream.getvalue()
    show(2, 3, _cell(), result)  # no start announced: a result --resume kept, said so, and not in the ETA
    assert stream.getvalue().splitlines()[-1].endswith(
        "(kept from the last run: --resume); sweep ETA ~20 s (1 cell left)")


def test_the_eta_leaves_out_the_cells_resume_keeps_later(monkeypatch):
    monkeypatch.setattr(progress.time, "monotonic", lambda: 1000.0)
    stream = io.StringIO()
    show = progress.SweepProgress(stream, tty=False)
    show.keeping({3, 5})  # of five cells, the third and fifth are kept
    result = CellResult(key="k", framework="f", workload="w", precision="fp32", repeat=0, status="ok",
                        metrics={"throughput": 10.0}, config={"dataset": "mnist"}, wall_time_s=30.0)
    show(1, 5, _cell(), None)
    show(1, 5, _cell(), result)
    assert stream.getvalue().splitlines()[-1].endswith("sweep ETA ~1m00s (2 cells left)"), stream.getvalue()


def test_rate_and_time_left():
    cell = progress.CellProgress(steps_per_epoch_cap=50, epochs=2)
    cell.update(1, 50)
    cell.first_at -= 10.0  # 10 s ago, at step 1
    cell.update(26, 50)
    assert 2.4 < cell.rate() < 2.6
    assert cell.text().startswith("step 26/100, epoch 1/2, 2.50 steps/s, ~30 s left")
    cell.update(3, 50)  # the second epoch began
    assert cell.steps_done() == 53


def test_a_cell_without_figures_names_its_log():
    stream = io.StringIO()
    show = progress.SweepProgress(stream, tty=False)
    for status, error in (("failed", "RuntimeError: boom"), ("unsupported", "UnsupportedError: no tf32")):
        show(1, 1, _cell(), None)
        show(1, 1, _cell(), CellResult(key="k", framework="f", workload="w", precision="fp32", repeat=0,
                                       status=status, error=error, metrics={"log": "out/logs/f__w__fp32__r0.log"}))
    failed, unsupported = stream.getvalue().splitlines()[1::2]
    assert failed.endswith("failed: RuntimeError: boom; log: out/logs/f__w__fp32__r0.log")
    assert unsupported.endswith("unsupported: UnsupportedError: no tf32")
