"""Energy and GPU telemetry over the timed windows of a run, without importing a framework.

A *timed window* is a stretch of training whose wall time becomes a
throughput figure. The worker calls :meth:`WindowMeter.start` right before a
window's clock starts and :meth:`WindowMeter.stop` right after it stops, with
the number of images trained in between. :meth:`WindowMeter.summary` then gives
the run's figures over all windows (plain JSON-able values, units in the key
names) and :meth:`WindowMeter.flags` one line per reason the cell's timing
cannot be trusted.

Meters, one module per source:

- :class:`~amp_suite.machine.nvml_meter.NvmlMeter` — an NVIDIA GPU through NVML (the ``pynvml`` module of the
  ``nvidia-ml-py`` package, imported lazily): the GPU's energy counter, and a
  background thread sampling clocks, power, temperature, utilisation, clock
  event (throttle) reasons and the processes on the GPU every
  ``sample_interval_s`` while a window is open.
- :class:`~amp_suite.machine.rapl.RaplMeter` — CPU package energy from Linux powercap (RAPL; AMD's
  kernel driver exposes the same ``intel-rapl`` interface).
- :class:`~amp_suite.machine.window_meter.NullMeter` — nothing to measure; its summary says why.

:func:`open_meter` picks one. Telemetry never fails a run: every NVML or
file-system error after a meter is open is swallowed and only leaves figures out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amp_suite.machine.nvml import nvml_machine_info
from amp_suite.machine.nvml_meter import DEFAULT_SAMPLE_INTERVAL_S, NvmlMeter
from amp_suite.machine.rapl import DEFAULT_POWERCAP_ROOT, RaplMeter
from amp_suite.machine.window_meter import NullMeter, TelemetryUnavailable, WindowMeter, one_line

# What the worker calls: a meter for its device, and the GPU's settings (amp_suite.machine.nvml).
__all__ = ["nvml_machine_info", "open_meter"]


def open_meter(device_kind: str, index: int | None = 0, *, nvml: Any = None,
               powercap_root: Path = DEFAULT_POWERCAP_ROOT,
               sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S) -> WindowMeter:
    """The meter for a run on ``device_kind`` (``"gpu"`` or ``"cpu"``); never raises.

    ``"gpu"``: :class:`NvmlMeter` for CUDA device ``index`` when ``pynvml``
    imports and NVML initialises, else a :class:`NullMeter` saying why.
    ``"cpu"``: :class:`RaplMeter` when a package energy counter is readable,
    else a :class:`NullMeter`. Anything else: a :class:`NullMeter`.
    """
    try:
        if device_kind == "gpu":
            return NvmlMeter(0 if index is None else index, nvml, sample_interval_s=sample_interval_s)
        if device_kind == "cpu":
            return RaplMeter(powercap_root)
        return NullMeter(f"no telemetry for device kind {device_kind!r}")
    except TelemetryUnavailable as error:
        return NullMeter(str(error))
    except Exception as error:
        return NullMeter(f"telemetry failed to open: {one_line(error)}")


def metered_share(device_kind: str, devices: int, nnodes: int) -> int:
    """Into how many equal shares a cell's images split, of which one meter's counter measures one.

    A data-parallel cell splits its global batch evenly over its ``devices``.
    An NVML meter reads one GPU, so its energy is that of one share of
    ``devices``; a RAPL meter reads the CPU packages of one machine, which
    every device of that machine shares, so its energy is that of one share
    of ``nnodes``.  A window's images over this share are the images the
    counter's energy trained: ``energy_per_image_j`` of the metered device.
    """
    return max(devices if device_kind == "gpu" else nnodes, 1)


def energy_scope(device_kind: str, share: int) -> str:
    """What a cell's energy figures cover where its meter measured one of ``share`` shares ("" when all)."""
    if share <= 1:
        return ""
    what = "one GPU" if device_kind == "gpu" else "the CPU packages of one machine"
    return (f"{what} of the cell's {share} {'GPUs' if device_kind == 'gpu' else 'machines'}: energy_j and "
            f"mean_power_w are its own, energy_per_image_j is over its 1/{share} of the images (the data-parallel "
            "split is even)")
