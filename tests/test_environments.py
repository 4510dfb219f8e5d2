"""Environments per framework or version (amp_suite.envs): declared, placed, built, broken, reported.

The fast tests check each piece with files and fakes; the tests marked ``envbuild`` build real
environments with uv from PyPI (a few seconds each once uv's cache holds the wheels).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amp_suite.config.catalog import load_config
from amp_suite.doctor import checks
from amp_suite.doctor.probe_kit import loaded_libraries
from amp_suite.doctor.runner import DoctorPlan, EnvironmentProbe, run_checks
from amp_suite.envs import EnvironmentSpec, place_frameworks, state_of
from amp_suite.envs.build import STAMP, failure_reason, fingerprint, interpreter_in
from amp_suite.launchers.single import OWN_PATH
from amp_suite.owned_paths import make_marked_folder
from amp_suite.records import CellResult, FrameworkInfo, RunSpec
from amp_suite.report.normalize import render_markdown, results_frame, summary_frame
from amp_suite.report.variants import variant_table
from amp_suite.sweep.runner import Cell, run_in_worker, worker_path
from suite_cli import REPO, run_cli
from suite_cli import one_line_error as _error
from suite_cli import tiny_config_file as _config

SIX_ENVIRONMENTS = """
[environments."fake@a"]
framework = "fake"
requirements = ["six==1.16.0"]

[environments."fake@b"]
framework = "fake"
requirements = ["six==1.17.0"]
"""


# --- declaring ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("table,expected", [
    ('framework = "jax"', "give requirements (amp-suite builds it) or python"),
    ('requirements = ["six"]', "framework is missing"),
    ('framework = "jax"\nrequirements = ["six"]\npython = "/usr/bin/python3"', "not both"),
    ('framework = "jax"\npython = "bin/python"', "python must be an absolute path"),
    ('framework = "jax"\nrequirements = ["--index-url=http://x"]', "is not a requirement string"),
    ('framework = "jax"\nrequirements = []', "at least one requirement"),
    ('framework = "jax"\nrequirments = ["six"]', "did you mean 'requirements'"),
    ('framework = "jax"\npython = "/usr/bin/python3"\nindex_url = "http://x"', "go with requirements"),
])
def test_a_bad_environment_table_is_one_line_naming_it(tmp_path, table, expected):
    path = _config(tmp_path, f'\n[environments."jax@old"]\n{table}\n')
    message = _error(lambda: load_config(path))
    assert expected in message
    assert '[environments."jax@old"]' in message and str(path) in message


def test_environments_are_read_with_every_key(tmp_path):
    path = _config(tmp_path, """
[environments."torch@2.13"]
framework = "torch"
requirements = ["torch==2.13.0+cpu"]
find_links = ["/opt/wheels"]
extra_index_urls = ["https://example.invalid/simple"]
""")
    spec = load_config(path).environments["torch@2.13"]
    assert spec.framework == "torch" and spec.requirements == ("torch==2.13.0+cpu",) and spec.managed
    assert spec.install_options() == ["--extra-index-url=https://example.invalid/simple", "--find-links=/opt/wheels"]


def test_the_packaged_gpu_set_gives_each_framework_its_own_cuda_stack():
    gpu = {s.framework: s for s in load_config(None).environments.values() if s.gpu}
    assert set(gpu) == {"torch", "keras", "jax", "keras@jax", "keras@torch"}
    assert any("and-cuda" in r for r in gpu["keras"].requirements)
    without_tf = [r for name in ("torch", "jax", "keras@jax", "keras@torch") for r in gpu[name].requirements]
    assert not any("tensorflow" in r for r in without_tf)
    assert not any(r.startswith("torch") for r in gpu["keras"].requirements + gpu["jax"].requirements
                   + gpu["keras@jax"].requirements)
    assert not any(r.startswith("jax") for r in gpu["keras@torch"].requirements)


# --- placing -----------------------------------------------------------------------------------------


def _built(envs_dir: Path, spec: EnvironmentSpec) -> None:
    """A managed environment that looks built: an executable interpreter and a current stamp."""
    python = interpreter_in(envs_dir / spec.name)
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    (envs_dir / spec.name / STAMP).write_text(json.dumps({"fingerprint": fingerprint(spec), "versions": {}}))


def test_names_are_placed_in_their_environments(tmp_path):
    a = EnvironmentSpec("jax@a", "jax", ("jax==0.10.1",))
    b = EnvironmentSpec("jax@b", "jax", ("jax==0.10.2",))
    _built(tmp_path, a)
    placed = place_frameworks(["jax@a", "jax@b", "torch"], {"jax@a": a, "jax@b": b}, ["torch", "jax"], tmp_path)
    assert placed["jax@a"].framework == "jax" and placed["jax@a"].python == str(interpreter_in(tmp_path / "jax@a"))
    assert placed["jax@a"].problem == ""
    assert placed["jax@b"].python == "" and "amp-suite env create jax@b" in placed["jax@b"].problem
    assert placed["torch"].environment == "" and placed["torch"].python == ""


def test_an_unknown_name_lists_frameworks_and_environments(tmp_path):
    a = EnvironmentSpec("jax@a", "jax", ("jax==0.10.1",))
    message = _error(lambda: place_frameworks(["jax@c"], {"jax@a": a}, ["torch", "jax"], tmp_path))
    assert "unknown framework 'jax@c'; allowed: torch, jax" in message and "or an environment: jax@a" in message
    other = EnvironmentSpec("mx@1", "mxnet", ("mxnet",))
    assert "runs framework 'mxnet', which no loaded plugin provides" in _error(
        lambda: place_frameworks(["mx@1"], {"mx@1": other}, ["torch"], tmp_path))


def test_an_unknown_backend_of_a_framework_with_backends_lists_them(tmp_path):
    known = ["torch", "keras", "keras@jax", "keras@torch", "jax"]
    message = _error(lambda: place_frameworks(["keras@mxnet"], {}, known, tmp_path))
    assert message == "unknown backend 'mxnet' of keras ('keras@mxnet'); allowed: keras, keras@jax, keras@torch"
    # a framework without backends keeps the framework message (an undeclared environment, say)
    assert "unknown framework 'torch@2.12'" in _error(lambda: place_frameworks(["torch@2.12"], {}, known, tmp_path))
    assert place_frameworks(["keras@jax"], {}, known, tmp_path)["keras@jax"].framework == "keras@jax"


def test_the_gpu_set_runs_plain_names_only_on_a_gpu_and_once_built(tmp_path):
    gpu = EnvironmentSpec("torch@gpu", "torch", ("torch==2.13.0",), gpu=True)
    envs = {"torch@gpu": gpu}
    assert place_frameworks(["torch"], envs, ["torch"], tmp_path, "gpu")["torch"].environment == ""
    _built(tmp_path, gpu)
    assert place_frameworks(["torch"], envs, ["torch"], tmp_path, "cpu")["torch"].environment == ""
    on_gpu = place_frameworks(["torch"], envs, ["torch"], tmp_path, "gpu")["torch"]
    assert on_gpu.environment == "torch@gpu" and on_gpu.label == "torch"


def test_an_interrupted_a_broken_and_a_changed_environment_are_told_apart(tmp_path):
    spec = EnvironmentSpec("six", "fake", ("six==1.16.0",))
    make_marked_folder(tmp_path / "six")  # what a build does first
    (tmp_path / "six" / "bin").mkdir(parents=True)
    (tmp_path / "six" / "bin" / "python").symlink_to(sys.executable)
    half = state_of(spec, tmp_path)  # its marker and an interpreter but no stamp: the build stopped half-way
    assert not half.built and "never finished" in half.problem
    _stamp = tmp_path / "six" / STAMP
    _stamp.write_text(json.dumps({"fingerprint": fingerprint(spec), "versions": {"six": "1.16.0"}}))
    assert state_of(spec, tmp_path).built and not state_of(spec, tmp_path).stale
    changed = EnvironmentSpec("six", "fake", ("six==1.17.0",))
    assert state_of(changed, tmp_path).stale
    (tmp_path / "six" / "bin" / "python").unlink()
    broken = state_of(spec, tmp_path)
    assert not broken.built and "is broken" in broken.problem and "amp-suite env create six" in broken.problem


def test_a_users_interpreter_is_used_as_it_is(tmp_path):
    spec = EnvironmentSpec("mine", "torch", python=sys.executable)
    assert state_of(spec, tmp_path).built and not spec.managed
    gone = EnvironmentSpec("gone", "torch", python=str(tmp_path / "nope" / "python"))
    assert "does not exist" in state_of(gone, tmp_path).problem


# --- installing: the one line a failed build prints ---------------------------------------------------


def test_the_resolvers_reason_is_the_one_line_of_a_failed_build():
    uv = ["Using CPython 3.11.7", "  × No solution found when resolving dependencies:",
          "  ╰─▶ Because there is no version of six==99.1 and you require six==99.1, we can",
          "      conclude that your requirements are unsatisfiable.", ""]
    assert failure_reason(uv) == ("Because there is no version of six==99.1 and you require six==99.1, we can "
                                  "conclude that your requirements are unsatisfiable.")
    plain = ["error: No solution found when resolving dependencies",
             "  cause: Because there is no version of six==99.1 and you require six==99.1, we can conclude "
             "that your requirements are unsatisfiable."]
    assert failure_reason(plain).startswith("Because there is no version of six==99.1")
    pip = ["Collecting six==99.1", "ERROR: Could not find a version that satisfies the requirement six==99.1",
           "ERROR: No matching distribution found for six==99.1"]
    assert failure_reason(pip) == "ERROR: Could not find a version that satisfies the requirement six==99.1"


# --- running: workers in their environment ------------------------------------------------------------


def _tiny_cell(tmp_path: Path, **run: object) -> Cell:
    config = load_config(_config(tmp_path, ""))
    return Cell(RunSpec(framework="fake", workload="tiny", precision="fp32", steps=4, warmup=1,
                        plugin_modules=("fakefw",), **run), config.workloads["tiny"])  # type: ignore[arg-type]


def test_a_cell_whose_environment_is_not_built_is_unavailable_without_a_worker(tmp_path):
    cell = _tiny_cell(tmp_path, variant="fake@a", environment="fake@a")
    cell = Cell(cell.run, cell.workload, unavailable="environment 'fake@a' is not built: run `amp-suite env "
                                                       "create fake@a`")
    result = run_in_worker(cell, log_path=tmp_path / "a.log")
    assert result.status == "unavailable" and "amp-suite env create fake@a" in result.error
    assert result.framework == "fake@a" and result.key.startswith("fake@a/")
    deleted = _tiny_cell(tmp_path, variant="fake@a", environment="fake@a", python=str(tmp_path / "gone" / "python"))
    result = run_in_worker(deleted, log_path=tmp_path / "b.log")
    assert result.status == "unavailable" and "is broken" in result.error and "gone" in result.error


def test_an_environments_worker_keeps_its_own_path(tmp_path):
    importlib.import_module("fakefw")  # the host loaded the plugin: its worker finds it where the host did
    host = RunSpec(framework="fake", workload="tiny", precision="fp32", plugin_modules=("fakefw",))
    assert OWN_PATH not in worker_path(host)
    env = RunSpec(framework="fake", workload="tiny", precision="fp32", plugin_modules=("fakefw",),
                  environment="fake@a", python="/x/bin/python")
    path = worker_path(env)
    assert path[0] == OWN_PATH
    assert not any(p.startswith(sys.prefix) for p in path[1:])  # the host's site-packages never
    assert str(REPO / "tests" / "helpers") in path[1:]  # a plugin found beside the tests still is


# --- reporting: variants side by side -----------------------------------------------------------------


def _result(label: str, precision: str, throughput: float, memory: float, version: str, repeat: int = 0):
    config = {"framework": "torch", "environment": label, "batch_size": 8, "dataset": "mnist"}
    return CellResult(key=f"{label}/w/{precision}/r{repeat}", framework=label, workload="w", precision=precision,
                      repeat=repeat, status="ok", config=config, device={"kind": "cpu", "name": "cpu"},
                      metrics={"throughput": throughput, "peak_rss_bytes": memory * 2**20,
                               "framework_version": version, "val_accuracy": 0.9},
                      environment={"interpreter": f"/envs/{label}/bin/python"})


def test_the_variant_table_puts_each_version_beside_the_first():
    results = [_result(label, p, t, m, v, r) for r in (0, 1) for label, p, t, m, v in [
        ("torch@2.12", "fp32", 100.0, 500.0, "2.12.0"), ("torch@2.12", "amp_bf16", 150.0, 400.0, "2.12.0"),
        ("torch@2.13", "fp32", 110.0, 500.0, "2.13.0"), ("torch@2.13", "amp_bf16", 176.0, 300.0, "2.13.0")]]
    table = variant_table(summary_frame(results), results_frame(results))
    rows = {row["precision"]: row for _, row in table.iterrows()}
    assert set(rows) == {"fp32", "amp_bf16"}
    assert rows["amp_bf16"]["variant"] == "torch@2.13 (2.13.0)" and rows["amp_bf16"]["against"] == "torch@2.12 (2.12.0)"
    assert rows["fp32"]["throughput"] == "1.10x" and rows["amp_bf16"]["throughput"] == "1.17x"
    assert rows["amp_bf16"]["peak memory"] == "0.75x"
    assert rows["amp_bf16"]["speed-up over fp32"] == "1.50x -> 1.60x"
    report = render_markdown(results, {})
    assert "## Framework variants" in report and "environment 'torch@2.13', /envs/torch@2.13/bin/python" in report


def test_one_label_per_framework_gives_no_variant_table():
    results = [_result("torch", p, 100.0, 500.0, "2.13.0") for p in ("fp32", "amp_bf16")]
    assert variant_table(summary_frame(results), results_frame(results)).empty
    assert "## Framework variants" not in render_markdown(results, {})


# --- the doctor --------------------------------------------------------------------------------------


def test_two_cudnn_builds_in_one_process_fail_the_doctor_with_the_fix(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 1 /env/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9\n"
        "7f10-7f20 r-xp 00000000 08:01 2 /env/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn_ops.so.9\n"
        "7f20-7f30 r-xp 00000000 08:01 3 /usr/local/cuda/lib64/libcudnn.so.8\n"
        "7f30-7f40 r-xp 00000000 08:01 4 /usr/lib/libc.so.6\n")
    libraries = loaded_libraries("libcudnn", str(maps))
    row = checks.judge_cudnn("torch@gpu", {"cudnn_libraries": libraries, "cudnn": "9.20.0"}, on_gpu=True)
    assert row.status == checks.FAILED
    assert "two cuDNN builds are loaded" in row.detail and "separate environments" in row.detail
    one = checks.judge_cudnn("torch@gpu", {"cudnn_libraries": libraries[:2], "cudnn": "9.20.0"}, on_gpu=True)
    assert one.status == checks.PASSED


def test_the_doctor_probes_each_environment_with_its_own_interpreter():
    info = FrameworkInfo(name="torch", display_name="PyTorch", modules=("torch",), extra="torch",
                         precisions={"cpu": ("fp32",)}, doctor_probe="x.probe")
    seen: list[str] = []

    def probe(framework, device, timeout_s, *, python=""):
        seen.append(python)
        return {"device": {"kind": "cpu", "build": "cpu"}}

    plan = DoctorPlan(device="cpu", frameworks=(), environments=(
        EnvironmentProbe("torch@2.13", "/envs/t/bin/python", info),
        EnvironmentProbe("torch@2.12", "/envs/u/bin/python", info, problem="environment 'torch@2.12' is not built")))
    rows = run_checks(plan, probe=probe, missing=lambda info: [])
    assert seen == ["/envs/t/bin/python"]
    built = [r for r in rows if r.scope == "torch@2.13"]
    assert built[0].check == "environment built" and built[0].status == checks.PASSED and len(built) > 3
    assert [(r.check, r.status) for r in rows if r.scope == "torch@2.12"] == [("environment built", checks.FAILED)]


# --- real environments built with uv ------------------------------------------------------------------

envbuild = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    return {"AMP_SUITE_ENVS": str(tmp_path / "envs")}


@envbuild
def test_two_real_environments_run_cells_with_their_own_packages(tmp_path):
    config = _config(tmp_path, SIX_ENVIRONMENTS + '\n[environments."fake@gone"]\nframework = "fake"\n'
                                                  'requirements = ["six==1.16.0"]\n')
    env = _env(tmp_path)
    created = run_cli("env", "create", "fake@a", "fake@b", "fake@gone", "-p", "fakefw", "--config", str(config), env=env,
                      timeout=900)
    assert created.returncode == 0, created.stderr[-2000:]
    assert "fake@a: built in" in created.stdout and "six 1.16.0" in created.stdout
    again = run_cli("env", "create", "fake@a", "-p", "fakefw", "--config", str(config), env=env)
    assert "already built for these requirements: kept" in again.stdout
    listed = run_cli("env", "list", "--config", str(config), env=env)
    assert "fake@b" in listed.stdout and "six 1.17.0" in listed.stdout
    (tmp_path / "envs" / "fake@gone" / "bin" / "python").unlink()  # a broken environment
    done = run_cli("run", "--config", str(config), "-p", "fakefw", "-p", "sixreport",
                   "--frameworks", "fake@a,fake@b,fake@gone,fake",
                   "--precisions", "fp32", "--dataset", "synthetic", env=env)
    assert done.returncode == 1, done.stderr[-2000:]  # the broken environment's cell is unavailable
    rows = {r["framework"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert rows["fake@gone"]["status"] == "unavailable" and "amp-suite env create fake@gone" in rows["fake@gone"]["error"]
    for label, six in (("fake@a", "1.16.0"), ("fake@b", "1.17.0")):
        row = rows[label]
        assert row["status"] == "ok"
        prefix = str(tmp_path / "envs" / label)
        assert row["environment"]["prefix"] == prefix and row["environment"]["interpreter"].startswith(prefix)
        assert row["environment"]["six_version"] == six
        assert not any(p.startswith(sys.prefix) for p in row["environment"]["sys_path"].split(os.pathsep))
    assert rows["fake"]["status"] == "ok" and rows["fake"]["environment"]["prefix"] == sys.prefix
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Framework variants" in report and "fake@b (" in report
    removed = run_cli("env", "remove", "fake@b", "--config", str(config), env=env)
    assert removed.returncode == 0 and not (tmp_path / "envs" / "fake@b").exists()


@envbuild
def test_a_requirement_that_cannot_resolve_is_one_line_and_leaves_nothing(tmp_path):
    config = _config(tmp_path, '\n[environments."bad"]\nframework = "fake"\nrequirements = ["six==99.1"]\n')
    done = run_cli("env", "create", "bad", "-p", "fakefw", "--config", str(config), env=_env(tmp_path))
    assert done.returncode == 1
    error = [line for line in done.stderr.splitlines() if line.startswith("amp-suite env: error:")]
    assert len(error) == 1 and "six==99.1" in error[0]
    assert not (tmp_path / "envs" / "bad").exists()


@envbuild
def test_an_interrupted_create_leaves_no_environment_called_built(tmp_path):
    config = _config(tmp_path, SIX_ENVIRONMENTS)
    env = {**os.environ, **_env(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "amp_suite", "env", "create", "fake@a", "-p", "fakefw", "--config", str(config)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    python = tmp_path / "envs" / "fake@a" / "bin" / "python"
    deadline = time.monotonic() + 120
    while not python.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)  # no chance to clean up: the stamp decides
    process.wait()
    listed = run_cli("env", "list", "--config", str(config), env=_env(tmp_path))
    line = next(line for line in listed.stdout.splitlines() if line.strip().startswith("fake@a"))
    assert "not built" in line
    placed = place_frameworks(["fake@a"], load_config(config).environments, ["fake"], tmp_path / "envs")
    assert placed["fake@a"].python == "" and placed["fake@a"].problem


@envbuild
def test_a_real_framework_runs_in_its_own_environment_beside_the_hosts(tmp_path):
    pytest.importorskip("torch")
    config = _config(tmp_path, """
[environments."jax@env"]
framework = "jax"
requirements = ["jax==0.10.2", "jaxlib==0.10.2", "dm-haiku==0.0.17", "jmp==0.0.4", "optax"]
""")
    env = _env(tmp_path)
    created = run_cli("env", "create", "jax@env", "--config", str(config), env=env, timeout=1200)
    assert created.returncode == 0, created.stderr[-2000:]
    done = run_cli("run", "--config", str(config), "--frameworks", "jax@env,torch", "--workloads", "tiny",
                   "--precisions", "fp32", "--dataset", "synthetic", env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["framework"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert rows["jax@env"]["status"] == "ok" and rows["torch"]["status"] == "ok"
    assert rows["jax@env"]["environment"]["prefix"] == str(tmp_path / "envs" / "jax@env")
    assert rows["jax@env"]["metrics"]["framework_version"].startswith("jax 0.10.2")
    assert rows["torch"]["environment"]["prefix"] == sys.prefix
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| jax@env" in report and "| torch" in report


def test_torchrun_and_its_workers_start_with_the_environments_interpreter():
    from amp_suite.launchers import launcher_for

    run = RunSpec(framework="torch", workload="tiny", precision="fp32", devices=2, launcher="torchrun",
                  environment="torch@2.13", python="/envs/torch/bin/python")
    command = launcher_for(run).command(run, "/out/result", "amp_suite.cell.worker")
    assert command[0] == "/envs/torch/bin/python"
    worker = command[command.index("--no-python") + 1:]
    assert worker[0] == "/envs/torch/bin/python" and "amp_suite.cell.worker" in worker
    host = RunSpec(framework="torch", workload="tiny", precision="fp32", devices=2, launcher="torchrun")
    assert launcher_for(host).command(host, "/out/result", "amp_suite.cell.worker")[0] == sys.executable


@envbuild
def test_without_uv_the_build_falls_back_to_venv_and_pip_and_says_so(tmp_path):
    from amp_suite.envs import create

    said: list[str] = []
    spec = EnvironmentSpec("pip-built", "fake", ("six==1.16.0",))
    state, done = create(spec, tmp_path, emit=said.append, uv=None)
    assert state.built and "with venv and pip" in done
    assert any("uv is not installed" in line for line in said)
    assert state.versions["six"] == "1.16.0"
    answer = subprocess.run([str(state.python), "-c", "import amp_suite, sys; print(amp_suite.__file__, sys.prefix)"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert answer == [str(REPO / "amp_suite" / "__init__.py"), str(tmp_path / "pip-built")]  # the same source tree


def test_a_source_trees_egg_info_never_shadows_the_installed_metadata_in_a_worker(monkeypatch):
    """Every editable build (env create) rewrites REPO/amp_suite.egg-info: a worker must not read it first."""
    import importlib.metadata

    from amp_suite.launchers.single import worker_import_path

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and Path(p).resolve() != REPO])
    path = worker_import_path()
    if importlib.machinery.PathFinder.find_spec("amp_suite", path[:-1]) is not None:
        pytest.skip("amp_suite is installed as a copy here, not from this source tree")
    assert path[-1] == str(REPO)  # found last, after the installed distributions
    found = [d for d in importlib.metadata.distributions(path=path) if d.metadata["Name"] == "amp-suite"]
    assert found and "site-packages" in str(found[0]._path)  # type: ignore[attr-defined]


def test_an_environment_named_after_a_framework_must_run_it_and_a_users_python_needs_amp_suite(tmp_path):
    wrong = EnvironmentSpec("torch", "jax", ("jax",))
    assert "must run it (framework = 'torch')" in _error(
        lambda: place_frameworks(["torch"], {"torch": wrong}, ["torch", "jax"], tmp_path))
    bare = EnvironmentSpec("bare", "torch", python="/usr/bin/python3")  # the system's Python: no amp-suite
    if not Path(bare.python).exists():
        pytest.skip("no /usr/bin/python3 here")
    placed = place_frameworks(["bare"], {"bare": bare}, ["torch"], tmp_path)["bare"]
    assert placed.python == "" and "has no amp-suite" in placed.problem and "pip install amp-suite" in placed.problem


def test_environments_in_a_folder_that_cannot_be_written_are_one_line(tmp_path):
    from amp_suite.envs import create

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    message = _error(lambda: create(EnvironmentSpec("x", "jax", ("six",)), blocker, uv=None))
    assert "cannot be built in" in message and "AMP_SUITE_ENVS" in message


def test_an_environment_whose_table_is_gone_is_listed_and_can_be_removed(tmp_path):
    config = _config(tmp_path, SIX_ENVIRONMENTS)
    envs = tmp_path / "envs"
    _built(envs, EnvironmentSpec("old@1", "fake", ("six",)))
    listed = run_cli("env", "list", "--config", str(config), env={"AMP_SUITE_ENVS": str(envs)})
    assert "old@1" in listed.stdout and "no [environments.\"old@1\"] declares it any more" in listed.stdout
    removed = run_cli("env", "remove", "old@1", "--config", str(config), env={"AMP_SUITE_ENVS": str(envs)})
    assert removed.returncode == 0 and not (envs / "old@1").exists(), removed.stderr
