"""The runner: every failure mode of a worker becomes a row, and the sweep goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from amp_suite.config.catalog import load_config
from amp_suite.records import CellResult, RunSpec
from amp_suite.sweep.fingerprint import kept_results
from amp_suite.sweep.runner import Cell, run_in_worker, run_sweep
from amp_suite.sweep.store import ResultStore
from suite_cli import REPO

# The worker's module, which the runner names to its launchers.
WORKER = "amp_suite.cell.worker"


def _cell(config_path: Path, precision: str = "fp32", framework: str = "fake", **run_args) -> Cell:
    config = load_config(config_path)
    workload = config.workloads["tiny"]
    run = RunSpec(framework=framework, workload="tiny", precision=precision, steps=4, warmup=1,
                  batch_size=8, plugin_modules=("fakefw", "ghostfw"), **run_args)
    return Cell(run, workload)


def test_ok_cell_has_figures(tiny_config, tmp_path, clean_fake_env):
    result = run_in_worker(_cell(tiny_config), log_path=tmp_path / "log")
    assert result.status == "ok", result.error
    m = result.metrics
    # 4 steps: 1 warm-up, a window of 2, 1 synchronized latency step
    assert m["timed_steps"] == 2 and m["warmup_steps"] == 1 and m["latency_steps_measured"] == 1
    assert m["throughput"] == pytest.approx(2 * 8 / m["window_time_s"], rel=1e-9)
    assert m["epoch_times_s"][0] == pytest.approx(m["first_step_time_s"] + m["window_time_s"]
                                                  + m["latency_step_times_s"][0], rel=1e-9)
    assert len(m["step_losses"][0]) == 4
    assert m["param_count"] == 8 * 8 * 3 + 3
    assert m["peak_rss_bytes"] > 10 * 2**20
    assert 0.0 <= m["val_accuracy"] <= 1.0 and m["val_examples"] == 512
    assert result.environment["pid"] != os.getpid()  # ran in another process


@pytest.mark.parametrize("mode,status,needle", [
    ("raise", "failed", "fake framework exploded"),
    ("crash", "failed", "exited with code 3"),
    ("oom", "oom", "MemoryError"),
    ("nan", "diverged", "loss became nan"),
])
def test_failure_statuses(tiny_config, tmp_path, clean_fake_env, mode, status, needle):
    clean_fake_env.setenv("FAKEFW_MODE", mode)
    result = run_in_worker(_cell(tiny_config), log_path=tmp_path / "log")
    assert result.status == status
    assert needle in result.error


def test_a_raising_hook_leaves_its_traceback_in_the_cells_log(tiny_config, tmp_path, clean_fake_env):
    clean_fake_env.setenv("FAKEFW_MODE", "raise")  # fakefw's build_model raises
    log = tmp_path / "log"
    result = run_in_worker(_cell(tiny_config), log_path=log)
    assert result.status == "failed"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "in build_model" in text and "fakefw.py" in text
    assert text.rstrip().endswith("RuntimeError: fake framework exploded")
    assert result.metrics["log"] == str(log)
    assert result.metrics["log_tail"].rstrip().endswith("RuntimeError: fake framework exploded")
    assert "fakefw.py" in result.metrics["traceback"]


def test_a_deep_failure_keeps_its_innermost_frames(tiny_config, tmp_path, clean_fake_env):
    clean_fake_env.setenv("FAKEFW_MODE", "deep")  # train_epoch raises 30 frames down
    log = tmp_path / "log"
    result = run_in_worker(_cell(tiny_config), log_path=log)
    assert result.status == "failed" and "fake failure deep inside the framework" in result.error
    for text in (result.metrics["traceback"], log.read_text(), result.metrics["log_tail"]):
        assert "in _deepest_frame" in text, text


def test_an_inline_cells_traceback_goes_to_its_log_too(tiny_config, tmp_path, clean_fake_env):
    clean_fake_env.setenv("FAKEFW_MODE", "raise")
    clean_fake_env.setenv("FAKEFW_TARGET", "amp_fp16")
    store = ResultStore(tmp_path / "out")
    ok, failed = run_sweep([_cell(tiny_config, p) for p in ("fp32", "amp_fp16")], store, inline=True)
    assert (ok.status, failed.status) == ("ok", "failed")
    log = tmp_path / "out" / "logs" / "fake__tiny__amp_fp16__r0.log"
    assert failed.metrics["log"] == str(log)
    assert "Traceback (most recent call last)" in log.read_text()
    assert failed.metrics["log_tail"].rstrip().endswith("RuntimeError: fake framework exploded")
    assert "log" not in ok.metrics and "log_tail" not in ok.metrics
    assert store.load()[-1].metrics["log"] == str(log)  # stored as returned


def test_timeout_kills_the_worker(tiny_config, tmp_path, clean_fake_env):
    pidfile = tmp_path / "pid"
    clean_fake_env.setenv("FAKEFW_MODE", "hang")
    clean_fake_env.setenv("FAKEFW_PIDFILE", str(pidfile))
    started = time.monotonic()
    result = run_in_worker(_cell(tiny_config, timeout_s=15), log_path=tmp_path / "log")
    assert result.status == "timeout"
    assert time.monotonic() - started < 60
    pid = int(pidfile.read_text())
    # Killed: gone, or a zombie of ours (a subreaper inherits it) until reaped; on a loaded machine the kill
    # can land a moment after the result, so look for a few seconds.
    deadline = time.monotonic() + 10
    while True:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"the timed-out worker {pid} is still running"
        time.sleep(0.1)


def test_missing_framework_is_unavailable_with_the_extra(tiny_config, tmp_path):
    result = run_in_worker(_cell(tiny_config, framework="ghost"), log_path=tmp_path / "log")
    assert result.status == "unavailable"
    assert "amp-suite[ghost]" in result.error


def test_unsupported_precision(tiny_config, tmp_path):
    result = run_in_worker(_cell(tiny_config, precision="tf32"), log_path=tmp_path / "log")
    assert result.status == "unsupported"


def test_sweep_goes_on_after_a_failure_and_stores_every_cell(tiny_config, tmp_path, clean_fake_env):
    clean_fake_env.setenv("FAKEFW_MODE", "raise")
    clean_fake_env.setenv("FAKEFW_TARGET", "amp_fp16")
    store = ResultStore(tmp_path / "out")
    cells = [_cell(tiny_config, p) for p in ("fp32", "amp_fp16", "amp_bf16")]
    results = run_sweep(cells, store)
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    stored = store.load()
    assert [r.key for r in stored] == [c.run.key for c in cells]


def test_resume_skips_ok_cells_and_reruns_failed_ones(tiny_config, tmp_path, clean_fake_env):
    store = ResultStore(tmp_path / "out")
    cells = [_cell(tiny_config, p) for p in ("fp32", "amp_fp16")]
    clean_fake_env.setenv("FAKEFW_MODE", "raise")
    clean_fake_env.setenv("FAKEFW_TARGET", "amp_fp16")
    first = run_sweep(cells, store)
    assert [r.status for r in first] == ["ok", "failed"]
    clean_fake_env.delenv("FAKEFW_MODE")
    second = run_sweep(cells, store, kept=kept_results(store.latest_by_key(), cells)[0])
    assert [r.status for r in second] == ["ok", "ok"]
    assert second[0].started_at == first[0].started_at  # reused, not rerun
    assert len(store.load()) == 3  # one new line, for the rerun cell
    assert store.latest_by_key()[cells[1].run.key].status == "ok"


def test_resume_tells_the_progress_which_cells_it_keeps_before_any_runs(tiny_config, tmp_path, clean_fake_env):
    store = ResultStore(tmp_path / "out")
    cells = [_cell(tiny_config, p) for p in ("fp32", "amp_bf16")]
    run_sweep(cells[:1], store)
    seen: list = []

    def progress(index, total, cell, result):
        seen.append((index, result is not None))

    progress.keeping = lambda indexes: seen.append(("keeping", sorted(indexes)))  # type: ignore[attr-defined]
    run_sweep(cells, store, kept=kept_results(store.latest_by_key(), cells)[0], progress=progress)
    assert seen[0] == ("keeping", [1])  # before the first cell: the ETA leaves the kept one out
    assert seen[1:] == [(1, True), (2, False), (2, True)]


def test_resume_reruns_a_cell_whose_configuration_changed(tiny_config, tmp_path, clean_fake_env):
    store = ResultStore(tmp_path / "out")
    run_sweep([_cell(tiny_config)], store)
    changed = _cell(tiny_config, seed=7)
    kept, reruns = kept_results(store.latest_by_key(), [changed])
    assert not kept and reruns == {changed.run.key: "rerun, its options changed (seed 0 -> 7)"}
    again = run_sweep([changed], store, kept=kept)
    assert again[0].config["seed"] == 7
    assert len(store.load()) == 2


def test_torn_last_line_is_ignored(tmp_path, tiny_config, clean_fake_env):
    store = ResultStore(tmp_path / "out")
    run_sweep([_cell(tiny_config)], store)
    with open(store.path, "a") as fh:
        fh.write('{"key": "fake/tiny/amp_fp16/r0", "stat')
    assert len(store.load()) == 1


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.1)


def _start_sweep(tiny_config: Path, pidfile: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "FAKEFW_MODE": mode, "FAKEFW_TARGET": "amp_fp16", "FAKEFW_PIDFILE": str(pidfile)}
    return subprocess.Popen(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(tiny_config), "-p", "fakefw"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_sigkill_of_one_worker_mid_sweep(tiny_config, tmp_path, clean_fake_env):
    pidfile = tmp_path / "worker.pid"
    sweep = _start_sweep(tiny_config, pidfile, "hang")
    _wait_for(pidfile, 120)
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, err
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {r["precision"]: r["status"] for r in rows} == {"fp32": "ok", "amp_fp16": "failed", "amp_bf16": "ok"}
    killed = next(r for r in rows if r["precision"] == "amp_fp16")
    assert "SIGKILL" in killed["error"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "SIGKILL" in report and "| tiny" in report


def test_ctrl_c_keeps_finished_results(tiny_config, tmp_path, clean_fake_env):
    pidfile = tmp_path / "worker.pid"
    # a row left by an earlier sweep into the same directory
    ResultStore(tmp_path / "out").append(CellResult(key="fake/tiny/amp_bf16/r0", framework="fake",
                                                    workload="tiny", precision="amp_bf16", repeat=0,
                                                    status="failed", error="stale row from before"))
    sweep = _start_sweep(tiny_config, pidfile, "hang")
    _wait_for(pidfile, 120)
    worker_pid = int(pidfile.read_text())
    sweep.send_signal(signal.SIGINT)
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(r["precision"], r["status"]) for r in rows] == [("amp_bf16", "failed"), ("fp32", "ok")]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| tiny       | fake" in report and "stale row" not in report  # only this sweep's cells
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)


def test_memory_peak_does_not_grow_with_steps(tmp_path, clean_fake_env):
    # 64x64 images at batch 32 are 0.5 MiB a batch: staging a whole epoch of 200 steps
    # would add 100 MiB to the peak; one window at a time adds at most a few.
    from amp_suite.workloads.workload import workload_from_config

    workload = workload_from_config("wide", {"model": "mnist_cnn", "input_size": 64, "batch_size": 32})
    growth = {}
    for steps in (10, 200):
        run = RunSpec(framework="fake", workload="wide", precision="fp32", steps=steps, warmup=1, batch_size=32,
                      window_steps=8, latency_steps=2, plugin_modules=("fakefw",))
        result = run_in_worker(Cell(run, workload), log_path=tmp_path / f"log{steps}")
        assert result.status == "ok", result.error
        growth[steps] = result.metrics["rss_growth_bytes"]
    assert growth[200] - growth[10] < 16 * 2**20, growth


def test_the_runner_asks_each_cells_launcher_how_to_start_it_and_what_its_exit_means():
    from amp_suite.launchers import launcher_for

    one = launcher_for(RunSpec(framework="fake", workload="w", precision="fp32"))
    assert one.inherits_pipes and one.command(RunSpec(framework="fake", workload="w", precision="fp32"), "7", WORKER)[-2:] \
        == ["--result-fd", "7"]
    assert one.failed_with_result(3, "boom") == "boom"
    assert one.failed_without_result(3) == "worker exited with code 3 and no result"
    ddp = RunSpec(framework="torch", workload="w", precision="fp32", devices=2, launcher="torchrun")
    many = launcher_for(ddp)
    command = many.command(ddp, "/tmp/cell.result", WORKER)
    assert not many.inherits_pipes and command[-2:] == ["--result-file", "/tmp/cell.result"]
    assert command[command.index("--nproc-per-node") + 1] == "2" and "--standalone" in command
    assert "local rank 0 saw: boom" in many.failed_with_result(1, "boom")
    assert many.failed_without_result(1).startswith("torchrun exited with code 1 and no result")


def test_torchrun_runs_the_program_the_plugin_declares_and_refuses_none_in_one_line():
    from amp_suite.launchers import launcher_for
    from amp_suite.launchers.single import OWN_PATH
    from amp_suite.plugins.host import PluginHost

    program = PluginHost().frameworks()["torch"].launcher_program
    assert program == "torch.distributed.run"  # declared by the torch plugin, named nowhere in amp_suite/
    ddp = RunSpec(framework="torch", workload="w", precision="fp32", devices=2, launcher="torchrun",
                  launcher_program="amp_suite_test_launcher")
    # the bootstrap runs the program as ``python -m PROGRAM ARGS`` would, and an undeclared one in one line
    script = ("import os, sys\nprint('ran', sys.argv[1:], os.path.isdir(os.environ['PET_LOG_DIR']))\n")
    with tempfile.TemporaryDirectory() as folder:
        command = launcher_for(ddp).command(ddp, f"{folder}/cell.log.result", WORKER)
        # torchrun's log folder beside the cell's result file, then the program and its rendezvous
        assert command[3:6] == [f"{folder}/cell.log.torchrun", "amp_suite_test_launcher", "--nproc-per-node"]
        Path(folder, "amp_suite_test_launcher.py").write_text(script)
        env = {**os.environ, "AMP_SUITE_WORKER_PATH": os.pathsep.join([folder, OWN_PATH])}  # as the runner sets it
        env.pop("PET_LOG_DIR", None)
        done = subprocess.run(command[:5] + ["--standalone", "x"], capture_output=True, text=True, env=env,
                              timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "ran ['--standalone', 'x'] True", done.stderr
        assert not Path(folder, "cell.log.torchrun").exists()  # made for the program, removed after it
        undeclared = subprocess.run(command[:4] + ["", "--standalone"], capture_output=True, text=True, env=env,
                                    timeout=60)
    assert undeclared.returncode == 2 and undeclared.stderr.count("\n") == 1
    assert "declares the torchrun launcher but no launcher_program" in undeclared.stderr
