"""The machine's NVIDIA GPUs, seen without any framework, and the device policy for a cell.

A framework that cannot use the GPU of a GPU machine would quietly train on the
CPU and put CPU rows beside other frameworks' GPU rows.  This module decides,
once and for every framework, when that is refused:

- ``--device cpu``: the CPU, wanted; always fine.
- ``--device auto`` on a machine with an NVIDIA GPU: a framework plugin that
  declares GPU precisions must land on the GPU; landing on the CPU makes the
  cell ``unavailable`` with the install line that fixes it.
- ``--device gpu``: a cell that does not land on a GPU is ``unavailable``,
  whether or not the machine has one.

Detection reads ``nvidia-smi`` (GPU names, driver, compute capability, clocks
and power limit) and falls back to the driver's ``/proc/driver/nvidia/version``.
Set :data:`FAKE_SMI_ENV` to the path of an executable that prints what
``nvidia-smi`` would (or to ``none`` for a machine without GPUs): tests fake a
GPU machine that way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_suite.errors import FrameworkUnavailableError, UnsupportedError
from amp_suite.records import DeviceInfo, FrameworkInfo, RunSpec

# Path of a stand-in for nvidia-smi ("none": behave as if there were no GPU).
FAKE_SMI_ENV = "AMP_SUITE_FAKE_NVIDIA_SMI"
# The loaded NVIDIA kernel driver announces itself here.
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
# Queried in this order; the first four exist in every nvidia-smi of the last years.
SMI_FIELDS = ("index", "name", "driver_version", "memory.total", "compute_cap",
              "clocks.max.sm", "clocks.max.memory", "power.limit")
# Seconds one nvidia-smi call may take; one that takes longer is ended with everything it started.
SMI_TIMEOUT_S = 10
# Set (to the program's path) once an nvidia-smi call timed out: this process and the workers it
# starts ask that nvidia-smi nothing more, so a hung driver costs one time limit, not one per call.
SMI_HUNG_ENV = "AMP_SUITE_NVIDIA_SMI_HUNG"



class DeviceUnavailableError(FrameworkUnavailableError):
    """The cell cannot run on the device it must use; the message says how to fix it."""


@dataclass(frozen=True)
class NvidiaGpu:
    """One NVIDIA GPU as ``nvidia-smi`` reports it; unknown figures are ``None`` or ``""``."""

    index: int
    name: str
    driver: str = ""
    memory_total_mib: float | None = None
    compute_capability: str = ""
    sm_clock_max_mhz: float | None = None
    memory_clock_max_mhz: float | None = None
    power_limit_w: float | None = None

    def describe(self) -> str:
        parts = [f"driver {self.driver}" if self.driver else "",
                 f"sm {self.compute_capability}" if self.compute_capability else ""]
        return f"{self.name} ({', '.join(p for p in parts if p)})" if any(parts) else self.name


@dataclass(frozen=True)
class NvidiaInventory:
    """What this machine has: GPUs from ``nvidia-smi``, else the driver alone, else nothing.

    ``reason`` says how the answer was found, or why there is no GPU.
    """

    gpus: tuple[NvidiaGpu, ...] = ()
    driver: str = ""
    reason: str = ""

    @property
    def present(self) -> bool:
        return bool(self.gpus) or bool(self.driver)

    def describe(self) -> str:
        if self.gpus:
            return "; ".join(g.describe() for g in self.gpus)
        if self.driver:
            return f"an NVIDIA GPU (driver {self.driver}; {self.reason})"
        return f"no NVIDIA GPU ({self.reason})"


def _number(text: str) -> float | None:
    """``"1590 MHz"``, ``"70.00 W"``, ``"15360 MiB"`` -> the number; ``[N/A]`` and the like -> ``None``."""
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", text)
    return float(match.group(1)) if match else None


def parse_smi_csv(text: str, fields: tuple[str, ...] = SMI_FIELDS) -> tuple[NvidiaGpu, ...]:
    """GPUs from ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader`` output.

    Defensive: lines with too few columns are skipped, ``[N/A]`` and
    ``[Not Supported]`` become ``None``, units are dropped.
    """
    gpus: list[NvidiaGpu] = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(fields):
            continue
        row = dict(zip(fields, parts, strict=False))
        index = _number(row.get("index", ""))
        capability = row.get("compute_cap", "")
        gpus.append(NvidiaGpu(
            index=int(index) if index is not None else len(gpus),
            name=row.get("name", "?"),
            driver=row.get("driver_version", "") if _number(row.get("driver_version", "")) is not None else "",
            memory_total_mib=_number(row.get("memory.total", "")),
            compute_capability=capability if re.fullmatch(r"\d+\.\d+", capability) else "",
            sm_clock_max_mhz=_number(row.get("clocks.max.sm", "")),
            memory_clock_max_mhz=_number(row.get("clocks.max.memory", "")),
            power_limit_w=_number(row.get("power.limit", "")),
        ))
    return tuple(gpus)


def _query(smi: str, fields: tuple[str, ...]) -> str | None:
    return ask_smi(smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader")


def ask_smi(smi: str, *args: str) -> str | None:
    """What ``smi ARGS`` prints, or None when it fails, cannot start or hangs.

    The call is a supervised tree (:mod:`amp_suite.processes.tree`) ended after
    :data:`SMI_TIMEOUT_S`; after one such hang, :data:`SMI_HUNG_ENV` makes this
    process and its children skip that nvidia-smi.
    """
    from amp_suite.processes import tree as process_tree

    if os.environ.get(SMI_HUNG_ENV) == smi:
        return None
    try:
        done = process_tree.run([smi, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        os.environ[SMI_HUNG_ENV] = smi
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _driver_from_proc(path: Path | None) -> str:
    """The kernel driver's version from ``path``; ``""`` when the file is absent."""
    if path is None:
        return ""
    try:
        text = path.read_text()
    except OSError:
        return ""
    match = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+(?:\.[0-9]+)+)", text)
    return match.group(1) if match else "unknown version"


def find_smi() -> str | None:
    """The ``nvidia-smi`` to ask: :data:`FAKE_SMI_ENV` when set, else the one on ``PATH``."""
    fake = os.environ.get(FAKE_SMI_ENV)
    if fake is not None:
        return None if fake.strip().lower() in ("", "none") else fake
    return shutil.which("nvidia-smi")


def detect_nvidia(smi: str | None = None, driver_file: Path | None = None) -> NvidiaInventory:
    """This machine's NVIDIA GPUs (see the module doc for the sources and the fake)."""
    faked = os.environ.get(FAKE_SMI_ENV) is not None
    smi = smi if smi is not None else find_smi()
    if driver_file is None and not faked:  # a faked machine has no real driver either
        driver_file = DRIVER_VERSION_FILE
    if smi:
        out = _query(smi, SMI_FIELDS)
        gpus = parse_smi_csv(out) if out is not None else ()
        if out is None:  # an older nvidia-smi may not know every field: ask for the basic ones
            basic = SMI_FIELDS[:4]
            out = _query(smi, basic)
            gpus = parse_smi_csv(out, basic) if out is not None else ()
        if gpus:
            return NvidiaInventory(gpus, gpus[0].driver, f"{smi} lists {len(gpus)}")
    driver = _driver_from_proc(driver_file)
    if driver:
        return NvidiaInventory((), driver, f"{driver_file} exists" + ("" if smi else "; nvidia-smi not found"))
    where = f"{smi} lists none" if smi else "nvidia-smi not found"
    return NvidiaInventory((), "", f"{where}, no {driver_file}" if driver_file else f"{where} ({FAKE_SMI_ENV})")


def gpu_install_line(framework: FrameworkInfo) -> str:
    """The command that gives ``framework`` a CUDA build: its environment of the packaged GPU set, built."""
    from amp_suite.config.environments import packaged_gpu_set

    name = packaged_gpu_set().get(framework.name)
    if name is None:
        return f"install a CUDA build of {framework.display_name} (docs/gpu.md)"
    return f"amp-suite env create {name} (its own environment with its CUDA build; docs/gpu.md)"


def device_problem(requested: str, device: DeviceInfo, framework: FrameworkInfo,
                   inventory: NvidiaInventory) -> str | None:
    """Why a cell must not run on ``device``, or ``None`` when it may (the policy in the module doc)."""
    if requested == "cpu" or device.kind == "gpu":
        return None
    name = framework.display_name
    if requested == "gpu":
        if not inventory.present:
            return f"--device gpu: this machine has {inventory.describe()}"
        return (f"--device gpu: {name} cannot use this machine's {inventory.describe()}; "
                f"install its CUDA build: {gpu_install_line(framework)}")
    if inventory.present and "gpu" in framework.precisions:
        return (f"{name} would fall back to the CPU on a machine with {inventory.describe()}; "
                f"install its CUDA build: {gpu_install_line(framework)} (or run with --device cpu)")
    return None


def select_checked(run: RunSpec, framework: FrameworkInfo, select: Callable[[RunSpec], DeviceInfo],
                   inventory: NvidiaInventory | None = None) -> DeviceInfo:
    """``select(run)`` (the ``select_device`` hook), refused by :func:`device_problem`.

    Raises :class:`DeviceUnavailableError` (status ``unavailable``, which
    fails the sweep) instead of returning a device the cell must not use.
    """
    if inventory is None and run.device == "cpu":
        inventory = NvidiaInventory(reason="not asked: --device cpu")
    try:
        device = select(run)
    except UnsupportedError as exc:
        if run.device != "gpu":
            raise
        device = DeviceInfo(kind="none", platform="", name=str(exc))
    problem = device_problem(run.device, device, framework, inventory or detect_nvidia())
    if problem:
        raise DeviceUnavailableError(problem)
    return device


def version_text(value: Any, kind: str) -> str:
    """A CUDA (``12090``) or cuDNN (``92000``, ``8902``) version integer as ``12.9`` / ``9.20.0``."""
    if not isinstance(value, int) or isinstance(value, bool):
        return str(value)
    if kind == "cuda":
        return f"{value // 1000}.{value % 1000 // 10}"
    if value >= 90000:  # cuDNN 9 and newer: major * 10000 + minor * 100 + patch
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"



def sweep_device_kind(device: str) -> str:
    """The device kind a sweep asked for ``device`` (auto, cpu or gpu) runs on: auto is the GPU on a machine
    with an NVIDIA GPU (``nvidia-smi``), else the CPU."""
    if device != "auto":
        return device
    return "gpu" if detect_nvidia().present else "cpu"
