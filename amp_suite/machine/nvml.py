"""Reading NVML without a framework: the handle of a CUDA device, clock event reasons, the GPU's settings.

``pynvml`` (the ``nvidia-ml-py`` package) is imported only when asked for
(:func:`import_pynvml`); every function here takes the module, so tests hand
them a fake.  The meter that samples a GPU over the timed windows is
:class:`~amp_suite.machine.nvml_meter.NvmlMeter`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from amp_suite.machine.window_meter import one_line

# NVML clock event ("throttle") reason bits: (pynvml constant suffix, value, name).
# pynvml >= 12 spells the constants nvmlClocksEventReason*, older ones
# nvmlClocksThrottleReason*; the values are the same in both.
CLOCK_EVENT_REASON_BITS: tuple[tuple[str, int, str], ...] = (
    ("GpuIdle", 0x1, "gpu idle"),
    ("ApplicationsClocksSetting", 0x2, "applications clocks setting"),
    ("SwPowerCap", 0x4, "sw power cap"),
    ("HwSlowdown", 0x8, "hw slowdown"),
    ("SyncBoost", 0x10, "sync boost"),
    ("SwThermalSlowdown", 0x20, "sw thermal slowdown"),
    ("HwThermalSlowdown", 0x40, "hw thermal slowdown"),
    ("HwPowerBrakeSlowdown", 0x80, "hw power brake slowdown"),
    ("DisplayClockSetting", 0x100, "display clock setting"),
)


def import_pynvml() -> Any:
    """The ``pynvml`` module (raises ImportError where nvidia-ml-py is not installed)."""
    import pynvml  # nvidia-ml-py; imported only when a GPU meter is asked for

    return pynvml


def _reason_bit(nvml: Any, suffix: str, default: int) -> int:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        value = getattr(nvml, prefix + suffix, None)
        if isinstance(value, int):
            return value
    return default


def clock_event_reason_names(nvml: Any, mask: int) -> list[str]:
    """The names of the clock event reason bits set in ``mask`` (NVML's bitmask), in bit order."""
    return [name for suffix, default, name in CLOCK_EVENT_REASON_BITS
            if mask & _reason_bit(nvml, suffix, default)]


def _visible_device_entry(index: int, environ: Mapping[str, str]) -> str | None:
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    return entries[index] if 0 <= index < len(entries) else None


def nvml_handle(nvml: Any, index: int, environ: Mapping[str, str] = os.environ) -> Any:
    """NVML's handle of the GPU a CUDA program sees as device ``index``.

    NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``;
    CUDA numbers only the visible ones. An integer entry of that variable is an
    NVML index; a ``GPU-…`` (or ``MIG-…``) entry is a UUID or its prefix.
    """
    entry = _visible_device_entry(index, environ)
    if entry is None:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    try:
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    except Exception:  # a UUID prefix: compare with each GPU's UUID
        for nvml_index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            if uuid.startswith(entry):
                return handle
        raise


def this_process_pids() -> set[int]:
    """This process's pid in each PID namespace /proc can see (``NSpid``), at least ``os.getpid()``."""
    pids = {os.getpid()}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                pids.update(int(p) for p in line.split()[1:] if p.isdigit())
    except OSError:
        pass
    return pids



def nvml_machine_info(index: int, nvml: Any = None, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Settings of the GPU (CUDA device ``index``) that change timings, as NVML reports them.

    Keys, each present only when NVML answers: ``persistence_mode`` (bool),
    ``mig_mode`` (current, bool), ``ecc_mode`` (current, bool), ``compute_mode``
    (``default``, ``exclusive_thread``, ``prohibited``, ``exclusive_process``),
    ``applications_sm_clock_mhz``, ``applications_memory_clock_mhz`` (MHz),
    ``power_limit_w`` (enforced, W), ``default_power_limit_w`` (W),
    ``other_compute_processes`` (pids of the compute processes on the GPU now,
    this one left out). On failure
    to reach the GPU: ``{"error": "<one line>"}``.
    """
    try:
        nvml = import_pynvml() if nvml is None else nvml
    except ImportError:
        return {"error": "nvidia-ml-py not installed"}
    try:
        nvml.nvmlInit()
        handle = nvml_handle(nvml, index, environ)
    except Exception as error:
        return {"error": f"NVML: {one_line(error)}"}

    info: dict[str, Any] = {}

    def put(key: str, read: Any) -> None:
        try:
            info[key] = read()
        except Exception:
            pass

    def current(pair: Any) -> Any:
        return pair[0] if isinstance(pair, (list, tuple)) else pair

    compute_modes = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
    put("persistence_mode", lambda: bool(nvml.nvmlDeviceGetPersistenceMode(handle)))
    put("mig_mode", lambda: bool(current(nvml.nvmlDeviceGetMigMode(handle))))
    put("ecc_mode", lambda: bool(current(nvml.nvmlDeviceGetEccMode(handle))))
    put("compute_mode", lambda: compute_modes.get(int(mode := nvml.nvmlDeviceGetComputeMode(handle)), str(mode)))
    put("applications_sm_clock_mhz",
        lambda: int(nvml.nvmlDeviceGetApplicationsClock(handle, getattr(nvml, "NVML_CLOCK_SM", 1))))
    put("applications_memory_clock_mhz",
        lambda: int(nvml.nvmlDeviceGetApplicationsClock(handle, getattr(nvml, "NVML_CLOCK_MEM", 2))))
    put("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
    put("default_power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0)
    own = this_process_pids()
    put("other_compute_processes",
        lambda: sorted({int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)} - own))
    return info

