"""The figures a cell derives from what its plugin answered: checked losses, promoted extras, memory, energy.

Each function takes plain answers (each ``EpochResult``, ``measure``'s dict,
the meter's summary) and returns figures for the cell's ``metrics``; none
calls a hook.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from amp_suite.errors import DivergedError, PluginError
from amp_suite.plugins.answers import figure_problem
from amp_suite.records import EpochResult

# NVML's energy counter advances in steps (about every 0.1 s seen on an H100): over windows
# shorter than this on average, per-window differences are mostly quantization.
ENERGY_MIN_MEAN_WINDOW_S = 0.5
ENERGY_KEYS = ("energy_j", "energy_per_image_j", "mean_power_w")


def check_finite(losses: list[float], epoch: int, first_step: int = 0) -> None:
    """A :class:`DivergedError` naming the first loss that is not finite, counting steps from ``first_step``."""
    for step, loss in enumerate(losses, start=first_step):
        if not math.isfinite(loss):
            raise DivergedError(f"loss became {loss} at epoch {epoch} step {step}")


def epoch_extra_metrics(plugin: str, epochs: list[EpochResult], reserved: set[str],
                        dropped: list[str] | None = None) -> dict[str, Any]:
    """``EpochResult.extra`` promoted to figures of the run: each key with its last epoch's value.

    A key the host computes itself is a :class:`PluginError`, never silently
    overwritten or dropped.  (The host has already checked that values are
    plain scalars when ``train_epoch`` answered.)  A value that cannot be
    stored (:func:`~amp_suite.plugins.host.figure_problem`) is left out, its
    line added to ``dropped`` (without ``dropped``: a :class:`PluginError`).
    """
    promoted: dict[str, Any] = {}
    for epoch in epochs:
        for key, value in epoch.extra.items():
            if key in reserved:
                raise PluginError(f"plugin {plugin!r}: EpochResult.extra key {key!r} is a figure the "
                                  "host computes itself; give the figure another name")
            problem = figure_problem(key, value)
            if problem:
                line = (f"plugin {plugin!r}: EpochResult.extra key {key!r} {problem}; the value is "
                        "left out")
                if dropped is None:
                    raise PluginError(line)
                if line not in dropped:
                    dropped.append(line)
                promoted.pop(key, None)
                continue
            promoted[key] = value.item() if isinstance(value, np.generic) else value
    return promoted


def energy_figures(summary: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """The telemetry summary, without energy where NVML's counter steps are too coarse for the windows."""
    out = dict(summary)
    windows = int(metrics.get("timed_windows") or 0)
    mean_window = float(metrics.get("window_time_s") or 0.0) / windows if windows else 0.0
    if str(out.get("telemetry_source", "")).startswith("NVML") and mean_window < ENERGY_MIN_MEAN_WINDOW_S \
            and any(key in out for key in ENERGY_KEYS):
        for key in ENERGY_KEYS:
            out.pop(key, None)
        out["energy_note"] = (f"no energy figure: timed windows last {mean_window:.3g} s on average, under the "
                              f"{ENERGY_MIN_MEAN_WINDOW_S:g} s NVML's energy counter needs to resolve them")
    return out


# Figures the host derives from a plugin's device peak (see memory_without_inputs).
MEMORY_KEYS = ("staged_input_bytes", "device_peak_memory_with_inputs_bytes")


def staged_bytes(batches: list[Any], devices: int = 1) -> int:
    """Bytes of ``batches`` as the host hands them to ``stage_batches`` (images, labels, masks), per device."""
    total = 0
    for batch in batches:
        total += int(batch.images.nbytes) + int(batch.labels.nbytes)
        total += sum(int(mask.nbytes) for mask in batch.masks.values())
    return total // max(devices, 1)


def memory_without_inputs(measured: dict[str, Any], staged: int) -> dict[str, Any]:
    """The device peak without the staged input batches, beside the peak with them.

    The worker resets the allocator's peak before the first timed window and
    then stages each window's batches on the device, so an allocator peak
    (PyTorch's ``max_memory_allocated``, TensorFlow's ``peak``) holds up to a
    window of float32 batches that no training step needs: ``staged`` bytes
    are taken off it.  A plugin whose figure has no inputs in it (JAX's XLA
    memory analysis) says so with ``device_peak_memory_excludes_inputs``.
    """
    peak = measured.get("device_peak_memory_bytes")
    if peak is None:
        return {}
    out: dict[str, Any] = {"staged_input_bytes": int(staged)}
    if measured.get("device_peak_memory_excludes_inputs"):
        return out
    out["device_peak_memory_with_inputs_bytes"] = int(peak)
    out["device_peak_memory_bytes"] = max(int(peak) - int(staged), 0)
    return out


def device_index(environ: Any = None) -> int:
    """The CUDA device number, as this process sees it, of the GPU it trains on.

    The first visible GPU, or the ``LOCAL_RANK``-th under torchrun;
    :class:`amp_suite.machine.telemetry.NvmlMeter` maps it through
    ``CUDA_VISIBLE_DEVICES`` to NVML's numbering.
    """
    local = (os.environ if environ is None else environ).get("LOCAL_RANK", "0")
    return int(local) if local.isdigit() else 0
