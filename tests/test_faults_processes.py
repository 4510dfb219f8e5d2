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
    _wait(lambda: not alive(child), 5, f"the end of the plugin's child {child}")


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
        _wait(lambda: not alive(worker) and not alive(child), 5, "the end of the worker and its detached child")
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
    _wait(lambda: not alive(int(pidfile.read_text())), 5, "the end of the cell's detached child")


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
    _wait(lambda: not alive(grandchild), 5, "the end of the detached grandchild")
    # a command that exits at once: its detached grandchild is ended, the pipe closes, the answer comes back
    done = tree.run([sys.executable, "-c", GRANDCHILD_HOLDS_THE_PIPE, "0"], timeout=30, capture_output=True,
                    text=True)
    assert done.returncode == 0
    _wait(lambda: not alive(int(done.stdout.split()[0])), 5, "the end of the detached grandchild")


def test_the_supervisor_exits_as_its_command_did():
    """The supervisor between amp-suite and a command is invisible: the command's exit code or signal comes back."""
    from amp_suite.processes import tree

    assert tree.run([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=30).returncode == 3
    killed = tree.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout=30)
    assert killed.returncode == -signal.SIGKILL
    missing = tree.run(["/nonexistent/program"], timeout=30, capture_output=True, text=True)
    assert missing.returncode == tree.CANNOT_START and "/nonexistent/program" in missing.stderr


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


@linux_only
def test_a_doctor_probe_past_its_timeout_leaves_no_orphan(tmp_path, monkeypatch):
    """Defect: `doctor --timeout` ended the probe but left the probe's child running."""
    import dataclasses

    from amp_suite.doctor import runner
    from fakefw import framework_info

    (tmp_path / "hanging_probe.py").write_text(HANGING_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("ROGUE_PIDFILE", str(pidfile))
    started = time.monotonic()
    with pytest.raises(runner.ProbeError, match="no answer within 1 s"):
        runner.subprocess_probe(dataclasses.replace(framework_info(), doctor_probe="hanging_probe"), "cpu", 1.0)
    assert time.monotonic() - started < 10
    _wait(lambda: pidfile.exists() and pidfile.read_text(), 5, "the probe's child pid")
    _wait(lambda: not alive(int(pidfile.read_text())), 5, "the end of the probe's child")


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
    _wait(lambda: not alive(children[0]), 5, "the end of nvidia-smi's child")
