"""The acceptance in phases: --checks, --budget, --resume, and a report that survives a killed phase.

Commands are answered by the fake H100 of test_acceptance (no framework runs); the clock is faked
where the budget is under test, and one test kills a real acceptance process with SIGKILL.
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

from amp_suite.doctor import acceptance
from amp_suite.doctor.acceptance_records import PASS, SKIP, CommandResult
from amp_suite.doctor.acceptance_run import run_plan
from amp_suite.doctor.acceptance_state import load_state, state_path
from amp_suite.doctor.phases import choose, parse_checks, select
from amp_suite.errors import UsageError
from test_acceptance import FRAMEWORKS, ONE_GPU, FakeAmpSuite, check, machine, plan_for


def keys_run(choices):
    return [c.key for c in choices if c.run]


# --- the planner ----------------------------------------------------------------------------


def test_checks_are_chosen_by_key_number_or_prefix(tmp_path):
    keys = [c.key for c in plan_for(ONE_GPU, tmp_path).checks]
    assert select(keys, ["devices", "7"]) == {"devices", "calibration"}
    assert select(keys, ["sweep"]) == {"sweep-torch", "sweep-keras", "sweep-jax"}
    with pytest.raises(UsageError, match="unknown check 'swep'; allowed: devices, doctor, tf32, sweep-torch"):
        select(keys, ["swep"])
    with pytest.raises(UsageError, match="no check number 12; allowed: 1 to 9"):
        select(keys, ["12"])
    with pytest.raises(UsageError, match="names no check"):
        parse_checks("  ")
    with pytest.raises(UsageError, match="--checks ' , ' names nothing between its commas"):
        parse_checks(" , ")
    with pytest.raises(UsageError, match="--checks '1,,2' has an empty entry between commas; did you mean '1,2'"):
        parse_checks("1,,2")


def test_the_budget_takes_checks_in_order_counting_a_shared_command_once(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    doctor = check(plan, "devices").estimate_s
    torch = check(plan, "sweep-torch").estimate_s
    choices = choose(plan.checks, budget_s=doctor + torch + 1)
    # the doctor answers three checks for the price of one; the Keras sweep no longer fits, but nothing
    # after it is cheap enough either, except what fits in the second left
    assert keys_run(choices) == ["devices", "doctor", "tf32", "sweep-torch"]
    over = {c.key: c for c in choices}["sweep-keras"]
    assert not over.run and over.pending and over.reason.startswith("does not fit the budget: about 160 s needed")
    assert {c.key: c for c in choices}["data-parallel"].pending is False  # one GPU: never, not later
    # a smaller check later in the plan still fits where a big one did not
    fused = check(plan, "fused").estimate_s
    assert "fused" in keys_run(choose(plan.checks, budget_s=doctor + torch + fused))
    with pytest.raises(UsageError, match="--budget must be a number of seconds above 0, got 0"):
        choose(plan.checks, budget_s=0)


def test_the_whole_gpu_plan_fits_two_phases_of_eight_minutes(tmp_path):
    """docs/gpu.md promises two commands of at most 8 minutes for one GPU and three frameworks."""
    plan = plan_for(ONE_GPU, tmp_path)
    first = choose(plan.checks, budget_s=450)
    second = choose(plan.checks, budget_s=450, finished=set(keys_run(first)))
    runnable = {c.key for c in plan.checks if not c.skipped}
    assert set(keys_run(first)) | set(keys_run(second)) == runnable


def test_not_asked_checks_stay_pending_and_finished_ones_are_kept(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    choices = {c.key: c for c in choose(plan.checks, asked={"sweep-jax"}, finished={"devices"})}
    assert [k for k, c in choices.items() if c.run] == ["sweep-jax"]
    assert choices["calibration"].pending and choices["calibration"].reason == "not asked for (--checks)"
    assert not choices["devices"].pending  # judged by an earlier phase


# --- phases end to end, with the fake H100 ---------------------------------------------------


def acceptance_run(tmp_path, monkeypatch, **kwargs):
    monkeypatch.setattr(acceptance, "detect_machine", lambda known, requested, device="auto": machine(ONE_GPU))
    lines: list[str] = []
    fake = kwargs.pop("run_command", None) or FakeAmpSuite()
    code = acceptance.run_acceptance(device="auto", frameworks=None, known=dict.fromkeys(FRAMEWORKS),
                                     report=str(tmp_path / "acc.md"), run_command=fake, emit=lines.append,
                                     workdir=kwargs.pop("workdir", tmp_path / "runs"), **kwargs)
    return code, lines, fake


def test_a_phase_then_resume_runs_every_check_once(tmp_path, monkeypatch):
    code, lines, fake = acceptance_run(tmp_path, monkeypatch, checks=("devices", "sweep-torch"))
    assert code == 0 and [c[0] for c in fake.calls] == ["doctor", "run"]
    assert lines[-1].endswith(f"(4 still to run: --resume); report: {tmp_path / 'acc.md'}")
    report = (tmp_path / "acc.md").read_text()
    assert report.startswith("# amp-suite acceptance: INCOMPLETE")
    assert "**Still to run** (4): four-precision ResNet-18 sweep (Keras (TF)); four-precision" in report
    state = load_state(state_path(tmp_path / "acc.md"))
    assert set(state.outcomes) == {"devices", "doctor", "tf32", "sweep-torch"}  # one doctor run answers three

    code, lines, fake = acceptance_run(tmp_path, monkeypatch, resume=True, workdir=None)
    assert code == 0
    assert [c[0] for c in fake.calls] == ["run", "run", "calibrate", "run"]  # keras, jax, calibration, fused
    assert any("(kept from the phase of" in line for line in lines if line.startswith("[PASS] frameworks see"))
    report = (tmp_path / "acc.md").read_text()
    assert report.startswith("# amp-suite acceptance: PASSED")
    assert report.count("- phase started") == 2 and "(--resume)" in report
    assert report.count("| exit 0 |") == 6  # both phases' commands, the first phase's kept
    # the sweeps of both phases feed the figures, the calibration's ceiling beside them
    assert "| PyTorch | amp_bf16 | 24,000 | 2.40x | 1.71x |" in report


def test_resume_refuses_another_plan_or_a_missing_state(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="--resume: no acceptance state at .*acc.json"):
        acceptance_run(tmp_path, monkeypatch, resume=True)
    acceptance_run(tmp_path, monkeypatch, checks=("devices",))
    monkeypatch.setattr(acceptance, "detect_machine", lambda known, requested, device="auto": machine(ONE_GPU))
    with pytest.raises(UsageError, match="checked --frameworks torch,keras,jax, not torch; give the same or none"):
        acceptance.run_acceptance(device="auto", frameworks=("torch",), known=dict.fromkeys(FRAMEWORKS),
                                  report=str(tmp_path / "acc.md"), run_command=FakeAmpSuite(), emit=print,
                                  resume=True)
    state_path(tmp_path / "acc.md").write_text("{not json")
    with pytest.raises(UsageError, match="cannot read the acceptance state"):
        acceptance_run(tmp_path, monkeypatch, resume=True)


class SlowClock:
    """A clock each command of the fake advances by its estimated seconds, so the budget runs out for real."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_command_runs_under_what_is_left_and_one_stopped_by_the_budget_is_pending(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    clock = SlowClock()
    limits: list[float] = []

    def run_command(args, timeout_s):
        limits.append(timeout_s)
        if args[0] == "doctor":
            clock.now += 100
            return FakeAmpSuite()(args, timeout_s)
        clock.now += timeout_s  # the sweep is still running when its limit (the budget's rest) comes
        return CommandResult(None, "", "", timeout_s)

    run = run_plan(plan, run_command=run_command, emit=lambda line: None, budget_s=300,
                   asked=("devices", "sweep-torch"), clock=clock)
    assert limits[1] == pytest.approx(200)  # 300 s budget, 100 s spent by the doctor
    sweep = next(o for o in run.outcomes if o.check.key == "sweep-torch")
    assert sweep.status == SKIP and sweep.pending
    assert sweep.observed.startswith("the budget ran out while it ran (stopped after 200 s); --resume runs it")
    assert [o.status for o in run.outcomes[:3]] == [PASS, PASS, PASS]


def test_a_resumed_sweep_keeps_the_cells_it_finished(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    out = Path(check(plan, "sweep-torch").command.out_dir)
    out.mkdir(parents=True)
    (out / "results.jsonl").write_text("")
    fake = FakeAmpSuite()
    run_plan(plan, run_command=fake, emit=lambda line: None, asked=("sweep-torch",))
    assert fake.calls[0][-1] == "--resume"


def test_the_report_is_written_before_each_command_and_after_each_check(tmp_path, monkeypatch):
    seen: list[str] = []

    class Peeking(FakeAmpSuite):
        def __call__(self, args, timeout_s):
            seen.append((tmp_path / "acc.md").read_text())
            return super().__call__(args, timeout_s)

    acceptance_run(tmp_path, monkeypatch, run_command=Peeking(), checks=("devices", "sweep-jax"))
    assert "**In progress**: `frameworks see the GPU` was running" in seen[0]
    assert "| 1 | devices | frameworks see the GPU | **PASS** |" in seen[1]
    assert "**In progress**: `four-precision ResNet-18 sweep (JAX)` was running" in seen[1]


def test_a_signal_leaves_a_report_saying_so(tmp_path, monkeypatch):
    class Interrupting(FakeAmpSuite):
        def __call__(self, args, timeout_s):
            if args[0] == "run":
                from amp_suite.errors import SweepInterrupted

                raise SweepInterrupted(signal.SIGTERM)
            return super().__call__(args, timeout_s)

    with pytest.raises(KeyboardInterrupt):
        acceptance_run(tmp_path, monkeypatch, run_command=Interrupting())
    report = (tmp_path / "acc.md").read_text()
    assert "**Interrupted** (SIGTERM while four-precision ResNet-18 sweep (PyTorch))" in report
    assert "| 2 | doctor | doctor passes | **PASS** |" in report and "In progress" not in report
    assert set(load_state(state_path(tmp_path / "acc.md")).outcomes) == {"devices", "doctor", "tf32"}


def test_a_phase_killed_with_sigkill_leaves_a_valid_report_of_what_it_finished(tmp_path):
    """The report and its state are written before each command: SIGKILL loses only the running check."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parent / "helpers")]!r}
        from test_acceptance import FRAMEWORKS, ONE_GPU, FakeAmpSuite, machine
        from amp_suite.doctor import acceptance

        class Hanging(FakeAmpSuite):
            def __call__(self, args, timeout_s):
                if args[0] == "run":
                    print("hanging", flush=True)
                    time.sleep(600)
                return super().__call__(args, timeout_s)

        acceptance.detect_machine = lambda known, requested, device="auto": machine(ONE_GPU)
        acceptance.run_acceptance(device="auto", frameworks=None, known=dict.fromkeys(FRAMEWORKS),
                                  report={str(tmp_path / "acc.md")!r}, run_command=Hanging(), emit=print,
                                  workdir={str(tmp_path / "runs")!r})
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).parent.parent)
    try:
        deadline = time.monotonic() + 60
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("hanging") or time.monotonic() > deadline:
                break
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    report = (tmp_path / "acc.md").read_text()
    assert report.startswith("# amp-suite acceptance: INCOMPLETE")
    assert "| 3 | tf32 | TF32 on/off through XLA | **PASS** |" in report
    assert "**In progress**: `four-precision ResNet-18 sweep (PyTorch)` was running" in report
    state = json.loads(state_path(tmp_path / "acc.md").read_text())
    assert sorted(state["outcomes"]) == ["devices", "doctor", "tf32"]


def test_the_cli_passes_checks_budget_and_resume(monkeypatch, tmp_path, capsys):
    from amp_suite import cli

    seen = {}
    monkeypatch.setattr(acceptance, "run_acceptance", lambda **kwargs: seen.update(kwargs) or 0)
    assert cli.main(["doctor", "--acceptance", "--checks", "devices,4", "--budget", "450", "--resume"]) == 0
    assert seen["checks"] == ("devices", "4") and seen["budget_s"] == 450 and seen["resume"] is True
    assert cli.main(["doctor", "--acceptance", "--budget", "-1"]) == 2
    assert "--budget must be a finite number of seconds above 0, got -1" in capsys.readouterr().err
    assert cli.main(["doctor", "--budget", "60", "--frameworks", "torch"]) == 2
    assert "--budget goes with --acceptance" in capsys.readouterr().err


def test_the_figures_mark_launch_bound_cells_and_speed_ups_above_the_ceiling(tmp_path):
    from amp_suite.doctor.acceptance_report import gpu_figures_section
    from amp_suite.doctor.acceptance_run import AcceptanceRun, CheckOutcome
    from test_acceptance import CALIBRATION, good_rows, write_rows

    plan = plan_for(ONE_GPU, tmp_path)
    rows = good_rows(("torch",))
    rows[2]["metrics"]["gpu_utilization_pct_mean"] = 23.0  # amp_fp16: the GPU idle most of the time
    write_rows(Path(check(plan, "sweep-torch").command.out_dir), rows)
    # a calibration whose bf16 peak is only twice fp32's: the sweep's 2.40x cannot be arithmetic
    low = CALIBRATION.replace("bf16 matmul 690.000 TFLOP/s conv n/a", "bf16 matmul 100.000 TFLOP/s conv n/a", 1)
    run = AcceptanceRun(plan)
    run.outcomes.append(CheckOutcome(check(plan, "calibration"), PASS, "ok", CommandResult(0, low, "", 1.0)))
    text = "\n".join(gpu_figures_section(run))
    assert "| PyTorch | amp_fp16 | 25,000 | 2.50x | 1.79x | 13.7x | 23% (launch- or input-bound) |" in text
    assert "| PyTorch | amp_bf16 | 24,000 | 2.40x | 1.71x | 2.0x (speed-up above it" in text
    assert "Launch- or input-bound: torch/amp_fp16 23%." in text
    assert "Above the calibrated ceiling: torch/amp_bf16" in text


def test_keras_on_jax_is_checked_like_an_xla_framework(tmp_path):
    """A GPU machine without TensorFlow runs Keras as keras@jax: its TF32 goes through XLA like JAX's."""
    plan = plan_for(ONE_GPU, tmp_path, installed=("keras@jax",), frameworks=("keras@jax",))
    tf32 = check(plan, "tf32")
    assert not tf32.skipped and tf32.expected.startswith("keras@jax: 'fp32 matmul/conv is fp32'")
    assert check(plan, "sweep-keras@jax").name == "four-precision ResNet-18 sweep (Keras on JAX)"
