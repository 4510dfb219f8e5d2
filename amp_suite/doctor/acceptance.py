"""``amp-suite doctor --acceptance``: the whole GPU checklist as one command.

A maintainer who is lent a GPU for an afternoon wants one command that walks
every path a GPU user relies on, in the order they would check it by hand, and
leaves a report to paste into an issue.  This module holds that checklist as a
typed plan (:class:`AcceptanceCheck`), decides which checks this machine can
run (:func:`build_plan`), runs them (:func:`run_plan`) and writes the markdown
report (:func:`render_report`).

Every check runs the ``amp-suite`` command line itself, as a subprocess
(``python -m amp_suite ...``) with its own time limit, and judges what that
command printed or wrote: the doctor's table and exit code, the calibration's
figures, a sweep's ``results.jsonl``.  No framework is imported in this
process; the GPU count comes from ``nvidia-smi``
(:func:`amp_suite.machine.devices.detect_nvidia`).  Several checks may share one
command (the doctor answers the first three); it runs once.

The judges are pure functions of a command's output, so the GPU verdicts are
tested on any machine by handing them what a GPU run would print.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from amp_suite.doctor.phases import BUDGET_SPENT, choose, is_pending
from amp_suite.envs.placement import describe_placement
from amp_suite.machine.devices import NvidiaInventory, detect_nvidia

PASS, FAIL, SKIP = "pass", "fail", "skipped"
LABELS = {PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}

BUILT_IN_FRAMEWORKS = ("torch", "keras", "jax")
# Frameworks whose TF32 switch goes through XLA: Keras on TensorFlow, JAX, and Keras on JAX.
XLA_FRAMEWORKS = ("keras", "jax", "keras@jax")
DISPLAY = {"torch": "PyTorch", "keras": "Keras (TF)", "jax": "JAX", "keras@jax": "Keras on JAX",
           "keras@torch": "Keras on PyTorch"}
DEFAULT_REPORT = "amp-suite-acceptance.md"

# What a check may need from the machine, besides nothing.
NEED_GPU = "gpu"
NEED_TF32 = "gpu with TF32 (sm 8.0+)"
NEED_TWO_GPUS = "2 gpus"
NEED_ANY_FRAMEWORK = "a framework installed"


def need_framework(name: str) -> str:
    """The need "framework NAME installed"."""
    return f"framework {name} installed"


# The GPU sweep: CIFAR ResNet-18 in every precision.  Two epochs of 300 steps
# (synthetic data when the CIFAR-10 archive is not at hand, which the report
# says) keep each timed region at several seconds even in amp on an H100,
# while a cell's cost stays dominated by start-up and compilation.
GPU_WORKLOAD = "cifar10_resnet18"
GPU_PRECISIONS = ("fp32", "tf32", "amp_fp16", "amp_bf16")
AMP_PRECISIONS = ("amp_fp16", "amp_bf16")
GPU_DATA = ("--dataset", "cifar10", "--train-split", "train", "--val-split", "test",
            "--no-download", "--synthetic-fallback")
GPU_SWEEP_STEPS = ("--steps", "200", "--warmup", "30", "--epochs", "1", "--repeats", "1")
NOISE_FLAG = "noisy timing"
DP_STEPS = ("--steps", "200", "--warmup", "20", "--epochs", "1", "--repeats", "1")
DP_PRECISION = "amp_bf16"
# The CPU sweep: as small as a sweep can be and still train.
CPU_WORKLOAD = "mnist_cnn"
CPU_DATA = ("--dataset", "mnist", "--train-split", "test[:8000]", "--val-split", "test[8000:]")
CPU_SWEEP_STEPS = ("--steps", "6", "--warmup", "2", "--epochs", "1", "--repeats", "1")

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
# After the time limit a command gets SIGTERM (amp-suite run then writes its report), then SIGKILL.
TERM_GRACE_S = 30

# An empty configuration: the sweeps run from the packaged catalog, whatever ./benchmarks.toml says.
# How the acceptance report's first line begins: how a later run knows a report it may replace.
REPORT_FIRST_WORDS = "# amp-suite acceptance:"
NEUTRAL_CONFIG = ("# amp-suite doctor --acceptance: declares nothing, so the sweeps run from the\n"
                  "# packaged catalog whatever ./benchmarks.toml in the working directory says.\n")
FUSED_CONFIG = ("# amp-suite doctor --acceptance: PyTorch's fused optimizer, channels-last convolutions.\n"
                "[frameworks.torch]\nfused = true\nchannels_last = true\n")


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One ``amp-suite`` command line (the words after ``amp-suite``) and its time limit.

    ``files`` are written (path, text) before it runs: the configuration files
    a sweep names with ``--config``.  ``out_dir`` is a sweep's ``--out``.
    """

    args: tuple[str, ...]
    timeout_s: float
    files: tuple[tuple[str, str], ...] = ()
    out_dir: str | None = None

    def display(self) -> str:
        return "amp-suite " + shlex.join(self.args)


@dataclass(frozen=True)
class CommandResult:
    """What a command did: its exit code (``None`` when it was stopped at its time limit) and output."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def describe(self) -> str:
        return "timed out" if self.timed_out else f"exit {self.returncode}"


@dataclass(frozen=True)
class Verdict:
    """A judge's answer: ``pass`` or ``fail``, and one line saying what was seen."""

    status: str
    observed: str


Judge = Callable[[CommandResult, Command], Verdict]


@dataclass(frozen=True)
class AcceptanceCheck:
    """One check of the acceptance plan.

    ``command`` is what it runs, ``expected`` the outcome that passes, ``needs``
    what the machine must have (:data:`NEED_GPU`, :data:`NEED_TF32`,
    :data:`NEED_TWO_GPUS`, :func:`need_framework`, or nothing), ``judge`` turns
    the command's result into a :class:`Verdict`.  ``skip_reason`` is set by
    :func:`build_plan` when this machine lacks what the check needs.
    """

    name: str
    command: Command
    expected: str
    judge: Judge = field(repr=False, compare=False)
    needs: tuple[str, ...] = ()
    skip_reason: str = ""
    key: str = ""  # what --checks and --resume call it: devices, doctor, tf32, sweep-torch, ...
    estimate_s: float = 0.0  # its command's expected seconds on an H100 (the budget planner's figure)

    @property
    def skipped(self) -> bool:
        return bool(self.skip_reason)


@dataclass(frozen=True)
class Machine:
    """What the plan depends on: the NVIDIA GPUs and which requested frameworks are installed."""

    inventory: NvidiaInventory
    installed: tuple[str, ...]
    missing: dict[str, str] = field(default_factory=dict)  # framework -> the line that installs it
    where: dict[str, str] = field(default_factory=dict)  # framework -> where its processes run, in words

    @property
    def gpu_count(self) -> int:
        if self.inventory.gpus:
            return len(self.inventory.gpus)
        return 1 if self.inventory.present else 0

    @property
    def tf32_blocker(self) -> str:
        """Why TF32 cannot be checked here ("" when every known GPU is sm 8.0+ or the capability is unknown)."""
        for gpu in self.inventory.gpus:
            head = gpu.compute_capability.split(".")[0]
            if head.isdigit() and int(head) < 8:
                return f"GPU {gpu.index} ({gpu.name}) is sm {gpu.compute_capability}, TF32 needs sm 8.0+"
        return ""


@dataclass(frozen=True)
class AcceptancePlan:
    """The checks, in order, for one machine."""

    mode: str  # "gpu" or "cpu"
    device: str  # what the user asked: auto, cpu or gpu
    frameworks: tuple[str, ...]  # requested
    machine: Machine
    workdir: Path
    checks: tuple[AcceptanceCheck, ...]

    @property
    def sweep_frameworks(self) -> tuple[str, ...]:
        return tuple(f for f in self.frameworks if f in self.machine.installed)


def detect_machine(frameworks: dict[str, Any], requested: Sequence[str], *, device: str = "auto") -> Machine:
    """The machine as the plan sees it; ``frameworks`` maps names to :class:`FrameworkInfo`.

    Reads ``nvidia-smi`` (never with ``--device cpu``) and looks for each
    framework's modules without importing them.
    """
    inventory = detect_nvidia() if device != "cpu" else NvidiaInventory(reason="not asked: --device cpu")
    kind = "gpu" if device == "gpu" or (device == "auto" and inventory.present) else "cpu"
    placements = _placements([n for n in requested if n in frameworks], frameworks, kind)
    installed, missing, where = [], {}, {}
    for name in requested:
        info = frameworks.get(name)
        placement = placements.get(name)
        if info is None:
            missing[name] = "no plugin provides it"
        elif placement is not None and placement.environment:
            where[name] = describe_placement(placement)
            if placement.problem:
                missing[name] = placement.problem
            else:
                installed.append(name)
        elif info.missing_modules():
            missing[name] = info.install_hint()
        else:
            installed.append(name)
            if placement is not None:
                where[name] = describe_placement(placement)
    return Machine(inventory, tuple(installed), missing, where)


def _placements(names: Sequence[str], frameworks: dict[str, Any], kind: str) -> dict[str, Any]:
    """Where the acceptance's sweeps (which read the packaged catalog alone) run each framework."""
    from amp_suite.config.catalog import load_config
    from amp_suite.envs.placement import place_for_checks
    from amp_suite.errors import UsageError

    try:
        return place_for_checks(names, load_config(None).environments, list(frameworks), None, kind)
    except UsageError:
        return {}


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
            f"{_names(requested)} installed, each with a row 'sees the expected device' that passes on the "
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
        f"{_names(xla) or 'Keras and JAX'}: 'fp32 matmul/conv is fp32' (1024.1024, TF32 off) and "
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
            f"{len(sweep)} cell(s) ({_names(sweep)}, fp32) ok on the CPU, each with telemetry_source "
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
        f"one {DP_PRECISION} {GPU_WORKLOAD} cell per framework ({_names(sweep)}) on 2 GPUs (--devices 2), each ok",
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


def _names(frameworks: Sequence[str]) -> str:
    return ", ".join(frameworks)


# --- reading what the commands produced -----------------------------------------------


@dataclass(frozen=True)
class DoctorRow:
    scope: str
    check: str
    status: str
    detail: str


def parse_doctor_table(text: str) -> list[DoctorRow]:
    """The rows of the doctor's plain-text table (columns found from its dashed rule)."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines)
               if line.strip() and set(line.replace(" ", "")) == {"-"} and len(line.split()) == 4), None)
    if at is None:
        return []
    rule = lines[at]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    rows = []
    for line in lines[at + 1:]:
        if not line.strip():
            break
        cells = [line[a:b if i < 3 else None].strip() for i, (a, b) in enumerate(spans)]
        if not cells[0] or cells[2] not in ("passed", "failed", "skipped"):
            break
        rows.append(DoctorRow(*cells))
    return rows


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``results.jsonl``, the latest per cell key; lines that hold no result are left out."""
    latest: dict[str, dict[str, Any]] = {}
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "framework" in row and "status" in row:
            key = row.get("key") or "/".join(str(row.get(k)) for k in ("framework", "workload", "precision"))
            latest.pop(key, None)
            latest[key] = row
    return list(latest.values())


@dataclass(frozen=True)
class CalibrationFigures:
    """One framework's block of ``amp-suite calibrate`` output: peak TFLOP/s per dtype."""

    framework: str
    kind: str
    peaks: dict[str, float]


_CAL_HEAD = re.compile(r"^(\S+) .*\bon (cpu|gpu)\b.*:\s*$")
_CAL_ROW = re.compile(r"^\s+(fp32|tf32|fp16|bf16) matmul (\S+)(?: TFLOP/s)? conv (\S+)")


def parse_calibration(text: str) -> dict[str, CalibrationFigures]:
    """Each framework's peaks from ``amp-suite calibrate``'s output (the larger of matmul and conv)."""
    found: dict[str, CalibrationFigures] = {}
    current: CalibrationFigures | None = None
    for line in text.splitlines():
        if (head := _CAL_HEAD.match(line)) and not line.startswith(" "):
            current = CalibrationFigures(head.group(1), head.group(2), {})
            found[current.framework] = current
        elif current is not None and (row := _CAL_ROW.match(line)):
            values = [v for v in (_float(text) for text in row.group(2, 3)) if v]
            if values:
                current.peaks[row.group(1)] = max(values)
    return found


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --- the judges ------------------------------------------------------------------------


def _command_problem(result: CommandResult, command: Command) -> str:
    """One line about a command that timed out or printed an error, else ""."""
    if result.timed_out:
        return f"{command.display()} timed out after {command.timeout_s:g} s"
    return ""


def _last_error(result: CommandResult) -> str:
    lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return _cut((errors or lines or ["no output"])[-1], 300)


def _cut(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _doctor_rows(result: CommandResult, command: Command) -> tuple[list[DoctorRow], str]:
    rows = parse_doctor_table(result.stdout)
    if rows:
        return rows, ""
    problem = _command_problem(result, command) or f"{result.describe()}: {_last_error(result)}"
    return rows, f"the doctor printed no table ({problem})"


CUDNN_ROW = "one cuDNN build loaded"


def judge_devices(result: CommandResult, command: Command, *, frameworks: Sequence[str],
                  missing: dict[str, str], gpu: bool) -> Verdict:
    """Each requested framework is installed and its 'sees the expected device' row passes (on the GPU
    naming the CUDA runtime and cuDNN, with its 'one cuDNN build loaded' row passing where the doctor
    has one).  On a CPU one installed framework is enough."""
    rows, problem = _doctor_rows(result, command)
    if problem:
        return Verdict(FAIL, problem)
    seen, wrong, absent = [], [], []
    for name in frameworks:
        mine = [r for r in rows if r.scope == name]
        device = next((r for r in mine if r.check == "sees the expected device"), None)
        if name in missing or any(r.check == "installed" for r in mine):
            absent.append(f"{name} is not installed ({missing.get(name) or next(r.detail for r in mine)})")
            continue
        if device is None:
            broken = next((r for r in mine if r.status == "failed"), None)
            wrong.append(f"{name}: {_cut(broken.detail) if broken else 'no device row in the doctor table'}")
        elif device.status != "passed":
            wrong.append(f"{name}: {_cut(device.detail, 300)}")
        elif gpu and not (device.detail.startswith("GPU") and "CUDA" in device.detail and "cuDNN" in device.detail):
            wrong.append(f"{name}: the device row names no CUDA runtime and cuDNN ({_cut(device.detail)})")
        else:
            loaded = next((r for r in mine if r.check == CUDNN_ROW), None)
            if gpu and loaded is not None and loaded.status != "passed":
                wrong.append(f"{name} '{CUDNN_ROW}' {loaded.status}: {_cut(loaded.detail, 200)}")
            else:
                extra = f" (loaded: {_cut(loaded.detail, 80)})" if gpu and loaded is not None else ""
                seen.append(f"{name}: {_cut(device.detail, 160)}{extra}")
    if gpu and absent:
        wrong = absent + wrong
    if wrong:
        return Verdict(FAIL, "; ".join(wrong + seen))
    if not seen:
        return Verdict(FAIL, "; ".join(absent) or "no framework requested")
    notes = [f"skipped: {a}" for a in absent]
    return Verdict(PASS, "; ".join(seen + notes))


def judge_doctor(result: CommandResult, command: Command) -> Verdict:
    """The doctor exits 0 and no row failed."""
    rows, problem = _doctor_rows(result, command)
    if problem:
        return Verdict(FAIL, problem)
    failed = [r for r in rows if r.status == "failed"]
    counts = {s: sum(r.status == s for r in rows) for s in ("passed", "failed", "skipped")}
    summary = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    if failed or result.returncode != 0:
        named = "; ".join(f"{r.scope} '{r.check}': {_cut(r.detail, 160)}" for r in failed)
        return Verdict(FAIL, f"{result.describe()}, {summary}" + (f": {named}" if named else ""))
    return Verdict(PASS, f"exit 0, {summary}")


TF32_ROWS = ("fp32 matmul is fp32", "fp32 conv is fp32", "tf32 matmul is TF32", "tf32 conv is TF32")


def judge_tf32(result: CommandResult, command: Command, *, frameworks: Sequence[str]) -> Verdict:
    """For Keras and JAX (XLA): fp32 really fp32 and tf32 really TF32, on matmul and conv."""
    rows, problem = _doctor_rows(result, command)
    if problem:
        return Verdict(FAIL, problem)
    seen, wrong = [], []
    for name in frameworks:
        mine = {r.check: r for r in rows if r.scope == name}
        if "installed" in mine:
            continue  # not installed: the first check says so
        for check in TF32_ROWS:
            row = mine.get(check)
            if row is None:
                wrong.append(f"{name} '{check}': no row")
            elif row.status != "passed":
                wrong.append(f"{name} '{check}' {row.status}: {_cut(row.detail, 160)}")
            else:
                value = re.search(r"\d+\.\d+", row.detail)
                seen.append(f"{name} {check.split(' is ')[0]} {value.group(0) if value else 'passed'}")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    if not seen:
        return Verdict(FAIL, "no Keras or JAX rows in the doctor table")
    return Verdict(PASS, ", ".join(seen))


def judge_calibration(result: CommandResult, command: Command, *, frameworks: Sequence[str],
                      tf32: bool = True) -> Verdict:
    """Every framework calibrated on the GPU, reduced-precision peaks above fp32."""
    if result.timed_out:
        return Verdict(FAIL, _command_problem(result, command))
    figures = parse_calibration(result.stdout)
    wanted = ("tf32", "fp16", "bf16") if tf32 else ("fp16", "bf16")
    seen, wrong = [], []
    for name in frameworks:
        entry = figures.get(name)
        if entry is None:
            failure = next((line for line in result.stderr.splitlines() if line.startswith(f"{name}:")), "")
            wrong.append(f"{name}: no figures" + (f" ({_cut(failure, 200)})" if failure else ""))
            continue
        if entry.kind != "gpu":
            wrong.append(f"{name}: measured on the {entry.kind}, not the GPU")
            continue
        base = entry.peaks.get("fp32")
        if not base:
            wrong.append(f"{name}: no fp32 figure")
            continue
        ratios = []
        for dtype in wanted:
            peak = entry.peaks.get(dtype)
            if not peak:
                wrong.append(f"{name}: no {dtype} figure")
            elif peak <= base:
                wrong.append(f"{name}: {dtype} {peak:.1f} TFLOP/s is not above fp32 {base:.1f}")
            ratios.append(f"{dtype} {peak / base:.1f}x" if peak else f"{dtype} n/a")
        seen.append(f"{name} fp32 {base:.1f} TFLOP/s, " + ", ".join(ratios))
    if not wrong and result.returncode != 0:
        wrong.append(f"{result.describe()}: {_last_error(result)}")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    return Verdict(PASS, "; ".join(seen) or "no framework to calibrate")


def judge_sweep_command(result: CommandResult, command: Command, *,
                        judge_rows: Callable[[list[dict[str, Any]]], Verdict]) -> Verdict:
    """Read the sweep's ``OUT/results.jsonl`` and judge its rows; a timeout or a run that stored nothing fails."""
    path = Path(command.out_dir or ".") / "results.jsonl"
    rows = read_results(path)
    if not rows:
        why = _command_problem(result, command) or f"{result.describe()}: {_last_error(result)}"
        return Verdict(FAIL, f"no result in {path} ({why})")
    verdict = judge_rows(rows)
    if result.timed_out:
        return Verdict(FAIL, f"{_command_problem(result, command)}; {verdict.observed}")
    return verdict


def _find(rows: list[dict[str, Any]], framework: str, workload: str, precision: str,
          devices: int = 1) -> dict[str, Any] | None:
    for row in reversed(rows):
        if (row.get("framework"), row.get("workload"), row.get("precision")) == (framework, workload, precision) \
                and (row.get("config") or {}).get("devices", 1) == devices:
            return row
    return None


def _not_ok(row: dict[str, Any] | None, name: str) -> str:
    if row is None:
        return f"{name}: no result"
    if row.get("status") != "ok":
        return f"{name} {row.get('status')}: {_cut(row.get('error') or 'no error text', 200)}"
    return ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def judge_gpu_sweep(rows: list[dict[str, Any]], *, frameworks: Sequence[str],
                    precisions: Sequence[str] = GPU_PRECISIONS, workload: str = GPU_WORKLOAD,
                    tf32: bool = True) -> Verdict:
    """Every cell ok on the GPU, AMP faster than fp32, NVML telemetry with energy, no measurement flags.

    A noisy-timing flag (the windows' throughput spread, :mod:`amp_suite.machine.noise`) is reported
    beside the verdict, not failed: it is the flag doing its job on a figure the report marks ⚑, not a
    broken path (seen on an H100: eager PyTorch's tf32 cell at 12% over five windows, its GPU 42% busy).
    Every other flag (a region too short to time, throttled clocks, another process on the GPU) fails.
    """
    wrong: list[str] = []
    notes: list[str] = []
    speedups: list[str] = []
    sources: set[str] = set()
    energies: list[float] = []
    for fw in frameworks:
        throughput: dict[str, float] = {}
        for precision in precisions:
            name = f"{fw}/{workload}/{precision}"
            row = _find(rows, fw, workload, precision)
            if row is not None and row.get("status") == "unsupported" and not tf32 and precision == "tf32":
                continue
            if (problem := _not_ok(row, name)):
                wrong.append(problem)
                continue
            assert row is not None
            metrics = row.get("metrics") or {}
            kind = (row.get("device") or {}).get("kind")
            if kind != "gpu":
                wrong.append(f"{name}: ran on {kind or 'no device'}, not the GPU")
            source = metrics.get("telemetry_source")
            if not isinstance(source, str) or not source.startswith("NVML"):
                wrong.append(f"{name}: telemetry_source is {source!r}, not NVML" if source is not None
                             else f"{name}: no telemetry_source recorded")
            else:
                sources.add(source)
            energy = _number(metrics.get("energy_per_image_j"))
            if energy is None or energy <= 0:
                wrong.append(f"{name}: energy_per_image_j is {metrics.get('energy_per_image_j')!r}, not above 0")
            else:
                energies.append(energy)
            flags = [str(f) for f in metrics.get("measurement_flags") or []]
            noisy = [f for f in flags if f.startswith(NOISE_FLAG)]
            if noisy:
                notes.append(f"{name} flagged: {_cut('; '.join(noisy), 160)}")
            if len(noisy) < len(flags):
                wrong.append(f"{name}: measurement_flags: {_cut('; '.join(f for f in flags if f not in noisy), 200)}")
            if (value := _number(metrics.get("throughput"))) is not None:
                throughput[precision] = value
        base = throughput.get("fp32")
        parts = []
        for precision in AMP_PRECISIONS:
            if precision not in precisions or precision not in throughput:
                continue
            if not base:
                wrong.append(f"{fw}/{workload}/{precision}: no fp32 throughput to compare with")
                continue
            ratio = throughput[precision] / base
            parts.append(f"{precision.removeprefix('amp_')} {ratio:.2f}x")
            if ratio <= 1:
                wrong.append(f"{fw}/{workload}/{precision}: speed-up {ratio:.2f}x over fp32 "
                             f"({throughput[precision]:,.0f} vs {base:,.0f} img/s), expected above 1")
        if parts:
            speedups.append(f"{fw} " + " ".join(parts))
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    cells = len(frameworks) * len(precisions)
    telemetry = (f"; telemetry {', '.join(sorted(sources))}, energy {min(energies) * 1e3:.3g}–"
                 f"{max(energies) * 1e3:.3g} mJ/image" if energies else "")
    flagged = "; ".join(notes) if notes else "no measurement flags"
    return Verdict(PASS, f"{cells} cells ok; speed-up over fp32: {'; '.join(speedups) or 'n/a'}{telemetry}; "
                         f"{flagged}")


def judge_cpu_sweep(rows: list[dict[str, Any]], *, frameworks: Sequence[str], workload: str = CPU_WORKLOAD,
                    precision: str = "fp32") -> Verdict:
    """Every cell ok on the CPU; telemetry 'RAPL...' with energy above 0, or 'none: reason'.

    A run of six steps is too short to time, so measurement flags are reported, not failed.
    """
    wrong, seen, notes = [], [], []
    for fw in frameworks:
        name = f"{fw}/{workload}/{precision}"
        row = _find(rows, fw, workload, precision)
        if (problem := _not_ok(row, name)):
            wrong.append(problem)
            continue
        assert row is not None
        metrics = row.get("metrics") or {}
        source = metrics.get("telemetry_source")
        if not isinstance(source, str) or not source.strip():
            wrong.append(f"{name}: no telemetry_source recorded (expected 'RAPL...' or 'none: reason')")
        elif source.startswith("RAPL"):
            energy = _number(metrics.get("energy_per_image_j"))
            if energy is None or energy <= 0:
                wrong.append(f"{name}: telemetry {source} but energy_per_image_j is "
                             f"{metrics.get('energy_per_image_j')!r}")
            else:
                seen.append(f"{name} ok, {_number(metrics.get('throughput')) or 0:,.0f} img/s, telemetry "
                            f"{_cut(source, 80)}, {energy * 1e3:.3g} mJ/image")
        elif source.startswith("none"):
            seen.append(f"{name} ok, {_number(metrics.get('throughput')) or 0:,.0f} img/s, telemetry "
                        f"'{_cut(source, 120)}'")
        else:
            wrong.append(f"{name}: telemetry_source {source!r} is neither 'RAPL...' nor 'none: reason'")
        if metrics.get("measurement_flags"):
            notes.append(f"{fw} flagged (expected for {CPU_SWEEP_STEPS[1]} steps): "
                         f"{_cut('; '.join(map(str, metrics['measurement_flags'])), 120)}")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong + seen))
    return Verdict(PASS, "; ".join(seen + notes))


def judge_fused(rows: list[dict[str, Any]], *, workload: str = GPU_WORKLOAD) -> Verdict:
    """The PyTorch amp_fp16 cell is ok on the GPU and ran the fused optimizer."""
    name = f"torch/{workload}/amp_fp16"
    row = _find(rows, "torch", workload, "amp_fp16")
    if (problem := _not_ok(row, name)):
        return Verdict(FAIL, problem)
    assert row is not None
    metrics = row.get("metrics") or {}
    wrong = []
    kind = (row.get("device") or {}).get("kind")
    if kind != "gpu":
        wrong.append(f"{name}: ran on {kind or 'no device'}, not the GPU")
    implementation = metrics.get("optimizer_implementation")
    if implementation != "fused":
        wrong.append(f"{name}: optimizer_implementation is {implementation!r}, not 'fused'")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    return Verdict(PASS, f"{name} ok, optimizer_implementation fused, "
                         f"{_number(metrics.get('throughput')) or 0:,.0f} img/s")


def judge_data_parallel(rows: list[dict[str, Any]], *, frameworks: Sequence[str], workload: str = GPU_WORKLOAD,
                        precision: str = DP_PRECISION, devices: int = 2) -> Verdict:
    """One data-parallel cell per framework, each ok."""
    wrong, seen = [], []
    for fw in frameworks:
        name = f"{fw}/{workload}/{precision}/d{devices}"
        row = _find(rows, fw, workload, precision, devices)
        if (problem := _not_ok(row, name)):
            wrong.append(problem)
            continue
        assert row is not None
        seen.append(f"{name} ok, {_number((row.get('metrics') or {}).get('throughput')) or 0:,.0f} img/s")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong + seen))
    return Verdict(PASS, "; ".join(seen))


# --- running the plan ------------------------------------------------------------------


Executor = Callable[[Sequence[str], float], CommandResult]


def subprocess_executor(args: Sequence[str], timeout_s: float) -> CommandResult:
    """``python -m amp_suite ARGS`` as a supervised process tree; at the time limit SIGTERM, then the whole tree.

    The tree (:mod:`amp_suite.processes.tree`) dies with this process, SIGKILL included, so a stopped or
    killed acceptance never leaves a sweep running; a command told to stop first gets SIGTERM, so a sweep
    keeps its finished cells and writes its report.
    """
    from amp_suite.processes import tree as process_tree

    started = time.perf_counter()
    process = process_tree.start([sys.executable, "-m", "amp_suite", *args], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        out, err = process.communicate(timeout=timeout_s)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            out, err = process.communicate()
        code = None
    except BaseException:  # Ctrl-C of the acceptance run: stop what it started
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
        raise
    return CommandResult(code, out or "", err or "", time.perf_counter() - started)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """SIGTERM: ask the supervised command to stop (it keeps what it finished); SIGKILL: end its whole tree."""
    from amp_suite.processes import tree as process_tree

    if signum == signal.SIGKILL:
        process_tree.end(process)
    else:
        process_tree.ask_to_stop(process)


@dataclass(frozen=True)
class CheckOutcome:
    check: AcceptanceCheck
    status: str
    observed: str
    result: CommandResult | None = None
    kept: str = ""  # when an earlier phase judged it: that phase's start (--resume)

    def line(self) -> str:
        if self.status == SKIP:
            return f"[SKIP] {self.check.name} — {self.observed}"
        kept = f" (kept from the phase of {self.kept})" if self.kept else ""
        return (f"[{LABELS[self.status]}] {self.check.name} — expected {self.check.expected}; "
                f"saw {self.observed}{kept}")

    @property
    def pending(self) -> bool:
        """Not judged yet: not asked for, or over the budget; a later --resume runs it."""
        return self.status == SKIP and is_pending(self.observed)


@dataclass(frozen=True)
class CommandRecord:
    """One command a phase ran: what the report's command table shows, kept across --resume."""

    display: str
    outcome: str
    seconds: float
    log: str = ""
    phase: str = ""


@dataclass
class AcceptanceRun:
    """A plan's outcomes so far, in plan order, and the commands run (this phase's and earlier ones')."""

    plan: AcceptancePlan
    outcomes: list[CheckOutcome] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    started: str = ""
    budget_s: float | None = None
    running: str = ""  # the check whose command runs now (written into the report before it starts)
    interrupted: str = ""  # why the phase stopped early (a signal), "" when it ran to its end
    phases: list[str] = field(default_factory=list)  # one line per phase, the earliest first
    calibration_output: str = ""  # an earlier phase's calibrate stdout (--resume)

    @property
    def failed(self) -> bool:
        return any(o.status == FAIL for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    @property
    def pending(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.pending]


def run_plan(plan: AcceptancePlan, *, executor: Executor = subprocess_executor,
             emit: Callable[[str], None] = print,
             progress: Callable[[str], None] | None = None,
             asked: Sequence[str] = (), budget_s: float | None = None,
             kept: dict[str, CheckOutcome] | None = None, run: AcceptanceRun | None = None,
             on_change: Callable[[AcceptanceRun], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> AcceptanceRun:
    """Run the checks of ``plan`` this phase chose, in order (a command shared by several checks runs once);
    ``emit`` each check's line as it is judged.

    ``asked`` (keys) and ``budget_s`` choose what runs (:func:`amp_suite.doctor.phases.choose`);
    ``kept`` holds the outcomes an earlier phase judged (``--resume``), shown as they were.  Before
    each command the clock is read again: a command whose estimate no longer half fits what is left is
    skipped as pending, and a command runs under the smaller of its own limit and what is left, so the
    phase ends within its budget.  ``on_change`` is called before each command and after each check, so
    a report written there always holds every finished check, even when this process is killed.
    """
    kept = dict(kept or {})
    run = run or AcceptanceRun(plan, started=_now(), budget_s=budget_s)
    choices = {c.key: c for c in choose(plan.checks, asked=set(asked), budget_s=budget_s, finished=set(kept))}
    started = clock()
    done: dict[tuple[str, ...], CommandResult] = {}
    logs = plan.workdir / "logs"
    def run_command(command: Command, name: str, left: float | None) -> CommandResult:
        """The command, under the smaller of its own limit and what is left of the budget; logged."""
        limit = command.timeout_s if left is None else min(command.timeout_s, max(left, 1.0))
        shown = Command(_resumable(command), limit)
        for path, text in command.files:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
        if progress:
            progress(f"running {shown.display()} (time limit {limit:.0f} s)")
        run.running = name
        _changed(on_change, run)
        result = executor(list(shown.args), limit)
        run.running = ""
        log = _save_log(logs, len(run.commands) + 1, shown, result)
        run.commands.append(CommandRecord(shown.display(), result.describe(), result.seconds,
                                          str(log) if log else "", run.started))
        return result

    for check in plan.checks:
        choice = choices[check.key]
        if check.skipped:
            outcome = CheckOutcome(check, SKIP, check.skip_reason)
        elif not choice.run:
            outcome = kept[check.key] if check.key in kept and not choice.reason else \
                CheckOutcome(check, SKIP, choice.reason)
        else:
            command = check.command
            result = done.get(command.args)
            left = None if budget_s is None else budget_s - (clock() - started)
            if result is None and left is not None and left < 0.5 * check.estimate_s:
                outcome = CheckOutcome(check, SKIP, f"{BUDGET_SPENT}: about {check.estimate_s:.0f} s needed, "
                                                    f"{max(left, 0):.0f} s left; --resume runs it")
            else:
                if result is None:
                    result = done[command.args] = run_command(command, check.name, left)
                outcome = _judged(check, result, stopped_by_budget=budget_s is not None)
        run.outcomes.append(outcome)
        emit(outcome.line())
        _changed(on_change, run)
    return run


def _judged(check: AcceptanceCheck, result: CommandResult, *, stopped_by_budget: bool) -> CheckOutcome:
    """A check's outcome from its command's result; a command the budget stopped is pending, not judged."""
    command = check.command
    if result.timed_out and stopped_by_budget and command.timeout_s > result.seconds + 1:
        return CheckOutcome(check, SKIP, f"{BUDGET_SPENT} while it ran (stopped after {result.seconds:.0f} s); "
                                         "--resume runs it" + (", keeping the cells it finished" if command.out_dir
                                                               else ""), result)
    try:
        verdict = check.judge(result, command)
    except Exception as exc:  # a judge's bug must not hide the other checks
        verdict = Verdict(FAIL, f"could not judge the output: {type(exc).__name__}: {exc}")
    return CheckOutcome(check, verdict.status, verdict.observed, result)


def _changed(on_change: Callable[[AcceptanceRun], None] | None, run: AcceptanceRun) -> None:
    if on_change is not None:
        on_change(run)


def _resumable(command: Command) -> tuple[str, ...]:
    """A sweep whose folder already holds results (an earlier phase stopped it) continues with --resume."""
    if command.out_dir and command.args[0] == "run" and "--resume" not in command.args \
            and (Path(command.out_dir) / "results.jsonl").is_file():
        return (*command.args, "--resume")
    return command.args


def _save_log(logs: Path, number: int, command: Command, result: CommandResult) -> Path | None:
    path = logs / f"{number:02d}-{command.args[0]}.log"
    while path.exists():  # an earlier phase's log keeps its name
        number += 1
        path = logs / f"{number:02d}-{command.args[0]}.log"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path.write_text(f"$ {command.display()}\n# {result.describe()} after {result.seconds:.1f} s\n"
                        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}\n", encoding="utf-8")
    except OSError:
        return None
    return path


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --- the report ------------------------------------------------------------------------


def _environment(run: AcceptanceRun) -> tuple[dict[str, Any], Path | None]:
    """The environment.json of the first sweep that wrote one."""
    for check in run.plan.checks:
        if check.command.out_dir:
            path = Path(check.command.out_dir) / "environment.json"
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data, path
    return {}, None


def _runtimes(run: AcceptanceRun) -> dict[str, str]:
    """Framework -> 'CUDA x, cuDNN y' from the first ok row of each framework in the sweeps."""
    found: dict[str, str] = {}
    for check in run.plan.checks:
        if not check.command.out_dir:
            continue
        for row in read_results(Path(check.command.out_dir) / "results.jsonl"):
            env = row.get("environment") or {}
            facts = [f"CUDA {env['cuda_runtime_version']}" if env.get("cuda_runtime_version") else "",
                     f"cuDNN {env['cudnn_version']}" if env.get("cudnn_version") else ""]
            text = ", ".join(f for f in facts if f)
            if text and row.get("framework") not in found:
                found[str(row.get("framework"))] = text
    return found


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_report(run: AcceptanceRun, *, command_line: str = "amp-suite doctor --acceptance") -> str:
    """The markdown report: verdict, machine facts, every check's expected vs observed, the commands."""
    plan = run.plan
    counts = {s: sum(o.status == s for o in run.outcomes) for s in (PASS, FAIL, SKIP)}
    pending = run.pending
    unfinished = bool(pending or run.running or run.interrupted or len(run.outcomes) < len(plan.checks))
    verdict = "FAILED" if run.failed else ("INCOMPLETE" if unfinished else "PASSED")
    environment, env_path = _environment(run)
    lines = [f"{REPORT_FIRST_WORDS} {verdict}", "",
             f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped "
             f"({plan.mode.upper()} mode; skipped checks are not failures).", ""]
    if run.running:
        lines += [f"**In progress**: `{_md(run.running)}` was running when this report was written; a report "
                  "that still says so was left by a phase that was killed. `--resume` continues.", ""]
    if run.interrupted:
        lines += [f"**Interrupted** ({_md(run.interrupted)}): the checks below are those it finished; "
                  "`--resume` continues.", ""]
    if pending or len(run.outcomes) < len(plan.checks):
        names = [o.check.name for o in pending] + [c.name for c in plan.checks[len(run.outcomes):]]
        lines += [f"**Still to run** ({len(names)}): {_md('; '.join(names))}. Continue with "
                  f"`{_md(command_line.split(' --resume')[0])} --resume`.", ""]
    lines += ["## Machine", "", f"- command: `{command_line}`", f"- started: {run.started}"]
    for phase in run.phases:
        lines.append(f"- {phase}")
    version = environment.get("amp_suite_version")
    if version is None:
        from amp_suite import __version__ as version
    commit = environment.get("git_commit")
    lines.append(f"- amp-suite: {version}" + (f" (commit {commit})" if commit else ""))
    if environment.get("python") or environment.get("platform"):
        lines.append(f"- Python {environment.get('python', '?')} on {environment.get('platform', '?')}")
    if environment.get("cpu_model"):
        flags = ", ".join(environment.get("cpu_flags") or []) or "none of interest"
        lines.append(f"- CPU: {environment['cpu_model']} ({environment.get('cpu_count', '?')} cores; flags: {flags})")
    gpus = plan.machine.inventory.gpus
    if gpus:
        for gpu in gpus:
            memory = f", {gpu.memory_total_mib:.0f} MiB" if gpu.memory_total_mib else ""
            power = f", power limit {gpu.power_limit_w:g} W" if gpu.power_limit_w else ""
            lines.append(f"- GPU {gpu.index}: {gpu.name}, driver {gpu.driver or '?'}, "
                         f"sm {gpu.compute_capability or '?'}{memory}{power}")
    else:
        lines.append(f"- GPU: {plan.machine.inventory.describe()}")
    packages = environment.get("packages") or _installed_versions()
    if packages:
        lines.append("- packages: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    runtimes = _runtimes(run)
    for name, text in runtimes.items():
        lines.append(f"- {DISPLAY.get(name, name)} ran with {text}")
    for name, text in plan.machine.where.items():
        lines.append(f"- {DISPLAY.get(name, name)} runs in {text}")
    lines.append(f"- frameworks checked: {_names(plan.frameworks)}" + (
        f" (not installed: {_names(list(plan.machine.missing))})" if plan.machine.missing else ""))
    lines.append(f"- files of this run: `{plan.workdir}`" + (f" (environment: `{env_path}`)" if env_path else ""))
    for check in plan.checks:
        report = Path(check.command.out_dir) / "report.md" if check.command.out_dir else None
        if report is not None and report.is_file():
            lines.append(f"- {check.name}: report `{report}`")
    lines += ["", "## Checks", "", "| # | key | check | result | expected | observed |",
              "| --- | --- | --- | --- | --- | --- |"]
    for number, outcome in enumerate(run.outcomes, 1):
        kept = f" (kept from the phase of {outcome.kept})" if outcome.kept else ""
        lines.append(f"| {number} | {outcome.check.key} | {_md(outcome.check.name)} | **{LABELS[outcome.status]}** | "
                     f"{_md(outcome.check.expected)} | {_md(outcome.observed)}{_md(kept)} |")
    figures = gpu_figures_section(run)
    if figures:
        lines += ["", *figures]
    lines += ["", "## Commands", "", "| command | outcome | seconds | log |", "| --- | --- | --- | --- |"]
    for record in run.commands:
        lines.append(f"| `{_md(record.display)}` | {record.outcome} | {record.seconds:.0f} | "
                     f"{f'`{record.log}`' if record.log else '–'} |")
    skipped = [o for o in run.outcomes if o.status == SKIP and not o.pending]
    if skipped:
        lines += ["", "Skipped checks did not run; each needs what the machine lacks: "
                  + "; ".join(f"{o.check.name} ({', '.join(o.check.needs)})" for o in skipped) + "."]
    return "\n".join(lines) + "\n"


ABOVE_CEILING = 1.05  # a speed-up this far above the calibrated peak ratio is marked
LAUNCH_BOUND_PCT = 50.0  # a cell whose GPU was busy less of its timed windows than this is launch- or input-bound
_CEILING_DTYPE = {"tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16"}


def gpu_figures_section(run: AcceptanceRun) -> list[str]:
    """The sweeps' figures judged further: each precision's speed-up over fp32 and over tf32, the calibrated
    ceiling beside it (the matmul/conv peak ratio over fp32 that calibration measured), the GPU's busy time,
    and a mark on launch-bound cells.  Empty when no GPU sweep stored a row."""
    ceilings = {name: figures.peaks for name, figures in
                parse_calibration(calibration_output(run)).items() if figures.kind == "gpu"}
    table: list[str] = []
    launch_bound: list[str] = []
    above: list[str] = []
    for check in run.plan.checks:
        if not check.key.startswith("sweep-") or not check.command.out_dir:
            continue
        rows = read_results(Path(check.command.out_dir) / "results.jsonl")
        fw = check.key.removeprefix("sweep-")
        throughput: dict[str, float] = {}
        busy: dict[str, float] = {}
        for precision in GPU_PRECISIONS:
            row = _find(rows, fw, GPU_WORKLOAD, precision)
            if row is None or row.get("status") != "ok" or (row.get("device") or {}).get("kind") != "gpu":
                continue
            metrics = row.get("metrics") or {}
            if (value := _number(metrics.get("throughput"))) is not None:
                throughput[precision] = value
            if (pct := _number(metrics.get("gpu_utilization_pct_mean"))) is not None:
                busy[precision] = pct
        if not throughput:
            continue
        peaks = ceilings.get(fw, {})
        for precision in GPU_PRECISIONS:
            if precision not in throughput:
                continue
            value = throughput[precision]
            over_fp32 = f"{value / throughput['fp32']:.2f}x" if throughput.get("fp32") else "–"
            over_tf32 = f"{value / throughput['tf32']:.2f}x" if throughput.get("tf32") and precision != "tf32" \
                else "–"
            dtype = _CEILING_DTYPE.get(precision)
            bound = peaks[dtype] / peaks["fp32"] if dtype and peaks.get(dtype) and peaks.get("fp32") else None
            ceiling = "–" if bound is None else f"{bound:.1f}x"
            if bound is not None and throughput.get("fp32") and value / throughput["fp32"] > ABOVE_CEILING * bound:
                ceiling += " (speed-up above it: the fp32 cell ran below its own peak's share)"
                above.append(f"{fw}/{precision}")
            pct = busy.get(precision)
            mark = ""
            if pct is not None and pct < LAUNCH_BOUND_PCT:
                mark = " (launch- or input-bound)"
                launch_bound.append(f"{fw}/{precision} {pct:.0f}%")
            table.append(f"| {DISPLAY.get(fw, fw)} | {precision} | {value:,.0f} | {over_fp32} | {over_tf32} | "
                         f"{ceiling} | {'–' if pct is None else f'{pct:.0f}%'}{mark} |")
    if not table:
        return []
    lines = ["## GPU figures", "",
             f"{GPU_WORKLOAD}, one run per cell. The ceiling is what calibration measured: the precision's "
             "matmul/convolution peak over fp32's, the most a compute-bound step could gain; GPU busy is NVML's "
             f"utilization over the timed windows, and a cell below {LAUNCH_BOUND_PCT:.0f}% is marked launch- or "
             "input-bound (its speed-up says more about the loop than the arithmetic).", "",
             "| framework | precision | images/s | over fp32 | over tf32 | ceiling | GPU busy |",
             "| --- | --- | --- | --- | --- | --- | --- |", *table]
    if launch_bound:
        lines += ["", f"Launch- or input-bound: {', '.join(launch_bound)}."]
    if above:
        lines += ["", f"Above the calibrated ceiling: {', '.join(above)} (a speed-up the arithmetic cannot give; "
                      "read the fp32 cell's log before trusting it)."]
    return lines


def calibration_output(run: AcceptanceRun) -> str:
    """The calibrate command's stdout, from this phase or an earlier one."""
    for outcome in run.outcomes:
        if outcome.check.key == "calibration" and outcome.result is not None:
            return outcome.result.stdout
    return run.calibration_output


def _installed_versions() -> dict[str, str]:
    from amp_suite.machine.environment import PACKAGES, package_version

    return {p: v for p in PACKAGES if (v := package_version(p))}


# --- the command -----------------------------------------------------------------------


def default_frameworks(known: Sequence[str]) -> tuple[str, ...]:
    """The built-in frameworks a plugin provides, in the doctor's order."""
    return tuple(f for f in BUILT_IN_FRAMEWORKS if f in known)


def run_acceptance(*, device: str, frameworks: Sequence[str] | None, known: dict[str, Any],
                   report: str | None = None, plugins: Sequence[str] = (), executor: Executor = subprocess_executor,
                   emit: Callable[[str], None] = print, progress: Callable[[str], None] | None = None,
                   workdir: Path | None = None, command_line: str | None = None,
                   checks: Sequence[str] = (), budget_s: float | None = None, resume: bool = False, force: bool = False) -> int:
    """``amp-suite doctor --acceptance``: plan, run, print, write the report; the exit code (1 when a check failed).

    ``checks`` (keys or numbers) and ``budget_s`` make this run one phase; ``resume`` continues the phase
    the report's state file recorded, keeping what it judged.  The report and its state are written
    before each command and after each check, and once more when a signal stops the phase.  An existing
    report file is replaced only when an acceptance run wrote it, or with ``force``.
    """
    from amp_suite.doctor.acceptance_state import AcceptanceState, StoredOutcome, load_state, state_path
    from amp_suite.doctor.phases import select
    from amp_suite.errors import UsageError
    from amp_suite.owned_paths import check_replaceable
    from amp_suite.safe_files import write_file_atomically

    report_path = Path(report or DEFAULT_REPORT)
    if report_path.exists() and not report_path.is_file():
        raise UsageError(f"--report {report_path} exists and is not a regular file")
    check_replaceable(report_path, command="amp-suite doctor --acceptance", first_line=REPORT_FIRST_WORDS,
                      force=force)
    state_file = state_path(report_path)
    previous = load_state(state_file) if resume else None
    requested = tuple(frameworks) if frameworks else default_frameworks(list(known))
    if previous is not None:
        if frameworks and list(requested) != previous.frameworks:
            raise UsageError(f"--resume: the report {report_path} checked --frameworks "
                             f"{','.join(previous.frameworks)}, not {','.join(requested)}; give the same or none")
        if device != "auto" and device != previous.device:
            raise UsageError(f"--resume: the report {report_path} was made with --device {previous.device}, "
                             f"not {device}")
        requested, device = tuple(previous.frameworks), previous.device
        workdir = Path(previous.workdir)
    if workdir is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        workdir = report_path.parent / f"{report_path.stem}-runs" / stamp
    machine = detect_machine(known, requested, device=device)
    plan = build_plan(machine, requested, Path(workdir).resolve(), device=device, plugins=plugins)
    asked = select([c.key for c in plan.checks], checks) if checks else set()
    by_key = {c.key: c for c in plan.checks}
    kept: dict[str, CheckOutcome] = {}
    run = AcceptanceRun(plan, started=_now(), budget_s=budget_s)
    if previous is not None:
        kept = {key: CheckOutcome(by_key[key], item.status, item.observed, kept=item.phase)
                for key, item in previous.outcomes.items() if key in by_key}
        run.commands = [CommandRecord(str(c.get("display", "")), str(c.get("outcome", "")),
                                      float(c.get("seconds") or 0), str(c.get("log", "")), str(c.get("phase", "")))
                        for c in previous.commands]
        run.phases = list(previous.phases)
        run.calibration_output = previous.calibration_output
    words = ", ".join(sorted(asked, key=list(by_key).index)) if asked else "all checks"
    run.phases.append(f"phase started {run.started}: {words}"
                      + (f", budget {budget_s:g} s" if budget_s is not None else ", no budget")
                      + (" (--resume)" if previous is not None else ""))
    if command_line is None:
        words_ = ["amp-suite", "doctor", "--acceptance", "--device", device, "--frameworks", ",".join(requested),
                  *(a for p in plugins for a in ("-p", p)), *(("--report", report) if report else ())]
        command_line = shlex.join(words_)

    def save(current: AcceptanceRun) -> None:
        state = AcceptanceState(plan.mode, device, list(requested), str(plan.workdir), list(current.phases))
        for outcome in current.outcomes:
            if outcome.status in (PASS, FAIL):
                state.outcomes[outcome.check.key] = StoredOutcome(outcome.check.key, outcome.status,
                                                                  outcome.observed, outcome.kept or current.started)
        state.commands = [{"display": c.display, "outcome": c.outcome, "seconds": round(c.seconds, 1),
                           "log": c.log, "phase": c.phase} for c in current.commands]
        state.calibration_output = calibration_output(current)
        try:
            report_path.parent.mkdir(parents=True, exist_ok=True)
            write_file_atomically(report_path, render_report(current, command_line=command_line))
            write_file_atomically(state_file, state.to_json())
        except OSError as exc:
            raise UsageError(f"cannot write the report {report_path}: {exc.strerror or exc}") from None

    say = progress or (lambda text: None)
    say(f"{plan.mode.upper()} mode: {len(plan.checks)} checks, {sum(c.skipped for c in plan.checks)} skipped "
        f"on this machine" + (f", {len(kept)} kept from earlier phases" if kept else "")
        + (f", budget {budget_s:g} s" if budget_s is not None else "") + f"; files under {plan.workdir}")
    try:
        run_plan(plan, executor=executor, emit=emit, progress=progress, asked=tuple(asked), budget_s=budget_s,
                 kept=kept, run=run, on_change=save)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        run.interrupted = f"{signal.Signals(signum).name} while {run.running or 'between checks'}"
        run.running = ""
        save(run)
        emit(f"interrupted; report of the finished checks: {report_path} (--resume continues)")
        raise
    save(run)
    counts = {s: sum(o.status == s for o in run.outcomes) for s in (PASS, FAIL, SKIP)}
    left = len(run.pending)
    emit(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
         + (f" ({left} still to run: --resume)" if left else "") + f"; report: {report_path}")
    return run.exit_code
