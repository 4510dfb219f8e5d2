"""The command line as a user types it, each in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite_cli import REPO, run_cli

# Frameworks, and the cluster engines (--executor ray|slurm imports them only when it runs).
FRAMEWORK_MODULES = ("torch", "tensorflow", "jax", "keras", "ray", "submitit")


@pytest.mark.parametrize("args", [["--help"], ["list"], ["plugins"], ["run", "--help"], ["doctor", "--help"],
                                  ["env", "list"]])
def test_help_list_and_plugins_import_no_framework(args):
    probe = (
        "import sys, json\nfrom amp_suite.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n    pass\n"
        f"print(json.dumps([m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("args", [["run", "--precisions", "fp33"], ["run", "--dry-run", "--device", "cpu"]])
def test_a_refused_run_and_a_dry_run_answer_without_the_reports_libraries(args, tmp_path):
    # The report's libraries (pandas ~0.5 s of CPU to import, matplotlib) load when a sweep writes its report: an
    # answer that writes none (a refused setting, a dry run) does without them.
    probe = (
        "import sys, json\nfrom amp_suite.cli import main\n"
        "try:\n"
        f"    code = main({args!r})\n"
        "except SystemExit as exc:\n    code = exc.code\n"
        "print(json.dumps([code, [m for m in ('pandas', 'matplotlib') if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    code, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert code == (2 if "fp33" in args else 0), out.stderr
    assert loaded == []
    if "fp33" in args:
        assert "fp33" in out.stderr


def test_list_shows_frameworks_workloads_and_precisions():
    out = run_cli("list", "-p", "ghostfw")
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout and "keras" in out.stdout and "jax" in out.stdout
    assert "ghost" in out.stdout and "not installed (pip install 'amp-suite[ghost]')" in out.stdout
    assert "mnist_cnn_128" in out.stdout and "amp_bf16" in out.stdout
    # each framework row names every installed distribution with its version (the keras row said 2.21.0 alone,
    # TensorFlow's version, beside Keras 3)
    from amp_suite.machine.environment import package_version

    keras_row = next(line for line in out.stdout.splitlines() if line.split()[:1] == ["keras"])
    for distribution in ("tensorflow", "tensorflow-cpu", "keras"):
        version = package_version(distribution)
        assert (f"{distribution} {version}" in keras_row) == bool(version), (distribution, keras_row)


def test_list_with_a_bad_config_still_lists_the_frameworks_and_exits_2(tmp_path):
    missing = tmp_path / "nofile.toml"
    broken = tmp_path / "broken.toml"
    broken.write_text("[defaults]\nsteps = \n")
    for config, says in ((missing, f"config file '{missing}' does not exist"), (broken, "malformed TOML")):
        out = run_cli("list", "--config", str(config))
        assert out.returncode == 2, (config, out.stderr)
        assert "torch" in out.stdout and "amp_bf16" in out.stdout  # what needs no config is still listed
        assert out.stderr.startswith("amp-suite: error: ") and says in out.stderr and out.stderr.count("\n") == 1


def test_plugins_lists_hooks_and_reports_a_broken_plugin():
    out = run_cli("plugins", "-p", "no_such_plugin_module")
    assert out.returncode == 2  # asked for with -p: listed, and an error
    assert "torch" in out.stdout and "train_epoch" in out.stdout
    assert "no_such_plugin_module  FAILED TO LOAD" in out.stdout
    assert out.stderr.strip().splitlines()[-1].endswith("failed to load: no_such_plugin_module")


def _script_run(*args: str, cwd) -> subprocess.CompletedProcess:
    """The installed ``amp-suite`` script (its import path starts with its own folder, not the current one)."""
    script = Path(sys.executable).with_name("amp-suite")
    return subprocess.run([str(script), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_plugin_module_in_the_current_directory_loads_as_python_m_would(tmp_path):
    (tmp_path / "here_reporter.py").write_text(
        "from amp_suite.plugin_api import hookimpl\n\n\n@hookimpl\ndef write_report(results, out_dir):\n"
        "    return []\n")
    out = _script_run("plugins", "-p", "here_reporter", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "here_reporter  (module here_reporter)" in out.stdout and "write_report" in out.stdout


def test_a_plugin_asked_for_that_fails_to_load_is_a_one_line_error(tmp_path):
    (tmp_path / "broken_reporter.py").write_text("raise ImportError('needs the moon')\n")
    for command in (["list"], ["run", "--frameworks", "torch", "--steps", "2", "--warmup", "1"]):
        out = _script_run(*command, "-p", "broken_reporter", cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        [line] = out.stderr.strip().splitlines()
        assert line.startswith("amp-suite: error: plugin module 'broken_reporter' (-p) failed to load: ") and \
            "needs the moon" in line, line


@pytest.mark.parametrize("args,needle", [
    (["--frameworks", "fake,mxnet"], "unknown framework 'mxnet'; allowed: fake, "),  # flax too where its example is installed
    (["--workloads", "resnet"], "unknown workload 'resnet'; allowed: tiny, mnist_cnn"),
    (["--precisions", "fp4"], "unknown precision 'fp4'; allowed: fp32, tf32, amp_fp16, amp_bf16, fp8, fp64"),
    (["--warmup", "4"], "warmup (4) must be smaller than steps per epoch (4)"),
    (["--dataset", "imagenet"], "unknown dataset 'imagenet'"),
    (["--steps", "x"], "'x' is not a whole number (allowed: 1 to 1000000)"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_config, args, needle):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("amp-suite: error:") and needle in lines[-1], out.stderr


def test_a_framework_whose_plugin_failed_to_load_is_named(tiny_config, monkeypatch, capsys):
    import importlib.metadata

    from amp_suite.cli import main

    real = importlib.metadata.entry_points

    def broken_torch(**kwargs):
        eps = [ep for ep in real(**kwargs) if ep.name != "torch"]
        if kwargs.get("group") == "amp_suite":
            eps.append(importlib.metadata.EntryPoint("torch", "amp_suite_missing_torch_plugin", "amp_suite"))
        return eps

    monkeypatch.setattr(importlib.metadata, "entry_points", broken_torch)
    assert main(["run", "--config", str(tiny_config), "--frameworks", "torch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("amp-suite: error: framework 'torch': its plugin failed to load: ModuleNotFoundError")


def test_malformed_config_exit_2(tmp_path):
    bad = tmp_path / "benchmarks.toml"
    bad.write_text("[defaults]\nsteps = [\n")
    out = run_cli("run", "--config", str(bad))
    assert out.returncode == 2
    assert "malformed TOML" in out.stderr and "line" in out.stderr


def test_run_writes_report_csv_and_jsonl_then_report_rerenders(tiny_config, tmp_path, clean_fake_env):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--repeats", "2")
    assert out.returncode == 0, out.stderr
    result_dir = tmp_path / "out"
    lines = (result_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6
    csv = (result_dir / "results.csv").read_text().splitlines()
    assert len(csv) == 7 and csv[0].startswith("workload,framework,precision,repeat,status")
    report = (result_dir / "report.md").read_text()
    assert "| tiny       | fake" in report
    assert "amp-suite 0.1.0" in report
    (result_dir / "report.md").unlink()
    again = run_cli("report", str(result_dir), "-p", "fakefw")
    assert again.returncode == 0, again.stderr
    assert (result_dir / "report.md").read_text() == report


def test_a_run_into_a_folder_with_other_cells_says_its_report_leaves_them_out(tiny_config, tmp_path,
                                                                              clean_fake_env):
    """fp32 first, then amp_bf16 into the same folder: the second run's report (of its own cells) said the fp32
    baseline "did not run" without a word about the one in results.jsonl; now it names what it leaves out and
    how to see everything, and `report DIR` (every result) pairs them without that note."""
    assert run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32").returncode == 0
    second = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "amp_bf16")
    out = tmp_path / "out"
    assert second.returncode == 0, second.stderr
    assert (f"amp-suite: note: results.jsonl also holds 1 result of cells this run did not plan (fake/tiny/fp32/r0), "
            f"left out of its report: amp-suite report {out} renders them all together") in second.stderr
    own = (out / "report.md").read_text()
    assert "**Not in this report:** `results.jsonl` also holds 1 result of cells this run did not plan " \
           "(fake/tiny/fp32/r0)" in own and "| fake | amp_bf16 | n/a" in own
    assert "other_results" not in (out / "environment.json").read_text()  # told to this report only
    assert run_cli("report", str(out), "-p", "fakefw").returncode == 0
    report = (out / "report.md").read_text()
    assert "Not in this report" not in report and "| fake | amp_bf16 | n/a" not in report  # paired with fp32
    assert "fp32 baseline did not run" not in report


def test_report_of_a_folder_with_cells_of_other_steps_compares_none_of_them(tiny_config, tmp_path, clean_fake_env):
    assert run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32,amp_bf16",
                   "-q").returncode == 0
    assert run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--steps", "6",
                   "-q").returncode == 0
    done = run_cli("report", str(tmp_path / "out"), "-p", "fakefw")
    assert done.returncode == 0, done.stderr
    assert ("amp-suite: warning: not compared: fake / tiny / amp_bf16 ran with other settings than fp32 "
            "(steps 6 -> 4)\n") in done.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    verdict = report.split("## Environment")[0]
    assert "| fake | amp_bf16 | n/a (not compared: ran with other settings than fp32 (steps 6 -> 4)) |" in verdict
    assert "- sweep (the last run into this folder; the cells of other settings are named under Not compared): " \
           "6 steps per epoch" in report  # environment.json is the last run's: its settings are not every cell's


def test_any_failed_cell_makes_exit_1(tiny_config, clean_fake_env):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw",
                  env={"FAKEFW_MODE": "raise", "FAKEFW_TARGET": "amp_bf16"})
    assert out.returncode == 1
    assert "amp_bf16 r0 failed: RuntimeError: fake framework exploded" in out.stderr


def test_a_failed_cells_line_names_the_log_that_holds_its_traceback(tiny_config, tmp_path, clean_fake_env):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32,amp_bf16,tf32",
                  env={"FAKEFW_MODE": "raise", "FAKEFW_TARGET": "amp_bf16"})
    assert out.returncode == 1, out.stderr
    log = tmp_path / "out" / "logs" / "fake__tiny__amp_bf16__r0.log"
    [line] = [line for line in out.stderr.splitlines() if " amp_bf16 r0 failed: " in line]
    assert f"failed: RuntimeError: fake framework exploded; log: {log}" in line
    assert "Traceback (most recent call last)" in log.read_text() and "Traceback" not in out.stderr
    [unsupported] = [line for line in out.stderr.splitlines() if " tf32 r0 unsupported: " in line]
    assert "log:" not in unsupported  # by design: the error says all there is


def test_device_gpu_without_a_gpu_fails_every_cell_with_one_line(tiny_config, clean_fake_env):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--device", "gpu",
                  env={"AMP_SUITE_FAKE_NVIDIA_SMI": "none"})
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stderr.splitlines() if " unavailable: " in line]
    assert len(lines) == 3  # one line per cell, each with its reason
    assert all("--device gpu: this machine has no NVIDIA GPU" in line for line in lines)


@pytest.mark.slow  # a real framework
def test_a_framework_on_the_cpu_of_a_gpu_machine_is_unavailable_with_its_install_line(tiny_config):
    pytest.importorskip("torch")
    from suite_cli import HELPERS

    out = run_cli("run", "--config", str(tiny_config), "--frameworks", "torch", "--workloads", "mnist_cnn",
                  "--precisions", "fp32", env={"AMP_SUITE_FAKE_NVIDIA_SMI": str(HELPERS / "fake_nvidia_smi.py")})
    assert out.returncode == 1, out.stderr
    line = next(line for line in out.stderr.splitlines() if "torch fp32 r0" in line and "..." not in line)
    assert "unavailable" in line and "fall back to the CPU" in line and "NVIDIA A100" in line
    assert "amp-suite env create torch@gpu" in line  # its own environment with the CUDA build


@pytest.mark.parametrize("flags,needle", [
    (["--devices", "3"], "batch size 8 of workload 'tiny' does not split evenly over 3 devices"),
    (["--devices", "0"], "devices must be >= 1, got 0"),
    (["--devices", "two"], "devices must be integers or 'all', got 'two'"),
    (["--devices", "2,2"], "devices lists 2 more than once"),
    (["--nnodes", "2", "--devices", "2"], "nnodes = 2 needs a coordinator HOST:PORT"),
    (["--nnodes", "2", "--devices", "2", "--coordinator", "nohost"], "coordinator must be HOST:PORT"),
    (["--nnodes", "2", "--devices", "3", "--coordinator", "h:1"], "devices 3 do not split evenly over 2 nodes"),
    (["--nnodes", "2", "--node-rank", "2", "--coordinator", "h:1"], "node_rank (2) must be smaller than nnodes (2)"),
])
def test_bad_device_settings_are_one_line_errors(tiny_config, flags, needle):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", *flags)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if not line.startswith("amp-suite: warning:")]
    assert len(lines) == 1 and lines[0].startswith("amp-suite: error:") and needle in lines[0], lines


def test_devices_are_a_sweep_axis_with_their_own_keys(tiny_config):
    from amp_suite.config.catalog import load_config, with_overrides
    from amp_suite.sweep.cells import plan_cells

    config = load_config(tiny_config)
    settings = with_overrides(config.settings, devices=(1, 2), precisions=("fp32",), frameworks=("fake", "torch"))
    cells = plan_cells(config, settings, launchers={"fake": "process", "torch": "torchrun"},
                       launcher_programs={"torch": "torch.distributed.run"})
    assert [(c.run.framework, c.run.devices, c.run.launcher, c.run.key) for c in cells] == [
        ("fake", 1, "process", "fake/tiny/fp32/r0"), ("fake", 2, "process", "fake/tiny/fp32/d2/r0"),
        ("torch", 1, "process", "torch/tiny/fp32/r0"), ("torch", 2, "torchrun", "torch/tiny/fp32/d2/r0")]
    assert [c.run.launcher_program for c in cells] == ["", "", "", "torch.distributed.run"]
    assert cells[1].run.shard_size == 4


def test_a_plugin_without_a_data_parallel_engine_is_unsupported_on_several_devices_never_run_on_one(
        tiny_config, tmp_path):
    # fakefw's FrameworkInfo names no launcher: its 2-device cells must not quietly train on one device
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32",
                  "--devices", "1,2", "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr  # unsupported by design, like tf32 on a CPU
    rows = {row["key"]: row for row in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert rows["fake/tiny/fp32/r0"]["status"] == "ok"
    two = rows["fake/tiny/fp32/d2/r0"]
    assert two["status"] == "unsupported" and "has no data-parallel engine" in two["error"]
    assert "--devices 1" in two["error"] and not two["metrics"].get("throughput")


def test_resume_with_other_flags_than_the_stored_sweep_says_which(tiny_config, tmp_path, clean_fake_env):
    first = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32")
    assert first.returncode == 0, first.stderr
    same = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--resume",
                   "--timeout", "300")  # a longer time limit finishes the same sweep: nothing to warn of
    assert same.returncode == 0 and "--resume plans" not in same.stderr, same.stderr
    other = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32,amp_bf16",
                    "--steps", "5", "--resume")
    assert other.returncode == 0, other.stderr
    warning = [line for line in other.stderr.splitlines() if "--resume plans" in line]
    assert len(warning) == 1, other.stderr
    assert "precisions fp32 -> fp32,amp_bf16" in warning[0] and "; steps " in warning[0], warning[0]
    assert "give the first run's flags again" in warning[0]


def test_every_flag_of_every_command_has_help_text():
    import argparse

    from amp_suite.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [f"{name} {'/'.join(action.option_strings)}" for name, command in commands.items()
            for action in command._actions if action.option_strings and not action.help]
    assert not bare, f"flags without help text: {', '.join(bare)}"


def test_a_defaults_table_without_a_dataset_says_its_cells_train_on_synthetic_data(tiny_config, clean_fake_env):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--quiet")
    assert out.returncode == 0, out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith("amp-suite: 1 cell -> ") and "; synthetic data: the [defaults] of " in first, first
    assert 'add dataset = "mnist" to it, or pass --dataset' in first
    dry = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--dry-run")
    assert dry.returncode == 0 and "note: synthetic data: the [defaults] of " in dry.stdout, dry.stdout  # as the run
    asked = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--quiet",
                    "--dataset", "synthetic")
    assert asked.returncode == 0 and "synthetic data:" not in asked.stderr.splitlines()[0], asked.stderr


@pytest.mark.parametrize("module", ["amp_suite.cli", "pluggy"])
def test_ctrl_c_while_the_command_line_loads_ends_it_in_one_line_with_130(module):
    """``amp-suite`` (the console script and ``python -m amp_suite``) is :func:`amp_suite.__main__.entry`: a
    Ctrl-C that lands while Python imports the command line is one line and exit 130, not a traceback.  That
    includes pluggy, which the package root once imported before ``entry`` could catch anything."""
    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name == {module!r}:\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "from amp_suite.__main__ import entry\n"
            "sys.exit(entry())\n")
    done = subprocess.run([sys.executable, "-c", code, "list"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130 and done.stderr == "amp-suite: interrupted by SIGINT\n", done.stderr


def test_the_package_root_hands_out_its_markers_on_first_use():
    code = ("import sys, amp_suite, amp_suite.__main__\n"
            "assert 'pluggy' not in sys.modules, 'the root imported pluggy'\n"
            "from amp_suite import hookimpl, __version__, ENTRY_POINT_GROUP\n"
            "import amp_suite.markers as markers\n"
            "assert hookimpl is markers.hookimpl and __version__ == markers.__version__ and ENTRY_POINT_GROUP\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout == "ok\n", done.stderr


def test_run_help_shows_the_default_each_setting_takes_here_and_where_it_comes_from(tmp_path):
    """A newcomer's `run --help` showed no default at all: each setting now ends with what a plain run takes from
    the catalog (and the directory's benchmarks.toml), both values where a GPU's differ; an unreadable
    benchmarks.toml leaves the help whole and says why."""
    out = run_cli("run", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps lines
    assert "[default: fp32,amp_fp16,amp_bf16; on a GPU: fp32,tf32,amp_fp16,amp_bf16]" in text
    assert "[default: 20; on a GPU: 1500]" in text and "[default: mnist]" in text and "[default: 2]" in text
    assert "Defaults: what a plain run takes from the packaged catalog ([defaults]" in text
    (tmp_path / "benchmarks.toml").write_text("[defaults]\nsteps = 7\ndataset = 'mnist'\n")
    local = " ".join(run_cli("run", "--help", cwd=tmp_path).stdout.split())
    # a local [defaults] replaces the packaged table whole, its [defaults.on_gpu] too
    assert "unless given here) [default: 7] --epochs" in local and "catalog extended by /" in local
    (tmp_path / "benchmarks.toml").write_text("[defaults\n")
    broken = run_cli("run", "--help", cwd=tmp_path)
    assert broken.returncode == 0 and "--steps N" in broken.stdout and "[default:" not in broken.stdout
    assert "Defaults: not shown, the configuration cannot be read" in " ".join(broken.stdout.split())


def test_only_printing_the_help_reads_the_defaults():
    """Python 3.14's argparse formats each help string as its flag is added: outside a printed help the run
    formatter must hand back the plain text, so building the parser loads no configuration."""
    import argparse

    from amp_suite.cli import build_parser
    from amp_suite.cli.setting_defaults import RunHelpFormatter, run_defaults

    run_defaults.cache_clear()
    parser = build_parser()
    parser.parse_args(["run", "--steps", "3"])
    steps = argparse.Action(["--steps"], "steps", help="training steps per epoch")
    assert RunHelpFormatter("amp-suite run")._get_help_string(steps) == "training steps per epoch"
    assert run_defaults.cache_info().currsize == 0
    run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    assert "[default: " in run.format_help() and run_defaults.cache_info().currsize == 1
