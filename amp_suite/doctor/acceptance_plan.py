"""Which acceptance checks this machine can run, as a typed plan (:func:`build_plan`).

The plan is pure: a :class:`~.acceptance_records.Machine` and the requested
frameworks in, an :class:`~.acceptance_records.AcceptancePlan` out, each check
holding the ``amp-suite`` command it runs, its time limit and expected
seconds, its judge (:mod:`.acceptance_checks`) and, where the machine lacks
what it needs, why it is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from amp_suite.doctor.acceptance_checks import (
    CUDNN_ROW,
    judge_calibration,
    judge_cpu_sweep,
    judge_data_parallel,
    judge_devices,
    judge_doctor,
    judge_fused,
    judge_gpu_sweep,
    judge_sweep_command,
    judge_tf32,
)
from amp_suite.doctor.acceptance_records import (
    CPU_DATA,
    CPU_SWEEP_STEPS,
    CPU_WORKLOAD,
    DISPLAY,
    DP_PRECISION,
    DP_STEPS,
    GPU_DATA,
    GPU_PRECISIONS,
    GPU_SWEEP_STEPS,
    GPU_WORKLOAD,
    NEED_ANY_FRAMEWORK,
    NEED_GPU,
    NEED_TF32,
    NEED_TWO_GPUS,
    XLA_FRAMEWORKS,
    AcceptanceCheck,
    AcceptancePlan,
    Command,
    Machine,
    framework_list,
    need_framework,
)

# Time limits, in seconds: each cell (amp-suite run --timeout), each doctor
# probe (amp-suite doctor --timeout), and each whole command.  Typical times on
# one H100 are far below them: doctor ~3 min, calibration ~3 min, sweep ~10 min.
CELL_TIMEOUT_S = 240
PROBE_TIMEOUT_S = 300
DOCTOR_TIMEOUT_S = 1000
CALIBRATE_TIMEOUT_S = 900
CALIBRATE_BUDGET_S = 0.5
FUSED_TIMEOUT_S = 420
DP_TIMEOUT_S = 1200
CPU_SWEEP_TIMEOUT_S = 900
# Expected seconds of each command on one H100 (docs/gpu.md quotes the measured ones): what the
# budget planner (amp_suite.doctor.phases) adds up.  Measured on H100s on 2026-11-26: the doctor took
# 100 s for PyTorch and JAX and 91 s for keras@jax alone; PyTorch's four ResNet-18 cells 132 s (300 steps
# x 2 epochs a cell, now 200 x 1), JAX's first two 71 s and its last two, on a fresh machine, 141 s
# (compilation included).
DOCTOR_BASE_S = 15.0
DOCTOR_PER_FRAMEWORK_S = 50.0
DOCTOR_PER_FRAMEWORK_CPU_S = 45.0
GPU_SWEEP_ESTIMATE_S = {"torch": 110.0, "jax": 200.0, "keras": 160.0, "other": 200.0}
CPU_SWEEP_ESTIMATE_S = 40.0
CALIBRATE_BASE_S = 10.0
CALIBRATE_PER_FRAMEWORK_S = 45.0
FUSED_ESTIMATE_S = 40.0
DP_PER_FRAMEWORK_S = 120.0

# An empty configuration: the sweeps run from the packaged catalog, whatever ./benchmarks.toml says.
NEUTRAL_CONFIG = ("# amp-suite doctor --acceptance: declares nothing, so the sweeps run from the\n"
                  "# packaged catalog whatever ./benchmarks.toml in the working directory says.\n")
FUSED_CONFIG = ("# amp-suite doctor --acceptance: PyTorch's fused optimizer, channels-last convolutions.\n"
                "[frameworks.torch]\nfused = true\nchannels_last = true\n")


def build_plan(machine: Machine, frameworks: Sequence[str], workdir: Path, *, device: str = "auto",
               plugins: Sequence[str] = ()) -> AcceptancePlan:
    """The checks for ``machine``, the most informative first, each skipped with its reason where the
    machine lacks what it needs.

    GPU mode (``device`` gpu, or auto on a machine with an NVIDIA GPU) checks
    the GPU paths; CPU mode runs what a CPU can and skips the rest.  With
    ``--device gpu`` on a machine without a GPU, the GPU checks run and fail.
    The order is the order of information: the doctor (does each framework see
    the GPU at all), then one four-precision sweep per framework (the figures
    the tool exists for), the calibration (the ceiling beside them), the fused
    optimizer, data parallel.  Each GPU sweep is its own command, so a phase
    with little time runs some frameworks and ``--resume`` the others.
    """
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"unknown device {device!r}; allowed: auto, cpu, gpu")
    mode = "gpu" if device == "gpu" or (device == "auto" and machine.inventory.present) else "cpu"
    requested = tuple(frameworks)
    sweep = tuple(f for f in requested if f in machine.installed)
    workdir = Path(workdir)
    plugin_args = tuple(a for p in plugins for a in ("-p", p))
    neutral = str(workdir / "acceptance.toml")
    checks: list[AcceptanceCheck] = []

    dev = "gpu" if mode == "gpu" else "cpu"
    doctor = Command(("doctor", "--device", dev, "--frameworks", ",".join(requested),
                      "--timeout", str(PROBE_TIMEOUT_S), *plugin_args), DOCTOR_TIMEOUT_S)
    doctor_s = estimate_doctor_s(requested, mode)
    if mode == "gpu":
        checks.append(AcceptanceCheck(
            "frameworks see the GPU", doctor,
            f"{framework_list(requested)} installed, each with a row 'sees the expected device' that passes on the "
            "GPU and names the CUDA runtime and cuDNN it loaded, and (where the doctor has it) "
            f"'{CUDNN_ROW}' passes",
            partial(judge_devices, frameworks=requested, missing=machine.missing, gpu=True),
            key="devices", estimate_s=doctor_s))
    else:
        checks.append(AcceptanceCheck(
            "frameworks installed and see the CPU", doctor,
            "at least one of the requested frameworks installed, each installed one passing "
            "'sees the expected device' on the CPU",
            partial(judge_devices, frameworks=requested, missing=machine.missing, gpu=False),
            key="devices", estimate_s=doctor_s))
    checks.append(AcceptanceCheck(
        "doctor passes", doctor, f"`amp-suite doctor --device {dev}` exits 0 with no failed row",
        judge_doctor, key="doctor", estimate_s=doctor_s))
    xla = tuple(f for f in XLA_FRAMEWORKS if f in requested)
    checks.append(AcceptanceCheck(
        "TF32 on/off through XLA", doctor,
        f"{framework_list(xla) or 'Keras and JAX'}: 'fp32 matmul/conv is fp32' (1024.1024, TF32 off) and "
        "'tf32 matmul/conv is TF32' (1024.0, TF32 on) rows pass",
        partial(judge_tf32, frameworks=xla),
        needs=(NEED_TF32, " or ".join(need_framework(f) for f in XLA_FRAMEWORKS if f in requested or f != "keras@jax")),
        key="tf32", estimate_s=doctor_s))
    tf32_ok = not machine.tf32_blocker

    if mode == "gpu":
        for fw in requested:
            out = str(workdir / f"sweep-{fw}")
            command = Command(("run", "--config", neutral, "--frameworks", fw, "--workloads", GPU_WORKLOAD,
                               "--precisions", ",".join(GPU_PRECISIONS), "--device", "gpu", *GPU_DATA,
                               *GPU_SWEEP_STEPS, "--timeout", str(CELL_TIMEOUT_S), "--out", out, "-q",
                               *plugin_args),
                              CELL_TIMEOUT_S * len(GPU_PRECISIONS), files=((neutral, NEUTRAL_CONFIG),), out_dir=out)
            checks.append(AcceptanceCheck(
                f"four-precision ResNet-18 sweep ({DISPLAY.get(fw, fw)})", command,
                f"{len(GPU_PRECISIONS)} {fw} cells ({', '.join(GPU_PRECISIONS)}) ok on the GPU; amp_fp16 and "
                "amp_bf16 faster than fp32 (their speed-up over tf32, the GPU's busy time and the calibrated "
                "ceiling are reported); every row with telemetry_source NVML..., energy_per_image_j > 0 and no "
                "measurement_flags",
                partial(judge_sweep_command, judge_rows=partial(judge_gpu_sweep, frameworks=(fw,), tf32=tf32_ok)),
                needs=(NEED_GPU, need_framework(fw)), key=f"sweep-{fw}", estimate_s=estimate_sweep_s(fw)))
    else:
        out = str(workdir / "sweep")
        command = Command(("run", "--config", neutral, "--frameworks", ",".join(sweep), "--workloads", CPU_WORKLOAD,
                           "--precisions", "fp32", "--device", "cpu", *CPU_DATA, *CPU_SWEEP_STEPS,
                           "--timeout", str(CELL_TIMEOUT_S), "--out", out, "-q", *plugin_args),
                          CPU_SWEEP_TIMEOUT_S, files=((neutral, NEUTRAL_CONFIG),), out_dir=out)
        checks.append(AcceptanceCheck(
            "CPU sweep (mnist_cnn, fp32)", command,
            f"{len(sweep)} cell(s) ({framework_list(sweep)}, fp32) ok on the CPU, each with telemetry_source "
            "'RAPL...' (then energy_per_image_j > 0) or 'none: reason'",
            partial(judge_sweep_command, judge_rows=partial(judge_cpu_sweep, frameworks=sweep)),
            needs=(NEED_ANY_FRAMEWORK,), key="sweep", estimate_s=CPU_SWEEP_ESTIMATE_S * max(len(sweep), 1)))

    calibrate = Command(("calibrate", "--device", "gpu", "--frameworks", ",".join(sweep or requested),
                         "--force", "--budget", str(CALIBRATE_BUDGET_S), *plugin_args), CALIBRATE_TIMEOUT_S)
    checks.append(AcceptanceCheck(
        "calibration", calibrate,
        f"every framework measured on the GPU, its {'tf32, fp16 and bf16' if tf32_ok else 'fp16 and bf16'} "
        "peaks above its fp32 peak",
        partial(judge_calibration, frameworks=sweep, tf32=tf32_ok), needs=(NEED_GPU, NEED_ANY_FRAMEWORK),
        key="calibration", estimate_s=CALIBRATE_BASE_S + CALIBRATE_PER_FRAMEWORK_S * max(len(sweep), 1)))

    fused_config = str(workdir / "fused.toml")
    out = str(workdir / "fused")
    command = Command(("run", "--config", fused_config, "--frameworks", "torch", "--workloads", GPU_WORKLOAD,
                       "--precisions", "amp_fp16", "--device", "gpu", *GPU_DATA, *GPU_SWEEP_STEPS,
                       "--timeout", str(CELL_TIMEOUT_S), "--out", out, "-q", *plugin_args),
                      FUSED_TIMEOUT_S, files=((fused_config, FUSED_CONFIG),), out_dir=out)
    checks.append(AcceptanceCheck(
        "fused-optimizer fp16 path", command,
        f"the PyTorch amp_fp16 {GPU_WORKLOAD} cell with [frameworks.torch] fused = true is ok on the GPU and "
        "records optimizer_implementation = fused",
        partial(judge_sweep_command, judge_rows=judge_fused), needs=(NEED_GPU, need_framework("torch")),
        key="fused", estimate_s=FUSED_ESTIMATE_S))

    out = str(workdir / "data-parallel")
    command = Command(("run", "--config", neutral, "--frameworks", ",".join(sweep), "--workloads", GPU_WORKLOAD,
                       "--precisions", DP_PRECISION, "--devices", "2", "--device", "gpu", *GPU_DATA, *DP_STEPS,
                       "--timeout", str(CELL_TIMEOUT_S), "--out", out, "-q", *plugin_args),
                      DP_TIMEOUT_S, files=((neutral, NEUTRAL_CONFIG),), out_dir=out)
    checks.append(AcceptanceCheck(
        "data-parallel cell on 2 GPUs", command,
        f"one {DP_PRECISION} {GPU_WORKLOAD} cell per framework ({framework_list(sweep)}) on 2 GPUs (--devices 2), each ok",
        partial(judge_sweep_command, judge_rows=partial(judge_data_parallel, frameworks=sweep)),
        needs=(NEED_TWO_GPUS, NEED_ANY_FRAMEWORK), key="data-parallel",
        estimate_s=DP_PER_FRAMEWORK_S * max(len(sweep), 1)))

    planned = tuple(_with_skip(c, machine, mode, device, sweep) for c in checks)
    return AcceptancePlan(mode, device, requested, machine, workdir, planned)


def estimate_doctor_s(frameworks: Sequence[str], mode: str) -> float:
    """The doctor's expected seconds: a fixed part and one probe per framework."""
    per = DOCTOR_PER_FRAMEWORK_S if mode == "gpu" else DOCTOR_PER_FRAMEWORK_CPU_S
    return DOCTOR_BASE_S + per * max(len(frameworks), 1)


def estimate_sweep_s(framework: str) -> float:
    """One framework's four-precision ResNet-18 sweep on an H100, compilation included."""
    return GPU_SWEEP_ESTIMATE_S.get(framework, GPU_SWEEP_ESTIMATE_S["other"])


def _with_skip(check: AcceptanceCheck, machine: Machine, mode: str, device: str,
               sweep: tuple[str, ...]) -> AcceptanceCheck:
    reason = skip_reason(check.needs, machine, mode, device, sweep)
    return replace(check, skip_reason=reason) if reason else check


def skip_reason(needs: Sequence[str], machine: Machine, mode: str, device: str, sweep: Sequence[str]) -> str:
    """Why a check with ``needs`` cannot run on ``machine`` ("" when it can)."""
    inventory = machine.inventory
    for need in needs:
        if need in (NEED_GPU, NEED_TF32) and mode == "cpu":
            why = "--device cpu asks for the CPU" if device == "cpu" else f"this machine has {inventory.describe()}"
            return f"needs an NVIDIA GPU: {why}"
        if need == NEED_TF32 and machine.tf32_blocker:
            return f"needs TF32: {machine.tf32_blocker}"
        if need == NEED_TWO_GPUS and machine.gpu_count < 2 and not (device == "gpu" and not inventory.present):
            if mode == "cpu":
                why = "--device cpu asks for the CPU" if device == "cpu" else f"this machine has {inventory.describe()}"
            else:
                why = f"this machine has {machine.gpu_count} ({inventory.describe()})"
            return f"needs 2 or more NVIDIA GPUs: {why}"
        if need == NEED_ANY_FRAMEWORK and not sweep:
            return "needs a framework installed: none of the requested frameworks is"
        alternatives = [n.removeprefix("framework ").removesuffix(" installed") for n in need.split(" or ")
                        if n.startswith("framework ")]
        if alternatives and not any(a in machine.installed for a in alternatives):
            hints = "; ".join(f"{DISPLAY.get(a, a)}: {machine.missing.get(a, 'not requested')}" for a in alternatives)
            return f"needs {' or '.join(DISPLAY.get(a, a) for a in alternatives)} installed ({hints})"
    return ""

