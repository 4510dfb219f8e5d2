"""Small helpers shared by framework plugins (no framework imports here)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from amp_suite.environment import cpu_info
from amp_suite.errors import UnsupportedError
from amp_suite.records import DeviceInfo, EpochResult, PrecisionApplied, RunSpec


def cpu_device() -> DeviceInfo:
    """The host CPU as a :class:`DeviceInfo`."""
    info = cpu_info()
    return DeviceInfo(kind="cpu", platform="cpu", name=info["cpu_model"], count=1)


def require_device_kind(run: RunSpec, gpu_available: bool, framework: str) -> str:
    """``"gpu"`` or ``"cpu"`` for ``run.device``; an explicit ``gpu`` with none is unsupported."""
    if run.device == "cpu":
        return "cpu"
    if gpu_available:
        return "gpu"
    if run.device == "gpu":
        raise UnsupportedError(f"device 'gpu' requested but {framework} sees no GPU")
    return "cpu"


# What the built-in plugins run: TF32 exists only on NVIDIA GPUs (sm 8.0+).
STANDARD_PRECISIONS = {"cpu": ("fp32", "amp_fp16", "amp_bf16"), "gpu": ("fp32", "tf32", "amp_fp16", "amp_bf16")}
# The dtypes each precision computes in, and whether it scales the loss.
COMPUTE_DTYPES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "float16", "amp_bf16": "bfloat16"}
# Dynamic loss scaling, the same in every framework: start at 2**15 (Keras's
# and jmp examples' value), halve on overflow, double after 2000 finite steps.
DYNAMIC_LOSS_SCALE_INIT = 2.0 ** 15
LOSS_SCALE_GROWTH_INTERVAL = 2000


def loss_scale_growth_interval(run: RunSpec) -> int:
    """Finite steps before the dynamic loss scale doubles (option ``loss_scale_growth_interval``)."""
    return int(run.options.get("loss_scale_growth_interval", LOSS_SCALE_GROWTH_INTERVAL))


def standard_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    """The :class:`PrecisionApplied` every framework gives for a standard precision name.

    The initial dynamic loss scale is :data:`DYNAMIC_LOSS_SCALE_INIT` unless the
    framework options set ``initial_loss_scale``.  Raises
    :class:`UnsupportedError` for ``tf32`` on a device without TF32.
    """
    initial_scale = float(run.options.get("initial_loss_scale", DYNAMIC_LOSS_SCALE_INIT))
    precision = run.precision
    if precision not in COMPUTE_DTYPES:
        raise UnsupportedError(f"precision {precision!r} is not supported; allowed: {', '.join(COMPUTE_DTYPES)}")
    if precision == "tf32" and not device.supports_tf32:
        raise UnsupportedError(f"tf32 needs an NVIDIA GPU of compute capability 8.0 or newer; this run is on {device.kind} ({device.name})")
    fp16 = precision == "amp_fp16"
    return PrecisionApplied(
        precision=precision,
        compute_dtype=COMPUTE_DTYPES[precision],
        param_dtype="float32",
        output_dtype="float32",
        loss_scaling="dynamic" if fp16 else "none",
        initial_loss_scale=initial_scale if fp16 else None,
    )


StepFn = Callable[[Any], tuple[float, bool]]
StepTimer = Callable[[StepFn, Any], tuple[float, tuple[float, bool]]]


def wall_clock_step(step: StepFn, batch: Any) -> tuple[float, tuple[float, bool]]:
    """Time one step with the host clock.

    ``step`` returns its loss as a Python float, and fetching that value waits
    for the device, so the duration covers finished work.
    """
    start = time.perf_counter()
    outcome = step(batch)
    return time.perf_counter() - start, outcome


def timed_epoch(batches: list[tuple[Any, Any]], step: StepFn, *,
                timer: StepTimer = wall_clock_step) -> EpochResult:
    """Run ``step`` on each ``(images, labels)`` batch in order and time each one.

    ``step`` returns ``(loss, applied)``: the unscaled loss as a float, and
    whether the update was applied (false for a step skipped on overflow).
    The caller fills in ``loss_scale_final`` and ``extra``.
    """
    times: list[float] = []
    losses: list[float] = []
    skipped = 0
    epoch_start = time.perf_counter()
    for batch in batches:
        seconds, (loss, applied) = timer(step, batch)
        times.append(seconds)
        losses.append(loss)
        skipped += not applied
    return EpochResult(
        step_times_s=times, step_losses=losses, samples=sum(int(labels.shape[0]) for _, labels in batches),
        epoch_time_s=time.perf_counter() - epoch_start, skipped_steps=skipped,
    )


def hwc_rows_to_chw(kernel: np.ndarray, hwc: tuple[int, int, int]) -> np.ndarray:
    """Reorder a dense kernel's input rows from NHWC-flatten to NCHW-flatten order."""
    h, w, c = hwc
    out = kernel.shape[1]
    return kernel.reshape(h, w, c, out).transpose(2, 0, 1, 3).reshape(h * w * c, out)


def chw_rows_to_hwc(kernel: np.ndarray, hwc: tuple[int, int, int]) -> np.ndarray:
    """The inverse of :func:`hwc_rows_to_chw`."""
    h, w, c = hwc
    out = kernel.shape[1]
    return kernel.reshape(c, h, w, out).transpose(1, 2, 0, 3).reshape(h * w * c, out)


def layer_name(variable: str) -> tuple[str, str]:
    """``"layer1_0_bn1/mean"`` -> ``("layer1_0_bn1", "mean")``."""
    layer, _, leaf = variable.rpartition("/")
    return layer, leaf
