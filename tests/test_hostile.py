"""Hostile files, paths, values and plugins (issue 25): each ends in one line or a correct result.

Links and special files where the suite writes, foreign and system directories
as ``--out``, probes that must die with their host and never import from the
current directory, plugins that raise ``SystemExit`` at import, stored values
that would break a report, deep TOML, over-long names, a trickling mirror, and
values the API and CLI must refuse.  The fake framework keeps every case fast.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from amp_suite.cli import main
from amp_suite.plugins.loading import DISABLE_ENV
from amp_suite.records import CellResult
from amp_suite.sweep.store import ResultStore
from processes import alive as _alive
from suite_cli import HELPERS, disabled_besides_charts, run_cli, tiny_config_file

LONG = "a" * 300
FAKE = ("-p", "fakefw")


def _err_lines(text: str) -> list[str]:
    return [line for line in text.strip().splitlines() if line.strip()]


def _one_error(done: subprocess.CompletedProcess, needle: str) -> None:
    lines = _err_lines(done.stderr)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and needle in lines[0], done.stderr


def _sweep_dir(tmp_path: Path) -> Path:
    """``tmp_path/out`` as an earlier sweep left it (its environment record only)."""
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "environment.json").write_text('{"amp_suite_version": "0.1.0"}')
    return out


def _ok_result(precision: str = "fp32", **metrics) -> CellResult:
    return CellResult(key=f"fake/tiny/{precision}/r0", framework="fake", workload="tiny", precision=precision,
                      repeat=0, status="ok", metrics=dict(metrics))


# --- 1. links and special files ----------------------------------------------------------------


@pytest.mark.parametrize("name", [".amp-suite.lock", "results.jsonl", "logs/fake__tiny__fp32__r0.log",
                                  "report.md", "report.html", "chart-batch.png", "chart-curve-tiny.png",
                                  "logs/fake__tiny__fp32__r0.log.result.request"])
def test_a_symlink_where_the_suite_writes_is_refused_and_its_target_untouched(tiny_config, tmp_path,
                                                                              clean_fake_env, name):
    out = _sweep_dir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / name).symlink_to(victim)
    done = run_cli("run", "--config", str(tiny_config), *FAKE)
    _one_error(done, "is a symbolic link, not a regular file")
    assert victim.read_text() == "precious\n"
    assert not (out / "results.jsonl").is_file() or name == "results.jsonl"


def test_a_tilde_in_the_configs_out_is_the_home_directory_not_a_folder_named_tilde(tmp_path, clean_fake_env):
    from suite_cli import TINY_CONFIG

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "benchmarks.toml").write_text(TINY_CONFIG.format(out="~/amp-res"))
    done = run_cli("run", *FAKE, "--precisions", "fp32", "-q", cwd=work, env={"HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert (home / "amp-res" / "report.md").is_file() and not (work / "~").exists()
    assert str(home / "amp-res" / "report.md") in done.stderr + done.stdout


def test_a_tilde_in_a_path_argument_is_the_home_directory(tiny_config, tmp_path, clean_fake_env):
    """report DIR, compare BASE NEW --out FILE (and every other path argument) expand a leading ~ as a shell
    does, so a quoted '~/x' never makes a folder named ~."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    assert run_cli("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "-q",
                   "--out", str(home / "out")).returncode == 0
    env = {"HOME": str(home)}
    done = run_cli("report", "~/out", *FAKE, cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    done = run_cli("compare", "~/out", "~/out", "--out", "~/c.md", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert (home / "c.md").is_file() and not (work / "~").exists()


def test_a_symlink_where_torchrun_keeps_its_logs_is_refused_and_its_target_untouched(tiny_config, tmp_path,
                                                                                     clean_fake_env):
    """A cell's torchrun log folder (``logs/CELL.log.torchrun``, emptied and removed by the launcher) must not be a
    link: the folder it names would be emptied."""
    out = _sweep_dir(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("precious\n")
    (out / "logs" / "fake__tiny__fp32__r0.log.torchrun").symlink_to(victim)
    done = run_cli("run", "--config", str(tiny_config), *FAKE)
    _one_error(done, "is a symbolic link, not a directory")
    assert (victim / "notes.txt").read_text() == "precious\n"
    assert not (out / "results.jsonl").is_file()


def test_a_fifo_store_is_refused_and_resume_does_not_hang(tiny_config, tmp_path, clean_fake_env):
    out = _sweep_dir(tmp_path)
    os.mkfifo(out / "results.jsonl")
    for extra in ((), ("--resume",)):
        done = run_cli("run", "--config", str(tiny_config), *FAKE, *extra, timeout=60)
        _one_error(done, "is a FIFO, not a regular file")
    report = run_cli("report", str(out), *FAKE, timeout=60)
    _one_error(report, "is a FIFO")


def test_the_safe_layer_refuses_links_fifos_and_keeps_the_umask(tmp_path):
    from amp_suite.safe_files import UnsafeFileError, append_line, read_regular, write_file_atomically

    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafeFileError, match="is a symbolic link"):
        append_line(tmp_path / "link", "{}")
    with pytest.raises(UnsafeFileError, match="is a symbolic link"):
        write_file_atomically(tmp_path / "link", "x")
    with pytest.raises(UnsafeFileError, match="is a FIFO"):
        read_regular(tmp_path / "fifo")
    assert not (tmp_path / "elsewhere").exists()
    old = os.umask(0o022)
    try:
        write_file_atomically(tmp_path / "report.md", "x")
        append_line(tmp_path / "results.jsonl", "{}")
        (tmp_path / "kept.md").write_text("old")
        os.chmod(tmp_path / "kept.md", 0o640)
        write_file_atomically(tmp_path / "kept.md", "new")
    finally:
        os.umask(old)
    modes = {n: stat.S_IMODE(os.stat(tmp_path / n).st_mode) for n in ("report.md", "results.jsonl", "kept.md")}
    assert modes == {"report.md": 0o644, "results.jsonl": 0o644, "kept.md": 0o640}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_stale_torchrun_request_is_removed_under_the_lock(tmp_path):
    from amp_suite.sweep.output_dir import OutputLock

    out = _sweep_dir(tmp_path)
    stale = out / "logs" / "torch__tiny__fp32__d2__r0.log.result.request"
    stale.write_text("{}")
    with OutputLock(out):
        assert not stale.exists()


# --- 2. signals and processes ---------------------------------------------------------------


def test_signal_names_and_numbers():
    from amp_suite.launchers.child_process import exit_description
    from amp_suite.sweep.runner import signal_name

    assert signal_name(9) == "SIGKILL"
    assert signal_name(40) == "signal 40"
    assert exit_description(-40) == "was killed by signal 40"
    assert exit_description(-9) == "was killed by SIGKILL" and exit_description(3) == "exited with code 3"


def test_the_doctor_probe_never_imports_from_the_current_directory(tmp_path, monkeypatch):
    import dataclasses

    from amp_suite.doctor import runner
    from fakefw import framework_info

    (tmp_path / "json.py").write_text("raise SystemExit('the json.py of the current directory ran')\n")
    monkeypatch.chdir(tmp_path)
    report = runner.subprocess_probe(dataclasses.replace(framework_info(), doctor_probe="sleepy_probe"), "cpu", 60)
    assert not report["json_module"].startswith(str(tmp_path))
    assert report["path0"] != "" and Path(report["path0"]).resolve() != tmp_path.resolve()


def test_a_probe_dies_with_its_killed_host(tmp_path):
    pidfile = tmp_path / "probe.pid"
    host = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys; from amp_suite.launchers.child_process import isolated_command, isolated_env; "
        f"subprocess.run(isolated_command('sleepy_probe', 'sleep', {str(pidfile)!r}), env=isolated_env())")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), str(Path(__file__).parent.parent)])})
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and host.poll() is None, "the probe never started"
        time.sleep(0.05)
    probe = int(pidfile.read_text())
    host.kill()
    host.wait()
    deadline = time.monotonic() + 30
    while _alive(probe):
        assert time.monotonic() < deadline, "the probe outlived its host"
        time.sleep(0.05)


def test_a_child_takes_the_host_pid_out_of_its_environment_and_ignores_a_forged_one(monkeypatch):
    from amp_suite import host_watch

    watched = []
    monkeypatch.setattr(host_watch, "die_with_host", watched.append)
    env = {host_watch.HOST_PID_ENV: "4242", "OTHER": "kept"}
    host_watch.die_with_host_from_env(env)
    assert watched == [4242] and env == {"OTHER": "kept"}  # its own children do not watch the host in its place
    for forged in ("", "-1", "12a", "\u0663\u0664"):  # Arabic-Indic digits pass str.isdigit()
        env = {host_watch.HOST_PID_ENV: forged}
        host_watch.die_with_host_from_env(env)
        assert env == {}
    assert watched == [4242]




# --- 3. report and output-directory safety ---------------------------------------------------


def test_report_on_a_foreign_directory_is_refused_and_leaves_it_alone(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.json").write_text('{"mine": true}')
    (foreign / "results.jsonl").write_text("")
    done = run_cli("report", str(foreign))
    _one_error(done, "is not an amp-suite output directory")
    assert (foreign / "results.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in foreign.iterdir()) == ["results.json", "results.jsonl"]


def test_run_into_a_foreign_directory_is_refused(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _one_error(run_cli("run", "--config", str(tiny_config), *FAKE), "is not an amp-suite output directory")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("files", [
    {"environment.json": "", "report.md": "# my notes\n", "results.csv": "my,data\n"},
    {"environment.json": '{"name": "my-project", "python": "3.11"}', "results.json": "[1, 2]"},
    {"results.jsonl": '{"epoch": 1, "loss": 0.5}\n{"epoch": 2, "loss": 0.4}\n', "report.md": "# mine\n"},
    {".amp-suite.lock": None, "report.md": "# mine\n"},
], ids=["empty-environment-json", "another-programs-environment-json", "another-programs-results-jsonl",
        "a-link-named-like-the-lock"])
def test_files_of_other_programs_with_the_suites_names_do_not_make_a_directory_its(tiny_config, tmp_path,
                                                                                   clean_fake_env, files):
    """Only what a sweep wrote makes a directory an amp-suite output: an environment.json that is not one of its
    own, a results.jsonl of other records or a link named like the lock leave the directory foreign, refused
    with everything in it as it was (a hostile trial saw a user's report.md and results.csv replaced)."""
    out = tmp_path / "out"
    out.mkdir()
    for name, text in files.items():
        if text is None:
            (out / name).symlink_to(tmp_path / "elsewhere")
        else:
            (out / name).write_text(text)
    before = {path.name: os.readlink(path) if path.is_symlink() else path.read_text() for path in out.iterdir()}
    _one_error(run_cli("run", "--config", str(tiny_config), *FAKE), "is not an amp-suite output directory")
    _one_error(run_cli("report", str(out)), "is not an amp-suite output directory")
    assert {path.name: os.readlink(path) if path.is_symlink() else path.read_text() for path in out.iterdir()} \
        == before


@pytest.fixture(scope="module")
def charted_fp32_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of one fp32 sweep of the fake framework with its charts and report.html, as a plain run
    writes it: each test below works on a copy (one sweep for the module, not one a test)."""
    folder = tmp_path_factory.mktemp("charted")
    config = tiny_config_file(folder)
    charts_on = {DISABLE_ENV: disabled_besides_charts(os.environ.get(DISABLE_ENV, ""))}  # as report_charts does
    done = run_cli("run", "--config", str(config), *FAKE, "--precisions", "fp32", "-q", env=charts_on)
    assert done.returncode == 0, done.stderr
    return folder / "out"


@pytest.mark.parametrize("name, text, digests", [
    ("report.md", "# My edited analysis\n", "recorded"), ("results.csv", "my,data\n", "recorded"),
    ("results.json", '{"mine": 1}', "recorded"), ("report.html", "<html><title>my notes</title></html>", "recorded"),
    ("charts.json", '["mine"]', "recorded"), ("chart-speedup.png", "not the suite's chart", "recorded"),
    # a folder from before the record of digests: its files are judged by how they begin
    ("report.md", "# My edited analysis\n", "older folder"), ("results.csv", "my,data\n", "older folder"),
    ("charts.json", '["mine"]', "older folder"), ("chart-speedup.png", "not the suite's chart", "older folder"),
])
@pytest.mark.usefixtures("report_charts")
def test_a_report_file_amp_suite_did_not_write_is_replaced_only_with_force(tiny_config, tmp_path, clean_fake_env,
                                                                          charted_fp32_sweep, name, text, digests):
    """In an amp-suite output directory, run (--resume or not) and report leave a report file they did not
    write alone, naming it in one line before any cell runs; --force replaces it.  A file whose digest the
    folder records is judged by its digest; in a folder from before that record, by how it begins."""
    out = tmp_path / "out"
    shutil.copytree(charted_fp32_sweep, out, symlinks=True)
    if digests == "older folder":
        (out / "report-digests.json").unlink()
    if name == "chart-speedup.png":
        charts = json.loads((out / "charts.json").read_text())
        charts.pop("speedup")
        (out / "charts.json").write_text(json.dumps(charts))  # the index no longer names the chart
    (out / name).write_text(text)
    rows = (out / "results.jsonl").read_text()
    why = ("was changed after amp-suite wrote it" if digests == "recorded"
           else "exists and is not a file amp-suite wrote")
    for command in (("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "--resume"),
                    ("report", str(out), *FAKE)):
        _one_error(run_cli(*command), f"{name}' {why}")
        assert (out / name).read_text() == text and (out / "results.jsonl").read_text() == rows
    forced = run_cli("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "--resume", "--force", "-q")
    assert forced.returncode == 0, forced.stderr
    assert (out / name).read_bytes() != text.encode()
    assert run_cli("report", str(out), *FAKE).returncode == 0  # all amp-suite's again: no --force needed


def test_an_edit_below_the_first_line_of_the_report_is_seen(tiny_config, tmp_path, clean_fake_env):
    """A hostile trial saw report.md edited below its unchanged first line replaced without a word: the folder's
    record of digests now tells amp-suite's bytes from yours, anywhere in the file."""
    assert run_cli("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "-q").returncode == 0
    out = tmp_path / "out"
    edited = (out / "report.md").read_text() + "\nMy conclusion: ship AMP.\n"
    (out / "report.md").write_text(edited)
    for command in (("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "--resume"),
                    ("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32"), ("report", str(out), *FAKE)):
        done = run_cli(*command)
        _one_error(done, "report.md' was changed after amp-suite wrote it; left alone (pass --force")
        way_out = "move it out of the folder first)" if command[0] == "report" else "choose another --out)"
        assert done.stderr.rstrip().endswith(f"to replace it, or {way_out}"), done.stderr  # report has no --out
        assert (out / "report.md").read_text() == edited
    assert run_cli("report", str(out), *FAKE, "--force").returncode == 0
    assert "My conclusion" not in (out / "report.md").read_text()
    assert run_cli("report", str(out), *FAKE).returncode == 0  # amp-suite's again
    (out / "report-digests.json").write_text('{"my": "notes"}')
    _one_error(run_cli("report", str(out), *FAKE), "report-digests.json' exists and is not a file amp-suite wrote")
    assert (out / "report-digests.json").read_text() == '{"my": "notes"}'


def test_data_missing_with_downloads_off_says_both_ways_out_and_leaves_no_output_directory(tiny_config, tmp_path,
                                                                                            clean_fake_env):
    out, empty = tmp_path / "never", tmp_path / "no-data"
    empty.mkdir()
    done = run_cli("run", "--config", str(tiny_config), *FAKE, "--workloads", "mnist_cnn", "--precisions", "fp32",
                   "--dataset", "mnist", "--train-split", "train", "--no-download", "--data-dir", str(empty),
                   "--out", str(out), env={"AMP_SUITE_CACHE": str(tmp_path / "cache")})
    _one_error(done, "downloads are off: put the file there, or allow downloads (--download)")
    assert "or set synthetic_fallback = true" in done.stderr
    assert not out.exists()


def test_a_broken_link_as_out_is_named_as_one(tiny_config, tmp_path, clean_fake_env):
    (tmp_path / "lnk").symlink_to(tmp_path / "gone")
    _one_error(run_cli("run", "--config", str(tiny_config), *FAKE, "--out", str(tmp_path / "lnk")),
               "is a broken symbolic link")
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize("where", ["/", "~"])
def test_root_and_home_are_refused_as_out(tiny_config, where):
    target = os.path.expanduser(where)
    _one_error(run_cli("run", "--config", str(tiny_config), *FAKE, "--out", target), "refusing output directory")


def test_report_waits_for_no_one_and_refuses_while_a_run_holds_the_lock(tmp_path):
    from amp_suite.sweep.output_dir import OutputLock

    out = tmp_path / "out"
    ResultStore(out).append(_ok_result())
    with OutputLock(out):
        done = run_cli("report", str(out))
    _one_error(done, "is in use by another amp-suite run")
    assert not (out / "report.md").exists()


# --- 4. plugins at import ----------------------------------------------------------------------


@pytest.mark.parametrize("body,needle", [
    ("raise SystemExit(0)\n", "raised SystemExit: 0 while being imported"),
    ("raise KeyboardInterrupt()\n", "raised KeyboardInterrupt while being imported"),
    ("class Odd(BaseException):\n    def __str__(self):\n        raise ValueError('no')\nraise Odd()\n",
     "raised Odd (its message cannot be shown) while being imported"),
])
def test_a_plugin_ending_the_program_at_import_is_one_line(tmp_path, body, needle):
    (tmp_path / "hostile_plugin.py").write_text(body)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]])}
    done = run_cli("plugins", "-p", "hostile_plugin", env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr  # listed; asked for with -p, so an error
    assert f"hostile_plugin  FAILED TO LOAD (module hostile_plugin): {needle}" in done.stdout


def test_one_line_of_an_exception_whose_str_raises():
    from amp_suite.errors import one_line

    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert one_line(Broken()) == "Broken (its message cannot be shown)"


def test_message_line_picks_the_first_or_last_telling_line_and_copes_with_no_text():
    from amp_suite.errors import message_line

    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    told = RuntimeError("\n  Ray: the node died  \n\ndetails\nsbatch: error: no partition\n")
    assert message_line(told) == "Ray: the node died"
    assert message_line(told, last=True) == "sbatch: error: no partition"
    assert message_line(RuntimeError("x" * 500)) == "x" * 300
    assert message_line(RuntimeError("  \n ")) == "RuntimeError" and message_line(Broken()) == "Broken"


# --- 5. stored values ---------------------------------------------------------------------------


def test_an_out_of_range_stored_value_is_skipped_and_the_report_written(tmp_path, capsys):
    out = tmp_path / "out"
    ResultStore(out).append(_ok_result())
    line = json.dumps({**json.loads((out / "results.jsonl").read_text()), "precision": "amp_fp16",
                       "key": "fake/tiny/amp_fp16/r0"})
    with open(out / "results.jsonl", "a") as fh:
        fh.write(line.replace('"metrics": {}', '"metrics": {"peak_rss_bytes": 1' + "0" * 400 + "}") + "\n")
    (out / "environment.json").write_text(json.dumps({"cpu_flags": 5, "cpu_count": "many"}))
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert "line 2 (metrics.peak_rss_bytes is out of range)" in err
    assert "ignoring cpu_count (wrong type: str); cpu_flags (wrong type: int)" in err
    assert "Traceback" not in err and "| tiny" in (out / "report.md").read_text()


@pytest.mark.parametrize("cache", ['{"frameworks": {"torch": 5}}', "not json", '[1, 2]',
                                   '{"frameworks": {"fake": {"cpu": {"matmul": {"fp32": -1}}}}}'])
def test_a_corrupt_calibration_cache_is_ignored_with_a_warning(tmp_path, capsys, monkeypatch, cache):
    from amp_suite.calibration.ceiling import cache_path

    monkeypatch.setenv("AMP_SUITE_CACHE", str(tmp_path / "cache"))
    path = cache_path({})  # the machine environment.json below describes
    path.parent.mkdir(parents=True)
    path.write_text(cache)
    out = tmp_path / "out"
    ResultStore(out).append(_ok_result())
    (out / "environment.json").write_text("{}")
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"ignoring the calibration cache {path}" in err and "Traceback" not in err
    assert (out / "report.md").exists()


# --- 6. paths and parsing --------------------------------------------------------------------


def test_deep_toml_is_one_line_with_its_line(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("[defaults]\nsteps = " + "[" * 5000 + "]" * 5000 + "\n")
    _one_error(run_cli("run", "--config", str(deep)), "line 2: arrays and tables nest more than 32 levels")
    listed = run_cli("list", "--config", str(deep))
    assert "Traceback" not in listed.stderr


@pytest.mark.parametrize("option", ["--out", "--config", "--data-dir", "report"])
def test_over_long_path_components_are_one_line(tiny_config, tmp_path, clean_fake_env, option):
    long_path = str(tmp_path / LONG)
    if option == "report":
        done = run_cli("report", long_path)
    elif option == "--config":
        done = run_cli("run", "--config", long_path, *FAKE)
    else:
        done = run_cli("run", "--config", str(tiny_config), *FAKE, option, long_path)
    _one_error(done, "name too long")


def test_a_symlink_loop_as_data_dir_is_one_line(tiny_config, tmp_path, clean_fake_env):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    done = run_cli("run", "--config", str(tiny_config), *FAKE, "--data-dir", str(tmp_path / "loop" / "x"))
    _one_error(done, "cannot use the data directory")


def test_a_trickling_mirror_is_abandoned_and_its_partial_file_removed(tmp_path, monkeypatch):
    import importlib

    fetch = importlib.import_module("amp_suite.datasets.fetch")

    class Trickle:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read1(self, size):
            return b"x"

    clock = iter(range(0, 10**6, 10))  # ten seconds pass per byte
    monkeypatch.setattr(fetch.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Trickle())
    spec = fetch.DatasetFile("file.gz", 10**6, "0" * 64)
    with pytest.raises(fetch.DatasetError, match=r"http://slow.example/file.gz: .* bytes/s, below the minimum"):
        fetch.download("http://slow.example/file.gz", tmp_path / "file.gz", spec)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(fetch.DatasetError, match="no complete file after"):
        fetch.check_pace("http://m/f", 10**9, 10**10, 10**6, 1000.0)


def test_a_200000_name_list_is_checked_quickly():
    from amp_suite.schema import Field, check_value

    names = [f"w{i}" for i in range(200_000)]
    started = time.perf_counter()
    with pytest.raises(Exception, match="lists 'w5' more than once"):
        check_value("workloads", [*names, "w5"], Field(tuple, names=True))
    assert time.perf_counter() - started < 5


# --- 7. values --------------------------------------------------------------------------------


def test_superscript_digits_are_not_device_counts(tiny_config, clean_fake_env):
    done = run_cli("run", "--config", str(tiny_config), *FAKE, "--devices", "²")
    _one_error(done, "devices must be")


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_doctor_timeout_must_be_finite_and_positive(value, capsys):
    assert main(["doctor", "--frameworks", "fake", "-p", "fakefw", "--timeout", value]) == 2
    assert "--timeout must be a finite number of seconds above 0" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs,needle", [
    ({"config": 5}, "config must be the path of a TOML file, got 5"),
    ({"resume": "no"}, "resume must be true or false, got 'no'"),
    ({"plugins": 5}, "plugins must be a module name or a list of module names"),
])
def test_the_api_refuses_wrong_types_with_the_cli_messages(kwargs, needle):
    import amp_suite
    from amp_suite.errors import UsageError

    with pytest.raises(UsageError, match=needle):
        amp_suite.run(**kwargs)


def test_the_api_reads_one_device_count_and_one_plugin_name():
    from amp_suite.sweep import request_checks

    assert request_checks.device_counts(2) == (2,) and request_checks.device_counts([1, 2]) == [1, 2]
    assert request_checks.plugin_names("fakefw") == ("fakefw",)


def test_workload_sizes_have_upper_bounds(tmp_path):
    config = tmp_path / "big.toml"
    config.write_text("[workloads.huge]\nmodel = \"mnist_cnn\"\ninput_size = 1000000\nchannels = 1\n"
                      "num_classes = 10\nbatch_size = 8\n")
    done = run_cli("run", "--config", str(config), "--workloads", "huge")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "input_size" in done.stderr and "8192" in done.stderr


def test_a_symlink_loop_in_amp_suite_data_is_one_line(tiny_config, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    done = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--out", str(tmp_path / "out"),
                   env={"AMP_SUITE_DATA": str(loop / "mnist")})
    lines = [line for line in done.stderr.splitlines() if not line.startswith("amp-suite: warning:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "cannot use the data directory" in lines[0] and "Traceback" not in done.stderr


def test_load_on_an_over_long_path_is_a_usage_error():
    import amp_suite
    from amp_suite.errors import UsageError

    with pytest.raises(UsageError, match="File name too long"):
        amp_suite.load("/tmp/" + "a" * 300)


def test_report_lists_each_file_of_a_folder_named_with_a_newline_on_one_line(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "a\nb"
    assert run_cli("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "--out", str(out),
                   "-q").returncode == 0
    listed = run_cli("report", str(out), *FAKE)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines and all(line.startswith(str(tmp_path / "a\\nb") + "/") for line in lines), lines


def test_a_report_stopped_half_way_keeps_a_record_true_to_each_file_so_a_later_edit_is_seen(tmp_path):
    """A hostile user's trial: the record of digests was removed before a report began and written again only at
    its end, so after a report stopped half-way (Ctrl-C, SIGTERM, SIGKILL) a paragraph added to report.md was
    replaced by the next report without a word.  The earlier record now stays, and each reporter's files are
    recorded as soon as it has written them."""
    from types import SimpleNamespace

    from amp_suite.sweep.report_files import foreign_report_files, record_report_digests, write_recorded_report

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("# amp-suite report\n\nfirst\n")
    (out / "results.csv").write_text("workload,framework,precision,\nfirst\n")
    record_report_digests(out, [out / "report.md", out / "results.csv"])

    class StoppedHost:  # the markdown reporter finished, then a Ctrl-C in the next
        def write_report(self, results, directory, environment, stored=(), built_in=(), on_written=None):
            (directory / "report.md").write_text("# amp-suite report\n\nsecond\n")
            on_written([directory / "report.md"])
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_recorded_report(StoppedHost(), [], out, {})
    assert foreign_report_files(out) == []  # the report it did write is recorded as amp-suite's
    with (out / "report.md").open("a") as report:
        report.write("MY ANALYSIS: keep this paragraph\n")
    with (out / "results.csv").open("a") as table:
        table.write("my,own\n")
    assert sorted(path.name for path, _ in foreign_report_files(out)) == ["report.md", "results.csv"]

    class Host:
        def write_report(self, results, directory, environment, stored=(), built_in=(), on_written=None):
            assert stored == ("results.jsonl", "environment.json") and "report.md" in built_in
            (directory / "report.md").write_text("# amp-suite report\n\nwhole\n")
            on_written([directory / "report.md"])
            return SimpleNamespace(written=[directory / "report.md"], failures=[])

    (out / "results.csv").write_text("workload,framework,precision,\nfirst\n")  # the edit undone
    (out / "report.md").write_text("# amp-suite report\n\nsecond\n")
    outcome = write_recorded_report(Host(), [], out, {})
    assert outcome.written == [out / "report.md"] and "report.md" in (out / "report-digests.json").read_text()
    (out / "report.md").write_text("# amp-suite report\n\nwhole, then edited\n")
    assert foreign_report_files(out) != []


@pytest.mark.usefixtures("report_charts")
def test_a_report_file_no_reporter_wrote_this_time_is_removed_as_stale_unless_edited(tmp_path, capsys):
    """A hostile user's trial: with the html and charts reporters turned off, report left the last report.html
    and charts beside the new report.md, showing 0.08x where report.md said 1.80x."""
    from types import SimpleNamespace

    from amp_suite.sweep.report_files import record_report_digests, write_recorded_report

    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.md", "report.html", "results.csv"):
        (out / name).write_text(f"old {name}\n")
    record_report_digests(out, [out / "report.md", out / "report.html", out / "results.csv"])
    (out / "results.csv").write_text("old results.csv\nmy,own\n")  # edited by its user: never removed

    class MarkdownOnly:
        def write_report(self, results, directory, environment, stored=(), built_in=(), on_written=None):
            (directory / "report.md").write_text("# amp-suite report\n\nnew\n")
            on_written([directory / "report.md"])
            return SimpleNamespace(written=[directory / "report.md"], failures=[])

    write_recorded_report(MarkdownOnly(), [], out, {})
    assert not (out / "report.html").exists() and (out / "results.csv").read_text().endswith("my,own\n")
    assert "removed report.html of the report before" in capsys.readouterr().err


def test_an_environment_json_of_your_own_that_merely_holds_amp_suites_key_is_not_taken_for_a_sweeps(tmp_path):
    """A hostile user's trial: an environment.json holding the key amp_suite_version anywhere was taken for a
    sweep's and replaced; the docs say a sweep's opens with it, and only that now counts."""
    from amp_suite.errors import UsageError
    from amp_suite.sweep.output_dir import is_suite_output, refuse_foreign_directory

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "environment.json").write_text('{"name": "x", "amp_suite_version": "1"}')
    assert not is_suite_output(mine)
    with pytest.raises(UsageError, match="its environment.json does not open with 'amp_suite_version' as "
                                         "amp-suite's does, no results.jsonl"):
        refuse_foreign_directory(mine)
    (mine / "environment.json").write_text('{"amp_suite_version": "1", "name": "x"}')
    assert is_suite_output(mine)


def test_a_sweep_folder_that_cannot_take_a_write_is_refused_in_one_line_before_anything(tiny_config, tmp_path,
                                                                                        monkeypatch, capsys):
    """A hostile user's trial: report (and run --resume) on a read-only sweep folder ended in a PermissionError
    traceback; the folder is now tried with a file of its own first, and refused in one line (exit 2)."""
    import errno

    from amp_suite.sweep import output_dir

    out = tmp_path / "out"
    assert run_cli("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32", "--out", str(out),
                   "-q").returncode == 0
    before = {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()}
    real = output_dir.tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if Path(dir) == out:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(output_dir.tempfile, "mkstemp", read_only)
    for argv in (["report", str(out)], ["run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32",
                                        "--out", str(out), "--resume", "-q"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [f"amp-suite: error: output directory {str(out)!r} cannot take a write: "
                                            "Operation not permitted"], err
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()} == before


def test_a_run_killed_part_way_reads_as_incomplete_from_the_cells_it_planned(tiny_config, tmp_path, capsys):
    """A hostile user's trial: after a SIGKILL (or a torn line) the report said "fp32 is the only precision that
    ran" with no "Incomplete sweep" note, although the run had planned amp_bf16 too."""
    out = tmp_path / "out"
    assert run_cli("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32,amp_bf16", "--out", str(out),
                   "-q").returncode == 0
    environment = json.loads((out / "environment.json").read_text())
    assert [cell[3] for cell in environment["planned_cells"]] == ["fp32", "amp_bf16"]
    report = (out / "report.md").read_text()
    assert "Incomplete sweep" not in report
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n")  # what a SIGKILL after the first cell leaves
    assert main(["report", str(out), "-p", "fakefw"]) == 0
    capsys.readouterr()
    report = (out / "report.md").read_text()
    assert "> **Incomplete sweep:** the run ended before every planned cell had a readable result, and recorded no stop" \
           in report and "1 of 2 planned cells did not run: fake/tiny/amp_bf16/r0" in report, report[:3000]
    assert "amp_bf16 not run" in report and "fp32 is the only precision that ran" not in report


def test_a_resumed_run_counts_the_cells_it_ran_apart_from_those_it_kept(tiny_config, tmp_path):
    """A hostile user's trial: `run --resume -q` with 1 of 2 cells kept said "2 cells in 16 s"."""
    out = tmp_path / "out"
    argv = ("run", "--config", str(tiny_config), *FAKE, "--precisions", "fp32,amp_bf16", "--out", str(out), "-q")
    assert run_cli(*argv).returncode == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n")
    again = run_cli(*argv, "--resume")
    assert again.returncode == 0 and "amp-suite: 1 cell run (1 kept from the last run) in " in again.stderr, \
        again.stderr
    # the opening line, too, says what the run will do, not only what it plans (a re-check: it said "2 cells")
    assert f"amp-suite: 2 cells (1 kept from the last run, 1 to run) -> {out}/" in again.stderr, again.stderr
    # a dry run of --resume with other settings warns as the run does, and says why each stored cell runs again
    dry = run_cli(*argv, "--resume", "--steps", "5", "--dry-run")
    assert dry.returncode == 0 and "warning: --resume plans this command's sweep, which differs from the one " \
        "stored in" in dry.stderr and "rerun, its options changed (steps " in dry.stdout, dry.stdout + dry.stderr


@pytest.mark.usefixtures("report_charts")
def test_a_refusal_of_several_report_files_gives_each_its_own_reason(tmp_path):
    """A re-check: "'report.html' was changed after amp-suite wrote it (and chart-mine.png too)" called a chart
    amp-suite never wrote "changed"."""
    from amp_suite.errors import UsageError
    from amp_suite.sweep.report_files import check_report_files_replaceable, record_report_digests

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("<!DOCTYPE html><title>amp-suite report</title>\n")
    record_report_digests(out, [out / "report.html"])
    (out / "report.html").write_text("<!DOCTYPE html><title>amp-suite report</title>\n<!-- mine -->\n")
    (out / "chart-mine.png").write_bytes(b"\x89PNG mine")
    with pytest.raises(UsageError) as refused:
        check_report_files_replaceable(out, force=False)
    assert "report.html' was changed after amp-suite wrote it (and chart-mine.png, which exists and is not a file " \
           "amp-suite wrote too)" in str(refused.value)


def test_an_existing_folder_where_logs_cannot_be_made_is_named_as_such(tmp_path, monkeypatch):
    """A re-check: an empty read-only folder read "cannot create output directory" although it exists."""
    import errno

    from amp_suite.errors import UsageError
    from amp_suite.sweep import output_dir

    out = tmp_path / "out"
    out.mkdir()
    real = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == out / "logs":
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(UsageError, match=r"cannot create logs/ in the output directory '.*out': Operation not "
                                         "permitted"):
        output_dir.prepare_output_dir(out)
