"""The acceptance checklist's typed pieces: a command, its result, a judge's verdict, a check, the machine, the plan.

Every other acceptance module reads these: :mod:`.acceptance_plan` builds an
:class:`AcceptancePlan` of :class:`AcceptanceCheck`, :mod:`.acceptance_checks`
turns a :class:`CommandResult` into a :class:`Verdict`, :mod:`.acceptance_run`
runs the plan and :mod:`.acceptance_report` writes it down.  The sweeps the
checklist runs (workloads, precisions, steps) are declared here too, since the
plan runs them and the judges and the report read their rows.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from amp_suite.machine.devices import NvidiaInventory

PASS, FAIL, SKIP = "pass", "fail", "skipped"
LABELS = {PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}

# Frameworks whose TF32 switch goes through XLA: Keras on TensorFlow, JAX, and Keras on JAX.
XLA_FRAMEWORKS = ("keras", "jax", "keras@jax")
DISPLAY = {"torch": "PyTorch", "keras": "Keras (TF)", "jax": "JAX", "keras@jax": "Keras on JAX",
           "keras@torch": "Keras on PyTorch"}

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


def framework_list(frameworks: Sequence[str]) -> str:
    """Framework names as the plan's and the report's sentences list them."""
    return ", ".join(frameworks)
