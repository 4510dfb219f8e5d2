"""Faults a sweep must survive: signals to the host, SIGKILL, two runs on one
directory, a torn results file, a full disk, a read-only output directory.

Each test drives ``amp-suite run`` as a user would, in a fresh process, with
the fake framework; a ``gate`` worker waits for a file, so a test can act while
a cell is running without guessing at timings.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amp_suite.sweep.store import ResultStore
from processes import alive as _alive
from suite_cli import REPO, run_cli

ON_LINUX = sys.platform.startswith("linux")




def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.05)


def _start_sweep(config: Path, tmp_path: Path, *extra: str, mode: str = "gate",
                 target: str = "amp_fp16") -> subprocess.Popen:
    env = {**os.environ, "FAKEFW_MODE": mode, "FAKEFW_TARGET": target,
           "FAKEFW_PIDFILE": str(tmp_path / "worker.pid"), "FAKEFW_GATE": str(tmp_path / "gate")}
    return subprocess.Popen(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(config), "-p", "fakefw", *extra],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _worker_pid(tmp_path: Path) -> int:
    pidfile = tmp_path / "worker.pid"
    _wait(lambda: pidfile.exists() and pidfile.read_text().strip(), 120, "the gated worker's start")
    return int(pidfile.read_text())


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def test_a_rerun_stopped_half_way_does_not_call_its_own_planned_cells_unplanned(tiny_config, tmp_path,
                                                                                clean_fake_env):
    """The cells a stopped rerun planned but did not reach hold results of the first run: its report lists them
    as not run (Incomplete), never as results of cells it "did not plan"."""
    assert run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "-q").returncode == 0
    sweep = _start_sweep(tiny_config, tmp_path)
    _worker_pid(tmp_path)
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 128 + signal.SIGTERM, err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Incomplete sweep" in report and "Not in this report" not in report
    assert "did not plan" not in err


def test_a_sweep_stopped_before_its_first_result_says_none_finished(tiny_config, tmp_path, clean_fake_env):
    """A trial's SIGTERM before any cell finished was told "finished cells are kept in results.jsonl", a file
    that did not exist, and `report` then named that file as if the folder were no sweep's."""
    sweep = _start_sweep(tiny_config, tmp_path, target="fp32")
    _worker_pid(tmp_path)
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM; no cell finished (the same command runs them all)" in err
    assert "finished cells are kept" not in err
    report = run_cli("report", str(tmp_path / "out"), "-p", "fakefw")
    assert report.returncode == 2 and "no cell of the sweep in" in report.stderr and "finished, so there is " \
        "nothing to report (run it again, with --resume)" in report.stderr, report.stderr


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_like_ctrl_c(tiny_config, tmp_path, clean_fake_env, signame):
    sweep = _start_sweep(tiny_config, tmp_path)
    worker = _worker_pid(tmp_path)
    sweep.send_signal(getattr(signal, signame))
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 128 + getattr(signal, signame), err
    assert f"interrupted by {signame}" in err and "Traceback" not in err
    assert [(r["precision"], r["status"]) for r in _rows(tmp_path / "out")] == [("fp32", "ok")]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| tiny" in report
    # the report says it is not the whole sweep, and which cells are missing
    assert (f"> **Incomplete sweep:** interrupted by {signame}; 2 of 3 planned cells did not run: "
            "fake/tiny/amp_fp16/r0, fake/tiny/amp_bf16/r0.") in report
    _wait(lambda: not _alive(worker), 30, "the worker's end")
    rendered = run_cli("report", str(tmp_path / "out"), "-p", "fakefw")  # from environment.json, later
    assert rendered.returncode == 0, rendered.stderr
    assert (tmp_path / "out" / "report.md").read_text() == report
    resumed = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "Incomplete sweep" not in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.usefixtures("report_charts")
@pytest.mark.parametrize("how", ["ctrl-c", "ctrl-c with --resume", "sigkill"])
def test_a_rerun_stopped_before_any_cell_finished_leaves_the_earlier_report_as_it_was(tiny_config, tmp_path,
                                                                                       clean_fake_env, how):
    """A report of nothing never replaces a report: a rerun stopped while its first cell runs (Ctrl-C, Ctrl-C
    after --resume kept the finished cells, SIGKILL) keeps the earlier run's report, charts and environment.json
    byte for byte."""
    if how == "ctrl-c with --resume":  # the earlier run finished fp32 only: --resume keeps it and runs amp_fp16
        earlier = _start_sweep(tiny_config, tmp_path, "-q")
        _worker_pid(tmp_path)
        earlier.send_signal(signal.SIGINT)
        assert earlier.communicate(timeout=120) and earlier.returncode == 130
        (tmp_path / "worker.pid").unlink()
    else:
        first = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "-q")
        assert first.returncode == 0, first.stderr
    out = tmp_path / "out"
    kept = {path.name: path.read_bytes() for path in out.iterdir()
            if path.is_file() and path.name not in ("results.jsonl", ".amp-suite.lock")}
    assert {"report.md", "environment.json", "chart-speedup.png"} <= set(kept)
    resume = ("--resume",) if how == "ctrl-c with --resume" else ()
    sweep = _start_sweep(tiny_config, tmp_path, *resume, target="amp_fp16" if resume else "fp32")
    worker = _worker_pid(tmp_path)  # the first cell this run runs waits at its gate
    if how == "sigkill":
        sweep.kill()
        sweep.communicate(timeout=120)
    else:
        sweep.send_signal(signal.SIGINT)
        _, err = sweep.communicate(timeout=120)
        assert sweep.returncode == 130, err
        assert "no cell finished: the earlier report and environment" in err and "Traceback" not in err
    assert {name: (out / name).read_bytes() for name in kept} == kept
    _wait(lambda: not _alive(worker), 30, "the worker's end")


def test_sigkill_of_the_host_leaves_no_worker_and_resume_finishes(tiny_config, tmp_path, clean_fake_env):
    sweep = _start_sweep(tiny_config, tmp_path)
    worker = _worker_pid(tmp_path)
    sweep.kill()
    sweep.communicate(timeout=60)
    _wait(lambda: not _alive(worker), 30, "the orphaned worker's end")
    assert [r["precision"] for r in _rows(tmp_path / "out")] == ["fp32"]
    again = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--resume")
    assert again.returncode == 0, again.stderr
    rows = _rows(tmp_path / "out")
    assert [(r["precision"], r["status"]) for r in rows] == [("fp32", "ok"), ("amp_fp16", "ok"), ("amp_bf16", "ok")]


def test_a_second_run_on_the_same_directory_is_refused(tiny_config, tmp_path, clean_fake_env):
    first = _start_sweep(tiny_config, tmp_path)
    _worker_pid(tmp_path)
    try:
        second = run_cli("run", "--config", str(tiny_config), "-p", "fakefw")
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("amp-suite: error: output directory")
        assert f"in use by another amp-suite run (pid {first.pid} " in lines[0]
    finally:
        (tmp_path / "gate").touch()
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert [r["precision"] for r in _rows(tmp_path / "out")] == ["fp32", "amp_fp16", "amp_bf16"]


def test_torn_line_then_resume_then_report_keeps_every_result(tiny_config, tmp_path, clean_fake_env):
    done = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--repeats", "2",
                   "--precisions", "fp32,amp_bf16")
    assert done.returncode == 0, done.stderr
    results = tmp_path / "out" / "results.jsonl"
    lines = results.read_bytes().split(b"\n")
    cut = lines[1][: len(lines[1]) // 2]  # a crash in the middle of the second line
    results.write_bytes(lines[0] + b"\n" + cut)
    resumed = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--repeats", "2",
                      "--precisions", "fp32,amp_bf16", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "skipped 1 line(s) that hold no result: line 2 (torn or not JSON)" in resumed.stderr
    keys = {r.key for r in ResultStore(tmp_path / "out").load()}
    assert keys == {f"fake/tiny/{p}/r{i}" for p in ("fp32", "amp_bf16") for i in (0, 1)}
    report = run_cli("report", str(tmp_path / "out"), "-p", "fakefw")
    assert report.returncode == 0, report.stderr
    table = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(table) == 5  # header and four cells
    assert "Traceback" not in resumed.stderr + report.stderr


def test_a_full_disk_mid_sweep_stops_with_one_line_and_loses_nothing(tiny_config, tmp_path, clean_fake_env,
                                                                     monkeypatch, capsys):
    """Injected ENOSPC on the second append (the tmpfs test below does it for real)."""
    import errno

    from amp_suite import cli
    from amp_suite.sweep import store as results

    real_append = results.append_line
    calls = []

    def full_disk_on_second(path, line):
        calls.append(line)
        if len(calls) == 2:
            with open(path, "ab") as fh:
                fh.write(line[:40].encode())  # a torn line, as a full disk leaves one
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(path, line)

    monkeypatch.setattr(results, "append_line", full_disk_on_second)
    code = cli.main(["run", "--config", str(tiny_config), "-p", "fakefw", "-q"])
    err = capsys.readouterr().err
    assert code == 2
    [line] = [x for x in err.splitlines() if "error" in x]
    assert "No space left on device" in line and "fake/tiny/amp_fp16/r0 (ok) is not stored" in line
    monkeypatch.undo()
    again = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--resume", "-q")
    assert again.returncode == 0, again.stderr
    latest = ResultStore(tmp_path / "out").latest_by_key()
    assert sorted(latest) == [f"fake/tiny/{p}/r0" for p in ("amp_bf16", "amp_fp16", "fp32")]


def _in_mount_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``script`` with sh in a private mount namespace (root, Linux), or skip."""
    if not ON_LINUX or os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k none {tmp_path}"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    return subprocess.run(["unshare", "-m", "sh", "-ec", script], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env={**os.environ})


def test_a_really_full_disk(tiny_config, tmp_path, clean_fake_env):
    """A 1 MiB tmpfs filled while the second cell runs: one line, exit 2, the first result kept."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    config = tmp_path / "small.toml"
    config.write_text(tiny_config.read_text().replace(str(tmp_path / "out"), str(mnt / "out")))
    python = sys.executable
    script = f"""
mount -t tmpfs -o size=1m none {mnt}
FAKEFW_MODE=gate FAKEFW_TARGET=amp_fp16 FAKEFW_PIDFILE={tmp_path}/worker.pid FAKEFW_GATE={tmp_path}/gate \\
  {python} -m amp_suite run --config {config} -p fakefw -q > {tmp_path}/stdout 2> {tmp_path}/stderr &
sweep=$!
while [ ! -s {tmp_path}/worker.pid ]; do sleep 0.05; done
dd if=/dev/zero of={mnt}/filler bs=4k 2>/dev/null || true
touch {tmp_path}/gate
code=0; wait $sweep || code=$?
echo $code > {tmp_path}/code
cp {mnt}/out/results.jsonl {tmp_path}/results.jsonl
ls -a {mnt}/out {mnt}/out/logs > {tmp_path}/listing
rm {mnt}/filler
FAKEFW_MODE= {python} -m amp_suite run --config {config} -p fakefw -q --resume 2> {tmp_path}/stderr2 \\
  || echo $? > {tmp_path}/code2
cp {mnt}/out/results.jsonl {tmp_path}/results2.jsonl
"""
    done = _in_mount_namespace(script, tmp_path)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "stderr").read_text()
    assert (tmp_path / "code").read_text().strip() == "2", err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("amp-suite: error:")]
    assert errors and "No space left on device" in errors[0]
    assert [json.loads(x)["precision"] for x in (tmp_path / "results.jsonl").read_text().splitlines()] == ["fp32"]
    assert ".tmp" not in (tmp_path / "listing").read_text()  # no temporary file left behind
    assert not (tmp_path / "code2").exists(), (tmp_path / "stderr2").read_text()
    resumed = [json.loads(x) for x in (tmp_path / "results2.jsonl").read_text().splitlines()]
    assert [(r["precision"], r["status"]) for r in resumed] == [("fp32", "ok"), ("amp_fp16", "ok"), ("amp_bf16", "ok")]


def test_a_read_only_output_directory_is_refused_before_any_cell(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "out"
    out.mkdir()
    script = f"""
mount --bind {out} {out}
mount -o remount,ro,bind {out}
{sys.executable} -m amp_suite run --config {tiny_config} -p fakefw -q 2> {tmp_path}/stderr || echo $? > {tmp_path}/code
"""
    done = _in_mount_namespace(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "code").read_text().strip() == "2"
    lines = (tmp_path / "stderr").read_text().strip().splitlines()
    assert len(lines) == 1 and "Read-only file system" in lines[0]


def test_a_read_only_results_file_is_refused_before_any_cell(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text("")
    (out / "environment.json").write_text('{"amp_suite_version": "0.1.0"}')  # an earlier sweep's directory
    script = f"""
mount --bind {out}/results.jsonl {out}/results.jsonl
mount -o remount,ro,bind {out}/results.jsonl
{sys.executable} -m amp_suite run --config {tiny_config} -p fakefw -q 2> {tmp_path}/stderr || echo $? > {tmp_path}/code
"""
    done = _in_mount_namespace(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "code").read_text().strip() == "2"
    lines = (tmp_path / "stderr").read_text().strip().splitlines()
    assert len(lines) == 1 and "cannot append to" in lines[0] and "Read-only file system" in lines[0]
    assert not any((out / "logs").glob("*.log"))  # no cell ran


def test_the_worker_never_imports_from_the_current_directory(tiny_config, tmp_path, clean_fake_env,
                                                             monkeypatch):
    from amp_suite.config.catalog import load_config
    from amp_suite.records import RunSpec
    from amp_suite.sweep.runner import Cell, run_in_worker

    here = tmp_path / "cwd"
    here.mkdir()
    for name in ("pluggy", "json", "numpy", "amp_suite"):
        (here / f"{name}.py").write_text(f"open({str(tmp_path / ('imported-' + name))!r}, 'w').close()\n")
    monkeypatch.chdir(here)
    run = RunSpec(framework="fake", workload="tiny", precision="fp32", steps=4, warmup=1, batch_size=8,
                  plugin_modules=("fakefw",))
    result = run_in_worker(Cell(run, load_config(tiny_config).workloads["tiny"]), log_path=tmp_path / "log")
    assert result.status == "ok", result.error
    assert not list(tmp_path.glob("imported-*"))


def test_the_worker_loads_exactly_the_plugins_the_host_loaded(monkeypatch):
    from amp_suite.plugins.host import DISABLE_ENV, EXTRA_PLUGINS_ENV, PluginHost
    from amp_suite.sweep.resolve import worker_env, worker_plugin_modules

    monkeypatch.setenv(EXTRA_PLUGINS_ENV, "ghostfw,amp_suite_no_such_env_plugin")
    monkeypatch.setenv(DISABLE_ENV, "keras")
    host = PluginHost(extra_modules=("fakefw", "amp_suite_no_such_plugin"))
    assert worker_plugin_modules(host, ["fakefw", "amp_suite_no_such_plugin"]) == ("fakefw", "ghostfw")
    env = worker_env(host)
    assert env[EXTRA_PLUGINS_ENV] == ""
    assert set(env[DISABLE_ENV].split(",")) == {"keras", "amp_suite_no_such_plugin", "amp_suite_no_such_env_plugin"}


def test_a_worker_killed_by_a_real_time_signal_is_a_failed_cell(tiny_config, tmp_path, clean_fake_env):
    sweep = _start_sweep(tiny_config, tmp_path)
    worker = _worker_pid(tmp_path)
    os.kill(worker, 40)  # SIGRTMIN+6: no name in signal.Signals
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, err
    assert "Traceback" not in err and "is not a valid Signals" not in err
    rows = {r["precision"]: r for r in _rows(tmp_path / "out")}
    assert rows["amp_fp16"]["status"] == "failed" and rows["amp_fp16"]["error"] == "worker killed by signal 40"
    assert rows["fp32"]["status"] == "ok" and rows["amp_bf16"]["status"] == "ok"
