"""Runs the doctor: machine checks here, one probe process per framework, one table.

No framework is imported in this process.  Each framework's probe (the module
its plugin names in ``FrameworkInfo.doctor_probe``; a plugin that names none
gets a skipped row) runs in a fresh interpreter with the plugin's environment
variables as the sweep's worker sets them: defaults that a value the user
exported wins over (JAX's ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` among
them).  One exception: TensorFlow's log level is lowered to show warnings,
because its library-load warnings are what explains a GPU it cannot use; the
probe's stderr is read, never shown, and its telling lines go into the failed
checks' reasons.  The numbers a probe prints are judged by
:mod:`amp_suite.doctor.checks`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from amp_suite.doctor import checks
from amp_suite.doctor.checks import FAILED, PASSED, SKIPPED, CheckResult
from amp_suite.machine.devices import NvidiaInventory, detect_nvidia, gpu_install_line
from amp_suite.plugins import host_memory
from amp_suite.processes import tree as process_tree
from amp_suite.records import FrameworkInfo

PROBE_TIMEOUT_S = 600.0
MACHINE = "machine"
# Set over the plugin's (and the user's) value in the doctor's probes only: the
# warnings TensorFlow prints while loading CUDA libraries are the diagnosis.
DOCTOR_ENV = {"TF_CPP_MIN_LOG_LEVEL": "0"}

class ProbeRunner(Protocol):
    """Runs one framework's probe (in ``python``, an environment's interpreter, when given); returns its
    report, or raises :class:`ProbeError`."""

    def __call__(self, framework: FrameworkInfo, device: str, timeout_s: float, *,
                 python: str = "") -> dict[str, Any]: ...


class ProbeError(Exception):
    """A probe process crashed, hung or printed no report; ``notes``: the telling lines of its stderr."""

    def __init__(self, message: str, notes: list[str] | None = None) -> None:
        super().__init__(message)
        self.notes = list(notes or [])


def probe_env(framework: FrameworkInfo, base: dict[str, str] | None = None) -> dict[str, str]:
    """The probe's environment: ``base`` (this process's), the plugin's variables only where unset."""
    env = dict(os.environ if base is None else base)
    for name, value in framework.env.items():
        env.setdefault(name, value)  # as amp_suite.cell.worker does: the user's value wins
    env.update(DOCTOR_ENV)
    return env


@dataclass(frozen=True)
class EnvironmentProbe:
    """An environment the doctor probes: its name, interpreter, framework, and why it cannot run ("" if it can)."""

    name: str
    python: str
    framework: FrameworkInfo
    problem: str = ""
    environment: str = ""  # the environment's own name where ``name`` is a framework a sweep runs there


@dataclass(frozen=True)
class DoctorPlan:
    """What the doctor checks: the device the user expects, the frameworks and the environments to probe."""

    device: str  # auto | cpu | gpu
    frameworks: tuple[FrameworkInfo, ...]
    timeout_s: float = PROBE_TIMEOUT_S
    environments: tuple[EnvironmentProbe, ...] = ()

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "gpu"):
            raise ValueError(f"unknown device {self.device!r}; allowed: auto, cpu, gpu")


def subprocess_probe(framework: FrameworkInfo, device: str, timeout_s: float, *, python: str = "") -> dict[str, Any]:
    """``python -m DOCTOR_PROBE DEVICE`` with the framework's environment; its JSON report.

    ``python``: an environment's interpreter, which keeps its own import path.
    """
    from amp_suite.launchers.child_process import exit_description, isolated_command, isolated_env

    env = isolated_env(probe_env(framework), own_path=bool(python))
    try:  # a supervised tree: the time limit ends the probe and everything it started
        done = process_tree.run(isolated_command(framework.doctor_probe, "cpu" if device == "cpu" else "auto",
                                                 python=python),
                                capture_output=True, text=True, timeout=timeout_s, env=env,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ProbeError(f"no answer within {timeout_s:g} s") from None
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        report = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        report = None
    notes = checks.log_notes(done.stderr.splitlines())
    if done.returncode != 0 or not isinstance(report, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeError(f"probe {exit_description(done.returncode)}: {tail[:300]}", notes)
    report["stderr_notes"] = notes
    return report


def machine_checks(plan: DoctorPlan, inventory: NvidiaInventory) -> list[CheckResult]:
    """Framework-neutral rows: the NVIDIA GPU (or its absence) and the host's peak-RSS figure."""
    rows = []
    if inventory.present:
        rows.append(CheckResult(MACHINE, "NVIDIA GPU", PASSED, inventory.describe()))
    elif plan.device == "gpu":
        rows.append(CheckResult(MACHINE, "NVIDIA GPU", FAILED, f"--device gpu, but {inventory.describe()}"))
    else:
        rows.append(CheckResult(MACHINE, "NVIDIA GPU", SKIPPED,
                                f"{inventory.describe()}: GPU checks are skipped, CPU checks run"))
    reset = host_memory.reset_peak_rss()
    peak = host_memory.peak_rss_bytes()
    rows.append(CheckResult(MACHINE, "peak RSS (CPU memory figure)", PASSED if peak > 0 else FAILED,
                            f"{peak / 2**20:.0f} MiB now; " + ("resettable (VmHWM)" if reset else
                                                               "not resettable here: peaks count from start")))
    return rows


def framework_checks(info: FrameworkInfo, report: dict[str, Any], *, expect_gpu: bool,
                     inventory: NvidiaInventory) -> list[CheckResult]:
    """Every row of one framework, judged from its probe's report."""
    name = info.name
    device = report.get("device") or {}
    on_gpu = device.get("kind") == "gpu"
    capability = str(device.get("compute_capability") or "")
    precision = report.get("precision")
    notes = list(report.get("stderr_notes") or [])
    rows = [
        checks.judge_device(name, report.get("device"), expect_gpu=expect_gpu, machine=inventory.describe(),
                            install_line=gpu_install_line(info), machine_driver=inventory.driver, notes=notes),
        checks.judge_fp32(name, "matmul", precision),
        checks.judge_fp32(name, "conv", precision),
        checks.judge_tf32(name, "matmul", precision, on_gpu=on_gpu, capability=capability),
        checks.judge_tf32(name, "conv", precision, on_gpu=on_gpu, capability=capability),
        checks.judge_amp(name, "amp_fp16", "float16", report.get("amp_fp16")),
        checks.judge_amp(name, "amp_bf16", "bfloat16", report.get("amp_bf16")),
        checks.judge_loss_scale(name, report.get("loss_scale")),
        checks.judge_timing(name, report.get("timing"), on_gpu=on_gpu),
        checks.judge_memory(name, report.get("memory"), on_gpu=on_gpu),
    ]
    if on_gpu:
        rows.insert(1, checks.judge_cudnn(name, device, on_gpu=on_gpu))
    if "preallocation" in report:
        rows.append(checks.judge_preallocation(name, report.get("preallocation"), on_gpu=on_gpu))
    if "fp8" in report:  # a probe that checks its fp8 matmul (PyTorch's, on a GPU)
        rows.append(checks.judge_fp8(name, report.get("fp8")))
    if on_gpu:
        rows.append(checks.judge_nvml(name, report.get("nvml"), on_gpu=on_gpu))
    where = "GPU" if on_gpu else "CPU"
    # What the framework logged (library-load warnings, a backend that failed) explains any failure.
    logged = checks.log_notes([*(device.get("log_notes") or []), *notes])
    said = f" (framework log: {' | '.join(logged)})" if logged else ""
    out = []
    for row in rows:
        detail = row.detail
        if row.status == FAILED and row is not rows[0] and said and said not in detail:
            detail += said
        if row.status != SKIPPED and row is not rows[0]:
            detail = f"[{where}] {detail}"
        out.append(CheckResult(row.scope, row.check, row.status, detail))
    return out


def run_checks(plan: DoctorPlan, *, inventory: NvidiaInventory | None = None,
               probe: ProbeRunner = subprocess_probe,
               missing: Callable[[FrameworkInfo], list[str]] = FrameworkInfo.missing_modules,
               progress: Callable[[str], None] | None = None) -> list[CheckResult]:
    """Every row of the doctor's table, machine first, then each framework in turn."""
    inventory = inventory if inventory is not None else (
        detect_nvidia() if plan.device != "cpu" else NvidiaInventory(reason="not asked: --device cpu"))
    expect_gpu = plan.device == "gpu" or (plan.device == "auto" and inventory.present)
    rows = machine_checks(plan, inventory)
    for info in plan.frameworks:
        absent = missing(info)
        if absent:
            line = gpu_install_line(info) if expect_gpu else info.install_hint()
            rows.append(CheckResult(info.name, "installed", SKIPPED,
                                    f"{info.display_name} is not installed (missing {', '.join(absent)}): {line}"))
            continue
        if not info.doctor_probe:
            rows.append(CheckResult(info.name, "installed", SKIPPED, "the doctor has no probe for this framework "
                                    "(its plugin's FrameworkInfo.doctor_probe is empty)"))
            continue
        if progress:
            progress(f"probing {info.display_name} ...")
        rows.append(CheckResult(info.name, "runs in", PASSED, f"this interpreter ({sys.executable}), as a sweep "
                                "would run it (no environment declared or built for it)"))
        try:
            report = probe(info, plan.device, plan.timeout_s)
        except ProbeError as exc:
            rows.append(CheckResult(info.name, "probe ran", FAILED, _probe_failure(exc, info, inventory)))
            continue
        rows.extend(framework_checks(info, report, expect_gpu=expect_gpu, inventory=inventory))
    for environment in plan.environments:
        rows.extend(environment_checks(environment, plan, probe, expect_gpu=expect_gpu, inventory=inventory,
                                       progress=progress))
    return rows


def environment_checks(environment: EnvironmentProbe, plan: DoctorPlan, probe: ProbeRunner, *, expect_gpu: bool,
                       inventory: NvidiaInventory, progress: Callable[[str], None] | None = None) -> list[CheckResult]:
    """The rows of one environment: built, then its framework's checks run by its own interpreter.

    Among them, on a GPU, the cuDNN builds its process really mapped (``/proc/self/maps``): two
    builds in one environment fail, with the fix.
    """
    name, info = environment.name, environment.framework
    where = f"environment {environment.environment}: " if environment.environment else ""
    if environment.problem:
        return [CheckResult(name, "environment built", FAILED, where + environment.problem)]
    if not info.doctor_probe:
        return [CheckResult(name, "environment built", SKIPPED, f"{environment.python}; the doctor has no probe "
                            f"for {info.display_name}")]
    if progress:
        progress(f"probing {info.display_name} in environment {name} ...")
    try:
        report = probe(info, plan.device, plan.timeout_s, python=environment.python)
    except ProbeError as exc:
        return [CheckResult(name, "environment built", PASSED, where + environment.python),
                CheckResult(name, "probe ran", FAILED, _probe_failure(exc, info, inventory))]
    rows = [CheckResult(name, "environment built", PASSED, where + environment.python)]
    for row in framework_checks(info, report, expect_gpu=expect_gpu, inventory=inventory):
        rows.append(CheckResult(name, row.check, row.status, row.detail))
    return rows


def _probe_failure(exc: ProbeError, info: FrameworkInfo, inventory: NvidiaInventory) -> str:
    """A crashed probe's row: its error, what the framework logged, and a fix when the log names the cause."""
    text = str(exc)
    if exc.notes:
        text += f" (framework log: {' | '.join(exc.notes)})"
    logged = " ".join(exc.notes)
    if inventory.present and "cudnn" in logged.lower():
        text += "; fix: keep one cuDNN — drop other cuDNN folders from LD_LIBRARY_PATH (see the log above)"
    elif inventory.present and any(w in logged.lower() for w in ("driver version", "too old", "insufficient")):
        text += "; fix: update the NVIDIA driver (docs/gpu.md names the version each build needs)"
    return text


def render_table(rows: list[CheckResult]) -> str:
    """The checks as a plain-text table."""
    from tabulate import tabulate

    return tabulate([(r.scope, r.check, r.status, r.detail) for r in rows],
                    headers=("scope", "check", "status", "detail"), tablefmt="simple", disable_numparse=True)


def summary_line(rows: list[CheckResult]) -> str:
    counts = {s: sum(r.status == s for r in rows) for s in (PASSED, FAILED, SKIPPED)}
    return f"{counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped"
