"""amp-suite doctor --acceptance: the plan per machine, the judges on faked GPU output, the report.

Nothing here starts a framework: GPUs are faked by patching the detection,
commands by a command runner that returns what a GPU run would print or write.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import pytest

from amp_suite.doctor import acceptance
from amp_suite.doctor.acceptance_checks import (
    judge_calibration,
    judge_cpu_sweep,
    judge_devices,
    judge_doctor,
    judge_fused,
    judge_gpu_sweep,
    judge_sweep_command,
    judge_tf32,
)
from amp_suite.doctor.acceptance_output import parse_calibration, parse_doctor_table, read_results
from amp_suite.doctor.acceptance_plan import build_plan
from amp_suite.doctor.acceptance_records import FAIL, PASS, CommandResult, Machine
from amp_suite.doctor.acceptance_report import render_report
from amp_suite.doctor.acceptance_run import run_plan
from amp_suite.machine.devices import NvidiaGpu, NvidiaInventory

FRAMEWORKS = ("torch", "keras", "jax")
H100 = NvidiaGpu(0, "NVIDIA H100 80GB HBM3", "580.65.06", 81559.0, "9.0", power_limit_w=700.0)
ONE_GPU = NvidiaInventory((H100,), "580.65.06", "fake nvidia-smi lists 1")
TWO_GPUS = NvidiaInventory((H100, NvidiaGpu(1, H100.name, "580.65.06", 81559.0, "9.0")), "580.65.06", "fake")
T4 = NvidiaInventory((NvidiaGpu(0, "Tesla T4", "580.65.06", 15360.0, "7.5"),), "580.65.06", "fake")
NO_GPU = NvidiaInventory(reason="nvidia-smi not found, no /proc/driver/nvidia/version")
ORDER = ["frameworks see the GPU", "doctor passes", "TF32 on/off through XLA",
         "four-precision ResNet-18 sweep (PyTorch)", "four-precision ResNet-18 sweep (Keras (TF))",
         "four-precision ResNet-18 sweep (JAX)", "calibration", "fused-optimizer fp16 path",
         "data-parallel cell on 2 GPUs"]
KEYS = ["devices", "doctor", "tf32", "sweep-torch", "sweep-keras", "sweep-jax", "calibration", "fused",
        "data-parallel"]


def machine(inventory: NvidiaInventory, installed=FRAMEWORKS, missing=None) -> Machine:
    return Machine(inventory, tuple(installed), dict(missing or {}))


def plan_for(inventory, tmp_path, installed=FRAMEWORKS, device="auto", frameworks=FRAMEWORKS, missing=None):
    return build_plan(machine(inventory, installed, missing), frameworks, tmp_path, device=device)


def check(plan, key):
    return next(c for c in plan.checks if c.key == key)


def skips(plan) -> dict[str, str]:
    return {c.name: c.skip_reason for c in plan.checks if c.skipped}


# --- the plan on each kind of machine --------------------------------------------------


def test_one_gpu_runs_every_check_but_data_parallel(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    assert plan.mode == "gpu"
    assert [c.name for c in plan.checks] == ORDER and [c.key for c in plan.checks] == KEYS
    assert skips(plan) == {"data-parallel cell on 2 GPUs": skips(plan)["data-parallel cell on 2 GPUs"]}
    assert "needs 2 or more NVIDIA GPUs" in skips(plan)["data-parallel cell on 2 GPUs"]
    assert "has 1" in skips(plan)["data-parallel cell on 2 GPUs"]
    # the first three share one doctor run on the GPU
    doctor = {c.command for c in plan.checks[:3]}
    assert len(doctor) == 1 and doctor.pop().args[:3] == ("doctor", "--device", "gpu")
    for fw in FRAMEWORKS:  # one sweep per framework, so a phase can run some and --resume the others
        sweep = check(plan, f"sweep-{fw}").command.args
        for words in (("--workloads", "cifar10_resnet18"), ("--precisions", "fp32,tf32,amp_fp16,amp_bf16"),
                      ("--frameworks", fw), ("--device", "gpu"), ("--out", str(tmp_path / f"sweep-{fw}"))):
            assert sweep[sweep.index(words[0]) + 1] == words[1]
        assert "--synthetic-fallback" in sweep
    assert all(c.estimate_s > 0 for c in plan.checks)
    assert all(c.command.timeout_s > 0 for c in plan.checks)
    # the whole GPU plan's time limits add up to at most ~2 hours, its typical time far less
    assert sum({c.command.args: c.command.timeout_s for c in plan.checks}.values()) <= 2 * 3600


def test_two_gpus_run_everything_and_the_fused_cell_gets_its_config(tmp_path):
    plan = plan_for(TWO_GPUS, tmp_path)
    assert [c.name for c in plan.checks] == ORDER and skips(plan) == {}
    dp = check(plan, "data-parallel").command.args
    assert dp[dp.index("--devices") + 1] == "2"
    fused = check(plan, "fused").command
    config = dict(fused.files)[fused.args[fused.args.index("--config") + 1]]
    assert "[frameworks.torch]" in config and "fused = true" in config and "channels_last = true" in config
    assert fused.args[fused.args.index("--precisions") + 1] == "amp_fp16"


def test_a_cpu_machine_skips_every_gpu_check_with_its_reason(tmp_path):
    plan = plan_for(NO_GPU, tmp_path)
    assert plan.mode == "cpu"
    names = [c.name for c in plan.checks]
    assert names[:3] == ["frameworks installed and see the CPU", "doctor passes", "TF32 on/off through XLA"]
    assert names[3] == "CPU sweep (mnist_cnn, fp32)" and check(plan, "sweep").name == names[3]
    reasons = skips(plan)
    assert set(reasons) == {"TF32 on/off through XLA", "calibration", "fused-optimizer fp16 path",
                            "data-parallel cell on 2 GPUs"}
    for name in ("TF32 on/off through XLA", "calibration", "fused-optimizer fp16 path"):
        assert reasons[name].startswith("needs an NVIDIA GPU: this machine has no NVIDIA GPU")
    assert reasons["data-parallel cell on 2 GPUs"].startswith("needs 2 or more NVIDIA GPUs")
    doctor = plan.checks[0].command.args
    assert doctor[:3] == ("doctor", "--device", "cpu")
    sweep = check(plan, "sweep").command.args
    for words in (("--steps", "6"), ("--warmup", "2"), ("--precisions", "fp32"), ("--dataset", "mnist"),
                  ("--device", "cpu")):
        assert sweep[sweep.index(words[0]) + 1] == words[1]


def test_device_cpu_on_a_gpu_machine_says_so(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path, device="cpu")
    assert plan.mode == "cpu"
    assert skips(plan)["calibration"] == "needs an NVIDIA GPU: --device cpu asks for the CPU"


def test_device_gpu_without_a_gpu_runs_the_gpu_checks_so_they_fail(tmp_path):
    plan = plan_for(NO_GPU, tmp_path, device="gpu")
    assert plan.mode == "gpu" and [c.name for c in plan.checks] == ORDER and skips(plan) == {}


def test_pre_ampere_and_missing_frameworks_skip_what_they_must(tmp_path):
    plan = plan_for(T4, tmp_path)
    assert "needs TF32: GPU 0 (Tesla T4) is sm 7.5" in skips(plan)["TF32 on/off through XLA"]
    assert "tf32" not in check(plan, "calibration").expected
    no_torch = plan_for(ONE_GPU, tmp_path, installed=("keras", "jax"), missing={"torch": "pip install torch"})
    assert skips(no_torch)["fused-optimizer fp16 path"].startswith("needs PyTorch installed")
    assert skips(no_torch)["four-precision ResNet-18 sweep (PyTorch)"].startswith("needs PyTorch installed")
    calibrate = check(no_torch, "calibration").command.args
    assert calibrate[calibrate.index("--frameworks") + 1] == "keras,jax"
    torch_only = plan_for(ONE_GPU, tmp_path, installed=("torch",), frameworks=("torch",))
    assert skips(torch_only)["TF32 on/off through XLA"].startswith("needs Keras (TF) or JAX installed")


def test_detect_machine_counts_gpus_from_nvidia_smi(monkeypatch, tmp_path):
    from amp_suite.sweep.resolve import make_host

    known = make_host([]).frameworks()
    monkeypatch.setattr(acceptance, "detect_nvidia", lambda: TWO_GPUS)
    found = acceptance.detect_machine(known, FRAMEWORKS)
    assert found.gpu_count == 2
    plan = build_plan(found, FRAMEWORKS, tmp_path)
    assert plan.mode == "gpu" and not any(c.name == "data-parallel cell on 2 GPUs" and c.skipped for c in plan.checks)
    monkeypatch.setattr(acceptance, "detect_nvidia", lambda: ONE_GPU)
    assert acceptance.detect_machine(known, FRAMEWORKS).gpu_count == 1


def test_detect_machine_imports_no_framework():
    import subprocess

    code = ("import sys; from amp_suite.sweep.resolve import make_host; from amp_suite.doctor import acceptance; "
            "acceptance.detect_machine(make_host([]).frameworks(), ('torch', 'keras', 'jax'), device='cpu'); "
            "print([m for m in ('torch', 'tensorflow', 'jax') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


# --- the doctor's table and calibration output ------------------------------------------

DOCTOR_GPU = """\
scope    check                            status    detail
-------  -------------------------------  --------  ------------------------------------------------------------
machine  NVIDIA GPU                       passed    NVIDIA H100 80GB HBM3 (driver 580.65.06, sm 9.0)
torch    sees the expected device         passed    GPU: NVIDIA H100 80GB HBM3, sm 9.0, driver 580.65.06, CUDA 13.0, cuDNN 9.20.0
torch    fp32 matmul is fp32              passed    [GPU] 1024.1024 (float32 gives 1024.1024)
keras    sees the expected device         passed    GPU: NVIDIA H100 80GB HBM3, sm 9.0, CUDA 12.9, cuDNN 9.3.0
keras    fp32 matmul is fp32              passed    [GPU] 1024.1024 (float32 gives 1024.1024)
keras    fp32 conv is fp32                passed    [GPU] 1024.1024 (float32 gives 1024.1024)
keras    tf32 matmul is TF32              passed    [GPU] 1024.0000 (TF32 gives 1024.0)
keras    tf32 conv is TF32                passed    [GPU] 1024.0000 (TF32 gives 1024.0)
jax      sees the expected device         passed    GPU: NVIDIA H100 80GB HBM3, sm 9.0, CUDA 12.9, cuDNN 9.8.0
jax      fp32 matmul is fp32              passed    [GPU] 1024.1024 (float32 gives 1024.1024)
jax      fp32 conv is fp32                passed    [GPU] 1024.1024 (float32 gives 1024.1024)
jax      tf32 matmul is TF32              passed    [GPU] 1024.0000 (TF32 gives 1024.0)
jax      tf32 conv is TF32                passed    [GPU] 1024.0000 (TF32 gives 1024.0)
13 passed, 0 failed, 0 skipped
"""


def ok(stdout: str = "", code: int = 0) -> CommandResult:
    return CommandResult(code, stdout, "", 1.0)


def test_doctor_table_is_parsed_into_rows():
    rows = parse_doctor_table(DOCTOR_GPU)
    assert len(rows) == 13 and rows[1].scope == "torch" and rows[1].check == "sees the expected device"
    assert rows[1].detail.endswith("cuDNN 9.20.0") and rows[-1].status == "passed"
    assert parse_doctor_table("amp-suite: error: boom") == []


def test_devices_tf32_and_doctor_verdicts(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    command = plan.checks[0].command
    seen = judge_devices(ok(DOCTOR_GPU), command, frameworks=FRAMEWORKS, missing={}, gpu=True)
    assert seen.status == PASS and "cuDNN 9.8.0" in seen.observed
    assert judge_doctor(ok(DOCTOR_GPU), command).status == PASS
    assert judge_tf32(ok(DOCTOR_GPU), command, frameworks=("keras", "jax")).status == PASS

    cpu_torch = DOCTOR_GPU.replace("passed    GPU: NVIDIA H100 80GB HBM3, sm 9.0, driver 580.65.06, CUDA 13.0, "
                                   "cuDNN 9.20.0", "failed    a CPU-only build that sees no GPU")
    seen = judge_devices(ok(cpu_torch, 1), command, frameworks=FRAMEWORKS, missing={}, gpu=True)
    assert seen.status == FAIL and "torch: a CPU-only build" in seen.observed
    failed = judge_doctor(ok(cpu_torch, 1), command)
    assert failed.status == FAIL and "torch 'sees the expected device'" in failed.observed

    no_cudnn = DOCTOR_GPU.replace(", CUDA 12.9, cuDNN 9.3.0", "")
    assert "keras: the device row names no CUDA runtime and cuDNN" in judge_devices(
        ok(no_cudnn), command, frameworks=FRAMEWORKS, missing={}, gpu=True).observed

    still_fp32 = DOCTOR_GPU.replace("jax      tf32 conv is TF32                passed    [GPU] 1024.0000",
                                    "jax      tf32 conv is TF32                failed    [GPU] 1024.1024")
    tf32 = judge_tf32(ok(still_fp32, 1), command, frameworks=("keras", "jax"))
    assert tf32.status == FAIL and "jax 'tf32 conv is TF32' failed" in tf32.observed

    two_cudnn = DOCTOR_GPU.replace(
        "keras    fp32 matmul is fp32 ",
        f"keras    {'one cuDNN build loaded':<33}failed    two cuDNN builds mapped: 9.3.0, 9.20.0\n"
        "keras    fp32 matmul is fp32 ")
    cudnn = judge_devices(ok(two_cudnn, 1), command, frameworks=FRAMEWORKS, missing={}, gpu=True)
    assert cudnn.status == FAIL and "keras 'one cuDNN build loaded' failed: two cuDNN builds" in cudnn.observed
    one_cudnn = two_cudnn.replace("failed    two cuDNN builds mapped: 9.3.0, 9.20.0", "passed    cuDNN 9.3.0")
    assert "(loaded: cuDNN 9.3.0)" in judge_devices(ok(one_cudnn), command, frameworks=FRAMEWORKS, missing={},
                                                    gpu=True).observed

    hung = CommandResult(None, "", "", 1000.0)
    assert "timed out" in judge_doctor(hung, command).observed


def test_a_missing_framework_fails_on_a_gpu_but_not_on_a_cpu(tmp_path):
    table = DOCTOR_GPU + ""
    missing = {"jax": "pip install 'amp-suite[jax]'"}
    command = plan_for(ONE_GPU, tmp_path).checks[0].command
    gpu = judge_devices(ok(table), command, frameworks=FRAMEWORKS, missing=missing, gpu=True)
    assert gpu.status == FAIL and "jax is not installed" in gpu.observed
    cpu_table = "\n".join(line.replace("GPU: NVIDIA H100 80GB HBM3", "CPU (a CPU-only build)")
                          for line in DOCTOR_GPU.splitlines())
    cpu = judge_devices(ok(cpu_table), command, frameworks=FRAMEWORKS, missing=missing, gpu=False)
    assert cpu.status == PASS and "skipped: jax is not installed" in cpu.observed


CALIBRATION = """\
torch 2.13.0 on gpu NVIDIA H100 80GB HBM3 (21.4 s):
  fp32 matmul 51.000 TFLOP/s conv 20.000 TFLOP/s
  tf32 matmul 370.000 TFLOP/s conv 90.000 TFLOP/s, 7.25x fp32
  fp16 matmul 700.000 TFLOP/s conv 150.000 TFLOP/s, 13.73x fp32
  bf16 matmul 690.000 TFLOP/s conv n/a, 13.53x fp32
keras 2.21.0 on gpu NVIDIA H100 80GB HBM3 (30.1 s):
  fp32 matmul 50.000 TFLOP/s conv 19.000 TFLOP/s
  tf32 matmul 360.000 TFLOP/s conv 80.000 TFLOP/s, 7.20x fp32
  fp16 matmul 650.000 TFLOP/s conv 140.000 TFLOP/s, 13.00x fp32
  bf16 matmul 40.000 TFLOP/s conv 10.000 TFLOP/s, 0.80x fp32
calibration: /home/u/.cache/amp-suite/calibration/abc.json
"""


def test_calibration_needs_reduced_precision_above_fp32(tmp_path):
    figures = parse_calibration(CALIBRATION)
    assert figures["torch"].kind == "gpu" and figures["torch"].peaks == {
        "fp32": 51.0, "tf32": 370.0, "fp16": 700.0, "bf16": 690.0}
    command = check(plan_for(ONE_GPU, tmp_path), "calibration").command
    torch_only = judge_calibration(ok(CALIBRATION), command, frameworks=("torch",))
    assert torch_only.status == PASS and "tf32 7.3x" in torch_only.observed
    verdict = judge_calibration(CommandResult(1, CALIBRATION, "jax: calibration failed: probe crashed", 9.0),
                                command, frameworks=FRAMEWORKS)
    assert verdict.status == FAIL
    assert "keras: bf16 40.0 TFLOP/s is not above fp32 50.0" in verdict.observed
    assert "jax: no figures (jax: calibration failed: probe crashed)" in verdict.observed


# --- a sweep's results.jsonl -------------------------------------------------------------


def row(framework, precision, throughput, *, status="ok", workload="cifar10_resnet18", devices=1, **metrics):
    base = {"throughput": throughput, "telemetry_source": "NVML (GPU 0)", "energy_per_image_j": 0.002,
            "measurement_flags": []}
    base.update(metrics)
    key = f"{framework}/{workload}/{precision}/" + (f"d{devices}/" if devices != 1 else "") + "r0"
    return {"key": key, "framework": framework, "workload": workload, "precision": precision, "repeat": 0,
            "status": status, "error": "" if status == "ok" else "RuntimeError: CUDA error: boom",
            "config": {"devices": devices}, "device": {"kind": "gpu", "name": H100.name},
            "metrics": base if status == "ok" else {},
            "environment": {"cuda_runtime_version": "13.0", "cudnn_version": "9.20.0"}}


SPEED = {"fp32": 10000.0, "tf32": 14000.0, "amp_fp16": 25000.0, "amp_bf16": 24000.0}


def good_rows(frameworks=FRAMEWORKS):
    return [row(fw, p, t) for fw in frameworks for p, t in SPEED.items()]


def write_rows(path: Path, rows) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{torn")
    return path


def sweep_verdict(tmp_path, rows, result=None):
    command = check(plan_for(ONE_GPU, tmp_path), "sweep-torch").command
    write_rows(Path(command.out_dir), rows)
    return judge_sweep_command(result or ok(), command, judge_rows=partial(judge_gpu_sweep, frameworks=FRAMEWORKS))


def test_a_good_gpu_sweep_passes(tmp_path):
    verdict = sweep_verdict(tmp_path, good_rows())
    assert verdict.status == PASS, verdict.observed
    assert "12 cells ok" in verdict.observed and "torch fp16 2.50x bf16 2.40x" in verdict.observed
    assert "NVML (GPU 0)" in verdict.observed


@pytest.mark.parametrize("change,needle", [
    (lambda rows: rows.__setitem__(6, row("keras", "amp_fp16", 0, status="failed")),
     "keras/cifar10_resnet18/amp_fp16 failed: RuntimeError: CUDA error: boom"),
    (lambda rows: rows.__setitem__(1, row("torch", "tf32", 14000.0, telemetry_source=None)),
     "torch/cifar10_resnet18/tf32: no telemetry_source recorded"),
    (lambda rows: rows.__setitem__(1, row("torch", "tf32", 14000.0, telemetry_source="RAPL")),
     "torch/cifar10_resnet18/tf32: telemetry_source is 'RAPL', not NVML"),
    (lambda rows: rows.__setitem__(9, row("jax", "tf32", 14000.0, energy_per_image_j=0)),
     "jax/cifar10_resnet18/tf32: energy_per_image_j is 0, not above 0"),
    (lambda rows: rows.__setitem__(11, row("jax", "amp_bf16", 24000.0,
                                           measurement_flags=["timed region 0.2 s is too short"])),
     "jax/cifar10_resnet18/amp_bf16: measurement_flags: timed region 0.2 s is too short"),
    (lambda rows: rows.__setitem__(7, row("keras", "amp_bf16", 9000.0)),
     "keras/cifar10_resnet18/amp_bf16: speed-up 0.90x over fp32 (9,000 vs 10,000 img/s)"),
    (lambda rows: rows.pop(0), "torch/cifar10_resnet18/fp32: no result"),
])
def test_each_bad_cell_fails_the_sweep_naming_the_cell(tmp_path, change, needle):
    rows = good_rows()
    change(rows)
    verdict = sweep_verdict(tmp_path, rows)
    assert verdict.status == FAIL and needle in verdict.observed, verdict.observed


def test_a_noisy_timing_flag_is_reported_not_failed(tmp_path):
    """On an H100 eager PyTorch's tf32 cell varied 12% over five windows: the ⚑ doing its job, not a broken path."""
    rows = good_rows()
    noisy = "noisy timing: throughput varied by 12% (coefficient of variation) over the cell's 5 timed windows"
    rows[1] = row("torch", "tf32", 14000.0, measurement_flags=[noisy])
    verdict = sweep_verdict(tmp_path, rows)
    assert verdict.status == PASS and f"torch/cifar10_resnet18/tf32 flagged: {noisy}" in verdict.observed
    rows[1] = row("torch", "tf32", 14000.0, measurement_flags=[noisy, "GPU clocks throttled (hw slowdown)"])
    verdict = sweep_verdict(tmp_path, rows)
    assert verdict.status == FAIL and "measurement_flags: GPU clocks throttled (hw slowdown)" in verdict.observed


def test_a_cell_rerun_later_counts_by_its_latest_row(tmp_path):
    rows = good_rows()
    rows.insert(0, row("torch", "fp32", 0, status="oom"))
    assert sweep_verdict(tmp_path, rows).status == PASS
    out = Path(check(plan_for(ONE_GPU, tmp_path), "sweep-torch").command.out_dir)
    assert len(read_results(out / "results.jsonl")) == 12


def test_a_sweep_that_stored_nothing_or_timed_out_fails(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path)
    command = check(plan, "fused").command
    error = CommandResult(2, "", "amp-suite: error: fused.toml: [frameworks.torch]: unknown key 'fused'", 0.5)
    verdict = judge_sweep_command(error, command, judge_rows=judge_fused)
    assert verdict.status == FAIL and "unknown key 'fused'" in verdict.observed
    assert "results.jsonl" in verdict.observed
    late = sweep_verdict(tmp_path, good_rows(), CommandResult(None, "", "", 960.0))
    assert late.status == FAIL and "timed out after 960 s" in late.observed


def test_fused_optimizer_and_cpu_sweep_verdicts():
    fused = [row("torch", "amp_fp16", 30000.0, optimizer_implementation="fused")]
    assert judge_fused(fused).status == PASS
    foreach = judge_fused([row("torch", "amp_fp16", 30000.0, optimizer_implementation="foreach")])
    assert foreach.status == FAIL and "optimizer_implementation is 'foreach', not 'fused'" in foreach.observed

    cpu = [row("torch", "fp32", 300.0, workload="mnist_cnn", telemetry_source="none: no RAPL counters readable",
               energy_per_image_j=None, measurement_flags=["timed region of 4 steps is too short"]),
           row("keras", "fp32", 400.0, workload="mnist_cnn", telemetry_source="RAPL (package 0)")]
    verdict = judge_cpu_sweep(cpu, frameworks=("torch", "keras"))
    assert verdict.status == PASS and "none: no RAPL counters readable" in verdict.observed
    assert "torch flagged" in verdict.observed
    cpu[1]["metrics"]["energy_per_image_j"] = None
    assert "keras/mnist_cnn/fp32: telemetry RAPL (package 0) but energy_per_image_j is None" in judge_cpu_sweep(
        cpu, frameworks=("torch", "keras")).observed
    del cpu[0]["metrics"]["telemetry_source"]
    assert "torch/mnist_cnn/fp32: no telemetry_source recorded" in judge_cpu_sweep(
        cpu, frameworks=("torch",)).observed


# --- the runner with a fake command runner -----------------------------------------------------


class FakeAmpSuite:
    """Answers each amp-suite command as a healthy H100 machine would; ``break_fused`` makes one fail."""

    def __init__(self, break_fused: bool = False):
        self.break_fused = break_fused
        self.calls: list[list[str]] = []

    def __call__(self, args, timeout_s):
        self.calls.append(list(args))
        assert timeout_s > 0
        if args[0] == "doctor":
            return ok(DOCTOR_GPU)
        if args[0] == "calibrate":
            keras = CALIBRATION.replace("bf16 matmul 40.000 TFLOP/s conv 10.000", "bf16 matmul 600.000 TFLOP/s "
                                                                                  "conv 10.000")
            jax = "\n".join(keras.splitlines()[:5]).replace("torch", "jax")
            return ok(keras + jax + "\n")
        out = Path(args[args.index("--out") + 1])
        if "--devices" in args:
            rows = [row(fw, "amp_bf16", 40000.0, devices=2) for fw in FRAMEWORKS]
        elif "fused.toml" in args[args.index("--config") + 1]:
            rows = [row("torch", "amp_fp16", 30000.0,
                        optimizer_implementation="foreach" if self.break_fused else "fused")]
        else:
            rows = good_rows(tuple(args[args.index("--frameworks") + 1].split(",")))
        write_rows(out, rows)
        (out / "environment.json").write_text(json.dumps({
            "amp_suite_version": "9.9", "python": "3.11.7", "platform": "Linux", "cpu_model": "Xeon",
            "cpu_count": 16, "packages": {"torch": "2.13.0", "tensorflow": "2.21.0", "jax": "0.10.2"}}))
        (out / "report.md").write_text("# report\n")
        return ok("wrote report.md")


def test_the_runner_prints_each_check_and_writes_the_report(tmp_path):
    plan = plan_for(ONE_GPU, tmp_path / "runs")
    fake, lines = FakeAmpSuite(), []
    run = run_plan(plan, run_command=fake, emit=lines.append)
    assert run.exit_code == 0
    assert [c[0] for c in fake.calls] == ["doctor", "run", "run", "run", "calibrate", "run"]  # the doctor ran once
    assert [line.split("]")[0] + "]" for line in lines] == ["[PASS]"] * 8 + ["[SKIP]"]
    assert lines[0].startswith("[PASS] frameworks see the GPU — expected torch, keras, jax installed")
    assert "; saw torch: GPU: NVIDIA H100" in lines[0]
    assert lines[-1].startswith("[SKIP] data-parallel cell on 2 GPUs — needs 2 or more NVIDIA GPUs")
    report = render_report(run)
    assert report.startswith("# amp-suite acceptance: PASSED")
    for fact in ("GPU 0: NVIDIA H100 80GB HBM3, driver 580.65.06, sm 9.0", "torch 2.13.0", "jax 0.10.2",
                 "PyTorch ran with CUDA 13.0, cuDNN 9.20.0", "| 4 | sweep-torch | four-precision ResNet-18 sweep (PyTorch) | **PASS** |",
                 str(tmp_path / "runs" / "sweep-jax" / "report.md"), "| **SKIP** |", "## GPU figures",
                 "| JAX | amp_bf16 | 24,000 | 2.40x | 1.71x |"):
        assert fact in report, fact
    assert (tmp_path / "runs" / "logs" / "01-doctor.log").read_text().startswith("$ amp-suite doctor --device gpu")


def test_a_failed_check_makes_exit_code_1_and_the_report_says_which(monkeypatch, tmp_path):
    monkeypatch.setattr(acceptance, "detect_nvidia", lambda: TWO_GPUS)
    monkeypatch.setattr(acceptance, "detect_machine", lambda known, requested, device="auto": machine(TWO_GPUS))
    lines: list[str] = []
    report = tmp_path / "acc.md"
    code = acceptance.run_acceptance(device="auto", frameworks=None, known=dict.fromkeys(FRAMEWORKS),
                                     report=str(report), run_command=FakeAmpSuite(break_fused=True),
                                     emit=lines.append, workdir=tmp_path / "runs")
    assert code == 1
    fused = next(line for line in lines if "fused-optimizer" in line)
    assert fused.startswith("[FAIL] fused-optimizer fp16 path — expected")
    assert "saw torch/cifar10_resnet18/amp_fp16: optimizer_implementation is 'foreach'" in fused
    assert next(line for line in lines if "data-parallel" in line).startswith("[PASS]")
    assert lines[-1] == f"8 passed, 1 failed, 0 skipped; report: {report}"
    text = report.read_text()
    assert text.startswith("# amp-suite acceptance: FAILED")
    assert "| 8 | fused | fused-optimizer fp16 path | **FAIL** |" in text
    assert "amp-suite doctor --acceptance --device auto --frameworks torch,keras,jax" in text


def test_a_file_where_the_reports_state_goes_is_kept_unless_amp_suite_wrote_it(monkeypatch, tmp_path):
    """``--report package.md`` keeps its state in package.json: a user's package.json (or a sweep's
    environment.json, for ``--report out/environment.md``) is refused in one line before any check runs."""
    from amp_suite.errors import UsageError

    monkeypatch.setattr(acceptance, "detect_machine", lambda known, requested, device="auto": machine(TWO_GPUS))
    (tmp_path / "package.json").write_text('{"name": "my-app"}')

    def accept(**keywords):
        return acceptance.run_acceptance(device="auto", frameworks=None, known=dict.fromkeys(FRAMEWORKS),
                                         report=str(tmp_path / "package.md"), run_command=FakeAmpSuite(),
                                         emit=lambda line: None, workdir=tmp_path / "runs", **keywords)

    with pytest.raises(UsageError, match=r"package.json' \(where the report's state goes\) exists and is not a "
                                         r"file amp-suite doctor --acceptance wrote"):
        accept()
    assert (tmp_path / "package.json").read_text() == '{"name": "my-app"}' and not (tmp_path / "package.md").exists()
    assert accept(force=True) == 0 and json.loads((tmp_path / "package.json").read_text())["mode"]
    assert accept() == 0  # its own state now: replaced without --force


def test_the_cli_takes_acceptance_and_report(monkeypatch, tmp_path, capsys):
    from amp_suite import cli

    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return 1

    monkeypatch.setattr(acceptance, "run_acceptance", fake_run)
    code = cli.main(["doctor", "--acceptance", "--frameworks", "torch", "--device", "cpu",
                     "--report", str(tmp_path / "r.md")])
    assert code == 1
    assert seen["frameworks"] == ("torch",) and seen["device"] == "cpu" and seen["report"] == str(tmp_path / "r.md")
    assert cli.main(["doctor", "--report", "x.md", "--frameworks", "torch"]) == 2
    assert "--report goes with --acceptance" in capsys.readouterr().err


def test_the_cli_hands_the_acceptance_a_command_runner_that_runs_this_amp_suite(monkeypatch):
    """The doctor does not name the command line above it: the CLI hands its own command down."""
    from amp_suite import cli
    from amp_suite.markers import __version__

    seen = {}
    monkeypatch.setattr(acceptance, "run_acceptance", lambda **kwargs: seen.update(kwargs) or 0)
    assert cli.main(["doctor", "--acceptance", "--frameworks", "torch", "--device", "cpu"]) == 0
    result = seen["run_command"](["--version"], 60)
    assert result.returncode == 0 and result.stdout.strip() == f"amp-suite {__version__}"
