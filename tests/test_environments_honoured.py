"""doctor and calibrate run each framework where a sweep would, and say which; python = "this" builds nothing.

The probes themselves are replaced (no framework runs); what is checked is which interpreter they are
handed and what the command prints about it.
"""

from __future__ import annotations

import sys

import pytest

from amp_suite import cli
from amp_suite.config.environments import environment_from_table
from amp_suite.errors import UsageError


def test_python_this_is_the_interpreter_amp_suite_runs_in():
    spec = environment_from_table("torch", {"framework": "torch", "python": "this"}, "benchmarks.toml")
    assert spec.python == sys.executable and not spec.managed
    with pytest.raises(UsageError, match=r'python must be an absolute path or "this" \(the interpreter amp-suite '
                                         r"runs in\), got 'bin/python'"):
        environment_from_table("torch", {"framework": "torch", "python": "bin/python"}, "benchmarks.toml")


def test_the_doctor_probes_a_framework_in_the_environment_a_sweep_would_use(tmp_path, monkeypatch, capsys):
    from amp_suite.doctor import runner

    config = tmp_path / "benchmarks.toml"
    config.write_text('[environments."fake"]\nframework = "fake"\npython = "this"\n')
    seen = {}

    def fake_run_checks(plan, **kwargs):
        seen["plan"] = plan
        return []

    monkeypatch.setattr(runner, "run_checks", fake_run_checks)
    monkeypatch.setattr("amp_suite.doctor.run_checks", fake_run_checks)
    assert cli.main(["doctor", "--device", "cpu", "-p", "fakefw", "--frameworks", "fake",
                     "--config", str(config)]) == 0
    plan = seen["plan"]
    assert [f.name for f in plan.frameworks] == []  # not probed in the host interpreter ...
    (probe,) = plan.environments  # ... but once, in the environment a sweep of 'fake' runs in
    assert (probe.name, probe.environment, probe.python, probe.problem) == ("fake", "fake", sys.executable, "")


def test_the_doctor_row_says_where_a_framework_ran(tmp_path):
    from amp_suite.doctor.runner import DoctorPlan, EnvironmentProbe, run_checks
    from amp_suite.machine.devices import NvidiaInventory
    from fakefw import framework_info

    info = framework_info()
    info = type(info)(**{**info.__dict__, "doctor_probe": "fake_probe"})
    plan = DoctorPlan("cpu", (info,), environments=(EnvironmentProbe("fake", "/envs/fake/bin/python", info,
                                                                     environment="fake@gpu"),))
    rows = run_checks(plan, inventory=NvidiaInventory(reason="none"), probe=lambda *a, **k: {},
                      missing=lambda info: [])
    where = {(r.scope, r.check): r.detail for r in rows}
    assert where[("fake", "runs in")].startswith(f"this interpreter ({sys.executable})")
    assert where[("fake", "environment built")] == "environment fake@gpu: /envs/fake/bin/python"


def test_calibrate_measures_in_the_environment_a_sweep_would_use(tmp_path, monkeypatch, capsys):
    from amp_suite.calibration import ceiling

    monkeypatch.setenv("AMP_SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ceiling, "cache_path", lambda environment: tmp_path / "cache" / "calibration.json")
    handed = {}

    def fake_probe(info, device, budget_s, python=""):
        handed[info.name] = python
        return {"kind": "cpu", "device": "fake cpu", "matmul": {"fp32": 1.0}, "conv": {"fp32": 1.0}}

    monkeypatch.setattr(ceiling, "_run_probe", fake_probe)
    config = tmp_path / "benchmarks.toml"
    config.write_text('[environments."torch"]\nframework = "torch"\npython = "this"\n')
    assert cli.main(["calibrate", "--device", "cpu", "--frameworks", "torch,jax", "--config", str(config)]) == 0
    err = capsys.readouterr().err
    assert handed["torch"] == sys.executable
    assert f"torch: measured in environment torch ({sys.executable})" in err
    if "jax" in handed:  # installed here: measured in this interpreter, and said so
        assert handed["jax"] == "" and f"jax: measured in this interpreter ({sys.executable})" in err


def test_calibrate_refuses_a_link_where_its_cache_goes_before_measuring(tmp_path, monkeypatch, capsys):
    from amp_suite.calibration import ceiling

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "calibration.json").symlink_to(tmp_path / "mine.json")
    monkeypatch.setattr(ceiling, "cache_path", lambda environment: tmp_path / "cache" / "calibration.json")
    measured = []
    monkeypatch.setattr(ceiling, "_run_probe", lambda *a, **k: measured.append(a) or {})
    assert cli.main(["calibrate", "--device", "cpu", "--frameworks", "torch"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the calibration cache" in err and "is a symbolic link" in err and len(err.splitlines()) == 1
    assert not measured and not (tmp_path / "mine.json").exists()


def test_the_acceptance_says_where_each_framework_runs(tmp_path, monkeypatch):
    from amp_suite.doctor import acceptance
    from amp_suite.doctor.acceptance import detect_machine
    from amp_suite.doctor.acceptance_plan import build_plan
    from amp_suite.doctor.acceptance_report import render_report
    from amp_suite.doctor.acceptance_run import AcceptanceRun
    from amp_suite.machine.devices import NvidiaInventory
    from fakefw import framework_info

    monkeypatch.setattr(acceptance, "detect_nvidia", lambda: NvidiaInventory(reason="none"))
    info = framework_info()
    machine = detect_machine({"fake": info}, ["fake"], device="auto")
    assert machine.installed == ("fake",) and machine.where == {"fake": f"this interpreter ({sys.executable})"}
    run = AcceptanceRun(build_plan(machine, ["fake"], tmp_path))
    assert f"- fake runs in this interpreter ({sys.executable})" in render_report(run)
