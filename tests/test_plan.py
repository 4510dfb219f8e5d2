"""A sweep's plan, resolved before anything runs (amp_suite.sweep.resolve), and ``amp-suite run --dry-run``."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace

import pytest

from amp_suite.errors import UsageError
from amp_suite.records import cell_for_run
from amp_suite.sweep.engine import execute
from amp_suite.sweep.estimate import ASSUMED_FLOPS, STARTUP_S
from amp_suite.sweep.plan import SweepRequest
from amp_suite.sweep.resolve import resolve
from amp_suite.sweep.runner import with_fingerprint
from amp_suite.sweep.store import ResultStore
from amp_suite.workloads.workload import train_flops_per_image
from suite_cli import run_cli

FRAMEWORK_MODULES = ("torch", "tensorflow", "jax", "keras", "ray", "submitit")


def test_the_plan_of_a_preset_lists_its_cells_environments_and_executor(tmp_path):
    out = tmp_path / "out"
    plan = resolve(SweepRequest(preset="haiku-jmp-mnist", overrides={"device": "cpu", "out": str(out)}))
    frameworks, workloads = ("torch", "keras", "jax"), ("mnist_cnn", "mnist_cnn_128")
    expected = {f"{f}/{w}/{p}/r0" for f, w, p in itertools.product(frameworks, workloads, ("fp32", "amp_fp16"))}
    assert {cell.run.key for cell in plan.cells} == expected and len(plan.cells) == len(expected)
    assert plan.executor.kind == "local" and plan.device_kind == "cpu"
    assert list(plan.placements) == list(frameworks)
    assert all(place.environment == "" and not place.problem for place in plan.placements.values())
    assert plan.preset is not None and plan.preset["name"] == "haiku-jmp-mnist"
    assert plan.cells[0].run.steps == 62  # the preset's steps, carried into every cell
    assert not out.exists()  # resolving creates nothing
    with pytest.raises(FrozenInstanceError):
        plan.cells = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.placements["torch"] = plan.placements["jax"]  # type: ignore[index]


def test_the_plan_places_a_framework_in_its_environment_and_an_unbuilt_one_is_unavailable(tmp_path):
    config = tmp_path / "benchmarks.toml"
    config.write_text('[environments."torch@old"]\nframework = "torch"\nrequirements = ["torch==2.0.0"]\n')
    plan = resolve(SweepRequest(config=config, overrides={
        "device": "cpu", "out": str(tmp_path / "out"), "frameworks": ("torch", "torch@old"),
        "precisions": ("fp32",), "repeats": 1}))
    assert [cell.run.key for cell in plan.cells] == ["torch/mnist_cnn/fp32/r0", "torch@old/mnist_cnn/fp32/r0"]
    old = plan.placements["torch@old"]
    assert old.environment == "torch@old" and old.problem  # not built here
    cell = plan.cells[1]
    assert cell.unavailable == old.problem and cell.run.environment == "torch@old"
    assert [e.source for e in plan.estimates] == ["rough", "unavailable"]
    assert any("torch@old" in note and "unavailable" in note for note in plan.notes)
    text = "\n".join(plan.lines())
    assert "torch@old: framework torch, environment 'torch@old'" in text
    assert "torch@old/mnist_cnn/fp32/r0:" in text and "unavailable" in text


@pytest.mark.parametrize(("overrides", "request_fields", "message"), [
    ({"workloads": ("resnet",)}, {}, "unknown workload 'resnet'; allowed: tiny, mnist_cnn"),
    ({"steps": 3, "warmup": 3}, {}, "warmup (3) must be smaller than steps per epoch (3)"),
    ({"devices": (2,)}, {"inline": True}, "--inline runs cells in this process, which cannot be several"),
    ({}, {"executor": "mars"}, "unknown executor 'mars'; allowed: local, ray, slurm"),
])
def test_an_invalid_request_is_refused_by_resolve_before_anything_runs(tiny_config, tmp_path, overrides,
                                                                       request_fields, message):
    out = tmp_path / "out"
    request = SweepRequest(config=tiny_config, overrides={"out": str(out), **overrides}, plugins=("fakefw",),
                           **request_fields)
    with pytest.raises(UsageError) as caught:
        resolve(request)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists()
    # the command line says the same, in one line, exit 2
    flags = {"workloads": "--workloads", "steps": "--steps", "warmup": "--warmup", "devices": "--devices"}
    argv = [item for key, value in overrides.items()
            for item in (flags[key], ",".join(map(str, value)) if isinstance(value, tuple) else str(value))]
    argv += ["--inline"] if request_fields.get("inline") else []
    argv += ["--executor", request_fields["executor"]] if "executor" in request_fields else []
    done = run_cli("run", "--dry-run", "--config", str(tiny_config), "-p", "fakefw", "--out", str(out), *argv)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not out.exists()


def test_a_cell_measured_before_is_estimated_from_its_stored_time_and_resume_marks_it_done(tiny_config, tmp_path):
    out = tmp_path / "out"
    request = SweepRequest(config=tiny_config, overrides={"out": str(out)}, plugins=("fakefw",))
    plan = resolve(request)
    assert [e.source for e in plan.estimates] == ["rough"] * 3
    cell = plan.cells[0]
    workload = cell.workload
    rough = STARTUP_S["cpu"] + train_flops_per_image(workload) * 8 * 4 / ASSUMED_FLOPS["cpu"]
    assert plan.estimates[0].seconds == pytest.approx(rough)
    out.mkdir()
    store = ResultStore(out)
    stored = with_fingerprint(cell, cell_for_run(cell.run, "ok", wall_time_s=42.0))
    store.append(stored)
    store.append(replace(stored, wall_time_s=44.0))
    other = plan.cells[1]  # stored with a definition that is no longer the planned one: not its time
    store.append(replace(with_fingerprint(other, cell_for_run(other.run, "ok", wall_time_s=99.0)),
                         fingerprint="0" * 12))
    again = resolve(request)
    assert [(e.source, e.seconds) for e in again.estimates[:2]] == [("measured", 43.0), ("rough", rough)]
    resumed = resolve(replace(request, resume=True))
    assert resumed.estimates[0].source == "done" and resumed.seconds == pytest.approx(2 * rough)
    # the stored ok cell of another definition runs again, and the dry run says why, as the run will
    assert resumed.estimates[1].source == "rough" and resumed.estimates[1].rerun.startswith("rerun, ")
    assert resumed.estimates[0].rerun == resumed.estimates[2].rerun == ""
    assert f"{other.run.key}: 4 steps x 1 epoch, batch 8, 1 device, this interpreter, ~{rough:.0f} s (rough), " \
           f"{resumed.estimates[1].rerun}" in "\n".join(resumed.lines())
    text = "\n".join(again.lines())
    assert "fake/tiny/fp32/r0: 4 steps x 1 epoch, batch 8, 1 device, this interpreter, ~43 s (measured)" in text
    assert "1 measured before, same definition; 2 rough" in text


def test_the_engine_runs_exactly_the_cells_of_the_plan(tiny_config, tmp_path, clean_fake_env):
    plan = resolve(SweepRequest(config=tiny_config, overrides={"out": str(tmp_path / "out"), "repeats": 2},
                                plugins=("fakefw",), quiet=True))
    assert len(plan.cells) == 6
    outcome = execute(plan)
    assert [result.key for result in outcome.results] == [cell.run.key for cell in plan.cells]
    assert outcome.exit_code == 0
    stored = json.loads((tmp_path / "out" / "environment.json").read_text())
    assert stored["settings"]["repeats"] == 2


def test_dry_run_prints_the_plan_imports_no_framework_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    probe = (
        "import sys, json\nfrom amp_suite.cli import main\n"
        f"code = main(['run', '--dry-run', '--device', 'cpu', '--repeats', '2', '--out', {str(out)!r}])\n"
        f"print(json.dumps([code, [m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == [0, []]
    text = "\n".join(lines[:-1])
    assert lines[0] == f"plan: 18 cells on cpu, executor local, output {out}"
    assert lines[1].startswith("estimated time: ") and "18 rough, from the workload's FLOPs" in lines[1]
    for name in ("torch", "keras", "jax"):
        assert f"  {name}: framework {name}, this interpreter" in text
    assert "  mnist_cnn: mnist (test[:8000] / test[8000:])" in text
    keys = [line.split(":")[0].strip() for line in lines if line.startswith("  ") and "/r" in line.split(":")[0]]
    assert len(keys) == 18 and keys[0] == "torch/mnist_cnn/fp32/r0" and keys[-1] == "jax/mnist_cnn/fp32/r1"
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_resolving_a_request_loads_the_configuration_once(tiny_config, tmp_path, monkeypatch):
    from amp_suite.sweep import resolve as resolving

    calls: list[object] = []
    load = resolving.load_config
    monkeypatch.setattr(resolving, "load_config", lambda path: calls.append(path) or load(path))
    plan = resolve(SweepRequest(config=tiny_config, overrides={"out": str(tmp_path / "out")}, plugins=("fakefw",)))
    assert calls == [tiny_config] and len(plan.cells) == 3
