"""Faults of processes, plugins and pipes a sweep must survive (issue 39, part B; issue 45's "no orphans").

Each test names the defect it reproduces in its docstring; its assertions are the fixed behaviour.
Plugins that misbehave are small modules written into the test's folder and loaded with ``-p``
beside the fake framework (``fakefw``); every test keeps its timeouts tiny.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from processes import alive
from suite_cli import REPO, run_cli, tiny_config_file

ON_LINUX = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not ON_LINUX, reason="the subreaper is Linux's")


# How long a process the suite expects to end may take: on an idle machine it ends within a second; on 2 cores that
# the other xdist lane and its framework servers keep busy, a SIGKILLed host's worker and detached child once took
# over 5 s to go.  A survivor outlives any bound (the rogue children sleep 120 s).
END_WITHIN_S = 30


def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.02)


def _plugin(folder: Path, name: str, body: str) -> dict[str, str]:
    """Write plugin module ``name`` into ``folder``; the environment that lets ``-p name`` find it."""
    (folder / f"{name}.py").write_text("from amp_suite import hookimpl\n" + textwrap.dedent(body))
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def _one_cell(folder: Path, *extra: str) -> list[str]:
    config = tiny_config_file(folder)
    return ["run", "--config", str(config), "-p", "fakefw", "--precisions", "fp32", *extra]


# A measure hook that leaves a child behind: forked, or detached with setsid and a double fork.
LEAVES_A_CHILD = """
import os, time

@hookimpl
def measure(run, model, device):
    pidfile = os.environ["ROGUE_PIDFILE"]
    if os.fork() == 0:
        if os.environ.get("ROGUE_DETACH"):
            os.setsid()
            if os.fork():
                os._exit(0)
        with open(pidfile, "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(120)
        os._exit(0)
    while not os.path.exists(pidfile) or not open(pidfile).read():
        time.sleep(0.01)
    return {"rogue_figure": 1}
"""


@pytest.mark.parametrize("detach", ["", "1"], ids=["forked", "setsid-double-fork"])
def test_a_child_a_plugin_leaves_behind_ends_with_its_cell_and_the_cell_stays_ok(tmp_path, clean_fake_env, detach):
    """Defect: a child forked by a plugin hook (even one that called setsid) outlived the run, and the cell was stored as failed."""
    env = _plugin(tmp_path, "rogue_child", LEAVES_A_CHILD)
    pidfile = tmp_path / "child.pid"
    done = run_cli(*_one_cell(tmp_path, "-p", "rogue_child"), "--timeout", "60",
                   env={**env, "ROGUE_PIDFILE": str(pidfile), "ROGUE_DETACH": detach}, timeout=120)
    assert done.returncode == 0, done.stderr
    [row] = _rows(tmp_path / "out")
    assert row["status"] == "ok", row.get("error")
    assert row["metrics"]["rogue_figure"] == 1
    child = int(pidfile.read_text())
    _wait(lambda: not alive(child), END_WITHIN_S, f"the end of the plugin's child {child}")


# A stage_batches hook (the worker calls it before training) that starts a detached child: setsid, double fork.
DETACHES_A_CHILD = """
import os, time

@hookimpl
def stage_batches(run, model, batches):
    pidfile = os.environ["ROGUE_PIDFILE"]
    if not os.path.exists(pidfile) and os.fork() == 0:
        os.setsid()
        if os.fork():
            os._exit(0)
        with open(pidfile, "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(120)
        os._exit(0)
    while not os.path.exists(pidfile) or not open(pidfile).read():
        time.sleep(0.01)
    return None
"""


@linux_only
def test_a_sigkilled_host_takes_its_workers_detached_children_along(tmp_path, clean_fake_env):
    """Defect: a child a cell detached (setsid) survived its host; now SIGKILL of `amp-suite run` ends the whole tree."""
    env = _plugin(tmp_path, "rogue_detach", DETACHES_A_CHILD)
    pidfile, worker_pidfile = tmp_path / "child.pid", tmp_path / "worker.pid"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "amp_suite", *_one_cell(tmp_path, "-p", "rogue_detach")],
        env={**os.environ, **env, "ROGUE_PIDFILE": str(pidfile), "FAKEFW_MODE": "gate",
             "FAKEFW_PIDFILE": str(worker_pidfile), "FAKEFW_GATE": str(tmp_path / "never")},
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: worker_pidfile.exists() and worker_pidfile.read_text(), 60, "the worker's start")
        _wait(lambda: pidfile.exists() and pidfile.read_text(), 10, "the detached child's start")
        worker, child = int(worker_pidfile.read_text()), int(pidfile.read_text())
        assert alive(worker) and alive(child)
        sweep.kill()
        sweep.wait()
        _wait(lambda: not alive(worker) and not alive(child), END_WITHIN_S,
              "the end of the worker and its detached child")
    finally:
        sweep.kill()
        sweep.wait()


@linux_only
def test_a_cell_time_limit_ends_its_whole_tree(tmp_path, clean_fake_env):
    """Defect: a timeout ended only the worker's process group; a detached child of the cell outlived it."""
    env = _plugin(tmp_path, "rogue_detach", DETACHES_A_CHILD)
    pidfile = tmp_path / "child.pid"
    done = run_cli(*_one_cell(tmp_path, "-p", "rogue_detach"), "--timeout", "3",
                   env={**env, "ROGUE_PIDFILE": str(pidfile), "FAKEFW_MODE": "hang"}, timeout=120)
    assert done.returncode != 0
    [row] = _rows(tmp_path / "out")
    assert row["status"] == "timeout", row.get("error")
    _wait(lambda: not alive(int(pidfile.read_text())), END_WITHIN_S, "the end of the cell's detached child")


# Output a supervised command's detached grandchild writes before it sleeps: its pid.
GRANDCHILD_HOLDS_THE_PIPE = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        time.sleep(120)
    os._exit(0)
time.sleep(float(sys.argv[1]))
"""


@linux_only
def test_a_helper_time_limit_ends_the_tree_and_returns_on_time(tmp_path):
    """Defect: a helper's time limit (subprocess.run) ended only the direct child, and a grandchild holding its pipe made the wait last as long as the grandchild."""
    from amp_suite.processes import tree

    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        tree.run([sys.executable, "-c", GRANDCHILD_HOLDS_THE_PIPE, "60"], timeout=1.0, capture_output=True,
                 text=True)
    assert time.monotonic() - started < 10
    grandchild = int(raised.value.stdout.split()[0])
    _wait(lambda: not alive(grandchild), END_WITHIN_S, "the end of the detached grandchild")
    # a command that exits at once: its detached grandchild is ended, the pipe closes, the answer comes back
    done = tree.run([sys.executable, "-c", GRANDCHILD_HOLDS_THE_PIPE, "0"], timeout=30, capture_output=True,
                    text=True)
    assert done.returncode == 0
    _wait(lambda: not alive(int(done.stdout.split()[0])), END_WITHIN_S, "the end of the detached grandchild")


def test_the_supervisor_exits_as_its_command_did():
    """The supervisor between amp-suite and a command is invisible: the command's exit code or signal comes back."""
    from amp_suite.processes import tree

    assert tree.run([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=30).returncode == 3
    killed = tree.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout=30)
    assert killed.returncode == -signal.SIGKILL
    missing = tree.run(["/nonexistent/program"], timeout=30, capture_output=True, text=True)
    assert missing.returncode == tree.CANNOT_START and "/nonexistent/program" in missing.stderr


# A supervisor ending its tree while its child no longer shows as running but is not yet reapable: a killed
# multi-threaded process looks so while its threads exit (its main thread a zombie). Run in a process of its own,
# as the supervisor reaps every child of the process it runs in.
UNREAPABLE_CHILD = """
import os, time
from amp_suite.processes import supervisor

child = os.fork()
if child == 0:
    time.sleep(0.3)
    os._exit(0)
supervisor.descendants = lambda pid: []
supervisor.end_tree()
try:
    os.waitpid(child, os.WNOHANG)
except ChildProcessError:
    print("reaped")
else:
    print("left to init")
"""


@linux_only
def test_the_supervisor_leaves_only_when_it_has_reaped_every_child():
    """Init reaps orphans only now and then (here every 2 s or so): a child the supervisor left unreaped would
    still answer to its pid after the sweep that ran it had ended."""
    done = subprocess.run([sys.executable, "-c", UNREAPABLE_CHILD], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert done.stdout.split() == ["reaped"], done.stderr


# A probe (doctor) that starts a detached child, writes the child's pid, and hangs.
HANGING_PROBE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    with open(os.environ["ROGUE_PIDFILE"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


@pytest.fixture
def hanging_probe(tmp_path, monkeypatch):
    """A probe module ``hanging_probe`` that starts a child and hangs; yields the file its child's pid lands in,
    and afterwards checks that the child did not outlive the probe."""
    (tmp_path / "hanging_probe.py").write_text(HANGING_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("ROGUE_PIDFILE", str(pidfile))
    yield pidfile
    _wait(lambda: pidfile.exists() and pidfile.read_text(), 5, "the probe's child pid")
    _wait(lambda: not alive(int(pidfile.read_text())), END_WITHIN_S, "the end of the probe's child")


@linux_only
def test_a_doctor_probe_past_its_timeout_leaves_no_orphan(hanging_probe):
    """Defect: `doctor --timeout` ended the probe but left the probe's child running."""
    import dataclasses

    from amp_suite.doctor import runner
    from fakefw import framework_info

    started = time.monotonic()
    with pytest.raises(runner.ProbeError, match="no answer within 1 s"):
        runner.subprocess_probe(dataclasses.replace(framework_info(), doctor_probe="hanging_probe"), "cpu", 1.0)
    assert time.monotonic() - started < 10


def test_a_hanging_environment_interpreter_costs_the_sweeps_timeout_not_60_s(tmp_path):
    """Defect: an environment's interpreter that hangs cost a fixed 60 s whatever --timeout said."""
    from amp_suite.config.environments import EnvironmentSpec
    from amp_suite.envs.placement import suite_missing

    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nsleep 120\n")
    python.chmod(0o755)
    started = time.monotonic()
    problem = suite_missing(EnvironmentSpec(name="mine", framework="fake", python=str(python)), 1.0)
    assert time.monotonic() - started < 10
    assert problem == f"environment 'mine': its interpreter {python} did not answer within 1 s"


# A stand-in for nvidia-smi that hangs after starting a child (the pid goes to ROGUE_PIDFILE, one per call).
HANGING_SMI = """#!/bin/sh
sleep 120 &
echo $! >> "$ROGUE_PIDFILE"
sleep 120
"""


@linux_only
def test_a_hanging_nvidia_smi_costs_one_time_limit_and_leaves_no_orphan(tmp_path, monkeypatch):
    """Defect: a hanging nvidia-smi made a one-cell sweep take 167 s (20 s per call) and left 8 orphans."""
    from amp_suite.machine import devices, environment

    smi = tmp_path / "nvidia-smi"
    smi.write_text(HANGING_SMI)
    smi.chmod(0o755)
    pidfile = tmp_path / "children.pid"
    monkeypatch.setenv("ROGUE_PIDFILE", str(pidfile))
    monkeypatch.setenv(devices.FAKE_SMI_ENV, str(smi))
    monkeypatch.delenv(devices.SMI_HUNG_ENV, raising=False)
    monkeypatch.setattr(devices, "SMI_TIMEOUT_S", 1.0)
    started = time.monotonic()
    assert devices.detect_nvidia().gpus == ()
    assert environment.mig_layout(str(smi)) == ({}, {})
    assert time.monotonic() - started < 6  # one time limit: the later calls skip the hung program
    assert os.environ[devices.SMI_HUNG_ENV] == str(smi)  # and the workers this process starts skip it too
    children = [int(line) for line in pidfile.read_text().split()]
    assert len(children) == 1
    _wait(lambda: not alive(children[0]), END_WITHIN_S, "the end of nvidia-smi's child")


# An acceptance-like parent: runs a gated one-cell sweep through the acceptance's command runner.
ACCEPTANCE_PARENT = """
import sys
from amp_suite.doctor.acceptance_run import run_supervised_command
run_supervised_command(sys.argv[1:], 120, program=[sys.executable, "-m", "amp_suite"])
"""


@linux_only
def test_a_sigkilled_acceptance_leaves_no_sweep_running(tmp_path, clean_fake_env):
    """Defect (issue 45): the acceptance started its sweeps in their own session, so SIGKILL of the acceptance left them running."""
    worker_pidfile = tmp_path / "worker.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", ACCEPTANCE_PARENT, *_one_cell(tmp_path)],
        env={**os.environ, "FAKEFW_MODE": "gate", "FAKEFW_PIDFILE": str(worker_pidfile),
             "FAKEFW_GATE": str(tmp_path / "never")}, cwd=REPO)
    try:
        _wait(lambda: worker_pidfile.exists() and worker_pidfile.read_text(), 60, "the worker's start")
        worker = int(worker_pidfile.read_text())
        parent.kill()
        parent.wait()
        _wait(lambda: not alive(worker), END_WITHIN_S, "the end of the sweep the acceptance started")
    finally:
        parent.kill()
        parent.wait()


# One misbehaving figure per precision: an int of 2**80 (from measure and from train_epoch's extra), a memory
# figure as text, SystemExit.
BAD_FIGURES = """
@hookimpl(wrapper=True)
def train_epoch(run, model, staged, epoch):
    answer = yield
    if run.precision == "fp32":
        answer.extra["huge_extra"] = 2**80
    return answer

@hookimpl
def measure(run, model, device):
    if run.precision == "fp32":
        return {"huge_count": 2**80, "fine": 1}
    if run.precision == "amp_fp16":
        return {"device_peak_memory_bytes": "lots", "fine": 1}
    raise SystemExit(0)
"""


def test_bad_figures_are_left_out_naming_plugin_and_key_and_a_plugin_exit_is_its_failure(tmp_path, clean_fake_env):
    """Defect: an int of 2**80 from measure (or EpochResult.extra) made an ok cell 'worker exited with code 0 and no result'; a non-numeric memory figure failed the cell naming neither plugin nor key; SystemExit from a hook ended the worker."""
    env = _plugin(tmp_path, "bad_figures", BAD_FIGURES)
    config = tiny_config_file(tmp_path)
    done = run_cli("run", "--config", str(config), "-p", "fakefw", "-p", "bad_figures", env=env, timeout=120)
    rows = {row["precision"]: row for row in _rows(tmp_path / "out")}
    for precision, key in (("fp32", "huge_count"), ("amp_fp16", "device_peak_memory_bytes")):
        row = rows[precision]
        assert row["status"] == "ok", row.get("error")
        assert row["metrics"]["fine"] == 1 and key not in row["metrics"]
        assert any(f"plugin 'bad_figures': measure key {key!r}" in flag for flag in row["metrics"]["measurement_flags"])
    assert "an integer of 81 bits" in " ".join(rows["fp32"]["metrics"]["measurement_flags"])
    assert "huge_extra" not in rows["fp32"]["metrics"]
    assert any("EpochResult.extra key 'huge_extra' is an integer of 81 bits" in flag
               for flag in rows["fp32"]["metrics"]["measurement_flags"])
    assert rows["amp_bf16"]["status"] == "failed"
    assert rows["amp_bf16"]["error"] == ("PluginError: plugin 'bad_figures': measure raised SystemExit(0); a plugin "
                                         "may not end the program")
    assert (tmp_path / "out" / "report.md").exists(), done.stderr


def test_a_plugin_keyboard_interrupt_in_the_host_is_its_failure(monkeypatch):
    """Defect: KeyboardInterrupt raised by a plugin hook ended the command as if the user had pressed Ctrl-C."""
    from amp_suite.errors import PluginError, SweepInterrupted
    from amp_suite.plugins.host import contained

    with pytest.raises(PluginError, match="plugin 'p': train_epoch raised KeyboardInterrupt; a plugin may not end"):
        with contained("p", "train_epoch"):
            raise KeyboardInterrupt
    with pytest.raises(SweepInterrupted):  # the user's Ctrl-C (as the host's signal handler raises it) passes
        with contained("p", "train_epoch"):
            raise SweepInterrupted(signal.SIGINT)


EXITING_REPORTER = """
import sys

@hookimpl
def write_report(results, out_dir, environment, sections):
    sys.exit()
"""


def test_a_reporter_that_calls_sys_exit_is_a_failed_reporter(tmp_path, clean_fake_env):
    """Defect: a reporter plugin calling sys.exit() ended the run silently with exit 0 and no report."""
    env = _plugin(tmp_path, "exiting_reporter", EXITING_REPORTER)
    done = run_cli(*_one_cell(tmp_path, "-p", "exiting_reporter"), env=env, timeout=120)
    assert "reporter 'exiting_reporter' failed: write_report raised SystemExit(None); a plugin may not end" in done.stderr
    assert done.returncode != 0
    assert (tmp_path / "out" / "report.md").exists()  # the other reporters still wrote


def test_a_closed_output_pipe_never_stops_a_sweep(tmp_path, clean_fake_env):
    """Defect: `amp-suite run ... | head -1` died with BrokenPipeError after the first cell; no report was written."""
    config = tiny_config_file(tmp_path)
    sweep = subprocess.Popen([sys.executable, "-m", "amp_suite", "run", "--config", str(config), "-p", "fakefw"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert sweep.stderr is not None and sweep.stdout is not None
    sweep.stderr.readline()  # as `2>&1 | head -1` does: one line, then both pipes closed
    sweep.stderr.close()
    sweep.stdout.close()
    assert sweep.wait(timeout=120) == 0
    assert [row["status"] for row in _rows(tmp_path / "out")] == ["ok", "ok", "ok"]
    assert (tmp_path / "out" / "report.md").exists()


@pytest.mark.parametrize("command", [["list"], ["compare", "A", "A"]], ids=["list", "compare"])
def test_list_and_compare_into_a_closed_pipe_exit_quietly(tmp_path, command):
    """Defect: `amp-suite list | head -1` and `compare ... | head -1` ended with a BrokenPipeError traceback."""
    if command[0] == "compare":
        out = tmp_path / "A"
        out.mkdir()
        rows = [{"key": f"fake/tiny/{p}/r0", "framework": "fake", "workload": "tiny", "precision": p, "repeat": 0,
                 "status": "ok", "metrics": {"throughput": 100.0 + i}} for i, p in enumerate(["fp32", "amp_fp16"])]
        (out / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        command = ["compare", str(out), str(out)]
    shown = subprocess.Popen([sys.executable, "-m", "amp_suite", *command], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert shown.stdout is not None and shown.stderr is not None
    shown.stdout.close()  # the reader is gone before the command writes (its output is flushed at exit)
    error = shown.stderr.read().decode()
    assert shown.wait(timeout=60) == 0, error
    assert "Traceback" not in error and "BrokenPipe" not in error


def _listener(answer: bytes | None):
    """A TCP server on a free port of 127.0.0.1 that accepts, reads, and answers ``answer`` (None: never answers)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            connection.recv(1024)
            if answer is not None:
                connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"], ids=["silent", "http"])
def test_a_ray_address_that_is_not_ray_is_an_error_within_the_time_limit(answer):
    """Defect: --ray-address at something that listens but is not Ray hung past 150 s (docs/cluster.md promises 10 s)."""
    from amp_suite.errors import UsageError
    from amp_suite.sweep.executors.ray_scheduler import check_reachable

    server = _listener(answer)
    address = f"127.0.0.1:{server.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(UsageError) as raised:
        check_reachable(address, timeout_s=1.0)
    assert time.monotonic() - started < 5
    said = "no answer" if answer is None else "an answer that is not gRPC's"
    assert str(raised.value).startswith(f"{address} is not a Ray cluster: {said} within 1 s")
    server.close()


def test_rays_sigterm_handler_never_replaces_the_hosts(monkeypatch):
    """Defect: SIGTERM while ray.init ran exited 15 without the "interrupted" line (Ray's own handler)."""
    from amp_suite.errors import SweepInterrupted
    from amp_suite.sweep.executors.ray_scheduler import keeping_signal_handlers

    def hosts(signum, frame):
        raise SweepInterrupted(signum)

    monkeypatch.setattr(signal, "SIGTERM", signal.SIGTERM)  # restored handlers are checked below
    previous = signal.signal(signal.SIGTERM, hosts)
    try:
        with pytest.raises(SweepInterrupted) as raised, keeping_signal_handlers():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init installs it
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert raised.value.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is hosts
    finally:
        signal.signal(signal.SIGTERM, previous)


@linux_only
def test_a_hung_sbatch_fails_the_submission_within_its_time_limit(tmp_path, monkeypatch):
    """Defect: a hung sbatch hung a Slurm sweep silently."""
    from amp_suite.sweep.executors import slurm_scheduler

    sbatch = tmp_path / "sbatch"
    sbatch.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    sbatch.chmod(0o755)
    monkeypatch.setattr(slurm_scheduler, "SBATCH_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^sbatch did not answer within 0.5 s"):
        slurm_scheduler.submitted_in_time(lambda: subprocess.run([str(sbatch)], check=True))
    assert time.monotonic() - started < 5
    assert slurm_scheduler._children_named("sbatch") == []  # the hung sbatch was ended (and reaped)


def test_an_inherited_progress_fd_is_not_trusted(monkeypatch):
    """Defect: an AMP_SUITE_PROGRESS_FD inherited from elsewhere was written to (any descriptor it named)."""
    from amp_suite import progress

    read_fd, write_fd = os.pipe()
    other_read, other_write = os.pipe()
    try:
        for value in ("1", "2", f"{write_fd}", f"{write_fd}:{os.fstat(other_write).st_ino}", "9999:1", "x:y"):
            monkeypatch.setattr(progress, "_state", {"fd": None, "checked": False, "last": 0.0})
            monkeypatch.setenv(progress.PROGRESS_FD_ENV, value)
            assert progress._progress_fd() is None, value
        monkeypatch.setattr(progress, "_state", {"fd": None, "checked": False, "last": 0.0})
        monkeypatch.setenv(progress.PROGRESS_FD_ENV, progress.progress_fd_value(write_fd))
        assert progress._progress_fd() == write_fd  # the runner's own pipe
    finally:
        for fd in (read_fd, write_fd, other_read, other_write):
            os.close(fd)


def test_the_loser_of_two_runs_starting_on_a_new_out_is_told_the_directory_is_in_use(tmp_path):
    """Defect: of two runs starting at once on a new --out, the loser was told the directory is not amp-suite's."""
    from amp_suite.errors import UsageError
    from amp_suite.sweep.output_dir import PROBE_PREFIX, OutputLock, prepare_output_dir

    out = tmp_path / "new"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / f"{PROBE_PREFIX}x1y2").write_bytes(b"\0")  # the winner, between its write probe and its lock
    assert prepare_output_dir(out) == out  # not called foreign: the loser goes on to the lock
    with OutputLock(out), pytest.raises(UsageError, match="is in use by another amp-suite run"):
        OutputLock(out).acquire()


# Grows the process tree its JSON argument describes, each node appending its pid to PIDFILE, then
# prints "ready" and either exits at once ("exit") or waits to be ended ("hang").
TREE_GROWER = r"""
import json, os, sys, time

def grow(node):
    for child in node["children"]:
        if os.fork() == 0:
            try:
                if child["detach"]:
                    os.setsid()
                    if os.fork():
                        os._exit(0)
                with open(sys.argv[2], "a") as fh:
                    fh.write(f"{os.getpid()}\n")
                grow(child)
                time.sleep(120)
            finally:
                os._exit(0)

def count(node):
    return sum(1 + count(child) for child in node["children"])

spec, ending = json.loads(sys.argv[1]), sys.argv[3]
grow(spec)
while len(open(sys.argv[2]).read().split()) < count(spec):
    time.sleep(0.01)
print("ready", flush=True)
if ending == "hang":
    time.sleep(120)
"""


def _trees():
    from hypothesis import strategies as st

    leaf = st.fixed_dictionaries({"detach": st.booleans(), "children": st.just([])})
    node = st.recursive(leaf, lambda children: st.fixed_dictionaries(
        {"detach": st.booleans(), "children": st.lists(children, max_size=3)}), max_leaves=6)
    return st.fixed_dictionaries({"detach": st.just(False), "children": st.lists(node, min_size=1, max_size=3)})


@linux_only
def test_every_process_of_any_tree_ends_with_its_command(tmp_path_factory):
    """Property: whatever tree a command grows (forks, setsid, double forks, any depth), none of it outlives the command's end: its exit or its being ended."""
    pytest.importorskip("hypothesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from amp_suite.processes import tree

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(spec=_trees(), ending=st.sampled_from(["exit", "hang"]))
    def check(spec, ending):
        pidfile = tmp_path_factory.mktemp("tree") / "pids"
        pidfile.write_text("")
        command = [sys.executable, "-c", TREE_GROWER, json.dumps(spec), str(pidfile), ending]
        if ending == "exit":
            done = tree.run(command, timeout=60, capture_output=True, text=True)
            assert done.stdout == "ready\n" and done.returncode == 0
        else:
            process = tree.start(command, stdout=subprocess.PIPE, text=True)
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
            tree.end(process)
            process.stdout.close()
        pids = [int(pid) for pid in pidfile.read_text().split()]
        assert pids
        _wait(lambda: not any(alive(pid) for pid in pids), END_WITHIN_S, f"the end of every process of {spec}")

    check()


def test_any_writes_to_a_pipe_whose_reader_leaves_never_raise():
    """Property: whatever is written, flushed or not, and whenever the reader closes the pipe, writing goes on without an error, and what was written before the close arrived."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from amp_suite.closed_pipes import QuietWhenClosed

    @settings(max_examples=25, deadline=None)
    @given(lines=st.lists(st.text(max_size=200), min_size=1, max_size=20), close_after=st.integers(0, 20),
           flush_each=st.booleans())
    def check(lines, close_after, flush_each):
        read_fd, write_fd = os.pipe()
        stream = QuietWhenClosed(open(write_fd, "w", encoding="utf-8", errors="replace"))
        sent = ""
        try:
            for index, line in enumerate(lines):
                if index == close_after:
                    stream.flush()
                    received = b""
                    os.set_blocking(read_fd, False)
                    try:
                        while chunk := os.read(read_fd, 1 << 16):
                            received += chunk
                    except BlockingIOError:
                        pass
                    assert received.decode("utf-8") == sent  # all of it arrived before the reader left
                    os.close(read_fd)
                    read_fd = -1
                stream.write(line + "\n")
                if index < close_after:
                    sent += line + "\n"
                if flush_each:
                    stream.flush()
            stream.flush()
            assert stream.reader_gone == (close_after < len(lines))
        finally:
            stream.close()
            if read_fd >= 0:
                os.close(read_fd)

    check()


@linux_only
def test_a_calibration_probe_past_its_time_limit_leaves_no_orphan(hanging_probe, monkeypatch):
    """Defect: a calibration probe's time limit ended only the probe; what the probe started outlived it."""
    import dataclasses

    from amp_suite.calibration import ceiling
    from fakefw import framework_info

    monkeypatch.setattr(ceiling, "PROBE_TIMEOUT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        ceiling._run_probe(dataclasses.replace(framework_info(), calibration_probe="hanging_probe"), "cpu", 0.1)
    assert time.monotonic() - started < 10
