"""Small helpers shared by framework plugins (no framework imports here)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from amp_suite.errors import UnsupportedError
from amp_suite.machine.devices import version_text
from amp_suite.machine.environment import cpu_info
from amp_suite.numerics.fp8 import RECIPE
from amp_suite.precision import AMP_PRECISIONS, DEFAULT_LOSS_SCALING, LOSS_SCALED_PRECISIONS, stored_dtype
from amp_suite.records import DeviceInfo, EpochResult, PrecisionApplied, RunSpec


def cpu_device() -> DeviceInfo:
    """The host CPU as a :class:`DeviceInfo`."""
    info = cpu_info()
    return DeviceInfo(kind="cpu", platform="cpu", name=info["cpu_model"], count=1)


def read_cuda_versions(versions: Any | None) -> dict[str, str]:
    """``cuda_runtime``, ``cudnn`` and ``cudnn_compiled`` read from JAX's ``cuda_versions`` object.

    ``versions`` is what the caller imported as ``jax._src.lib.cuda_versions``
    (None without a CUDA plugin), so no framework is imported here.  A version
    whose function is absent, raises, or answers nothing is left out.
    """
    if versions is None:
        return {}
    found: dict[str, str] = {}
    for key, function, kind in (("cuda_runtime", "cuda_runtime_get_version", "cuda"),
                                ("cudnn", "cudnn_get_version", "cudnn"),
                                ("cudnn_compiled", "cudnn_build_version", "cudnn")):
        try:
            value = getattr(versions, function)()
        except Exception:  # absent in this version, or the library failed to load
            continue
        if value not in (None, "", 0):
            found[key] = version_text(value, kind)
    return found


def require_device_kind(run: RunSpec, gpu_available: bool, framework: str) -> str:
    """``"gpu"`` or ``"cpu"`` for ``run.device``; an explicit ``gpu`` with none is unsupported."""
    if run.device == "cpu":
        return "cpu"
    if gpu_available:
        return "gpu"
    if run.device == "gpu":
        raise UnsupportedError(f"device 'gpu' requested but {framework} sees no GPU")
    return "cpu"


# The measured precisions a plugin normally runs: TF32 exists only on NVIDIA GPUs (sm 8.0+).
STANDARD_PRECISIONS = {"cpu": ("fp32", "amp_fp16", "amp_bf16"), "gpu": ("fp32", "tf32", "amp_fp16", "amp_bf16")}
# The standard precisions and the float64 reference (tests only).
STANDARD_PRECISIONS_AND_FP64 = {kind: (*names, "fp64") for kind, names in STANDARD_PRECISIONS.items()}
# What the built-in plugins declare: those and fp8 (amp_suite.numerics.fp8's recipe, emulated where the device
# has no FP8 matmul).
BUILT_IN_PRECISIONS = {kind: (*names, "fp8", "fp64") for kind, names in STANDARD_PRECISIONS.items()}
# The dtypes each precision computes in, and whether it scales the loss (fp8: bfloat16 outside its FP8 matmuls).
COMPUTE_DTYPES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "float16", "amp_bf16": "bfloat16",
                  "fp8": "bfloat16", "fp64": "float64"}
# NVIDIA's FP8 tensor cores: Ada (8.9) and Hopper (9.0) and newer.
FP8_COMPUTE_CAPABILITY = (8, 9)


def has_fp8_matmul(device: DeviceInfo) -> bool:
    """Whether ``device`` multiplies FP8 operands in hardware: a CUDA GPU of compute capability 8.9 or newer."""
    if device.kind != "gpu" or device.platform != "cuda" or not device.compute_capability:
        return False
    try:
        major, minor = (int(part) for part in device.compute_capability.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= FP8_COMPUTE_CAPABILITY


def fp8_matmul_path(device: DeviceInfo, native_path: bool) -> str:
    """``"native"`` where the device has FP8 matmuls and the plugin a path to them (``native_path``), else
    ``"emulated"``: the recipe's quantize-dequantize around a bfloat16/float32 matmul."""
    return "native" if native_path and has_fp8_matmul(device) else "emulated"
# Dynamic loss scaling, the same in every framework: start at 2**15 (Keras's
# and jmp examples' value), halve on overflow, double after 2000 finite steps.
DYNAMIC_LOSS_SCALE_INIT = 2.0 ** 15
LOSS_SCALE_GROWTH_INTERVAL = 2000


def loss_scale_growth_interval(run: RunSpec) -> int:
    """Finite steps before the dynamic loss scale doubles (option ``loss_scale_growth_interval``)."""
    return int(run.options.get("loss_scale_growth_interval", LOSS_SCALE_GROWTH_INTERVAL))


def standard_precision(run: RunSpec, device: DeviceInfo, *, fp8_native_path: bool = False) -> PrecisionApplied:
    """The :class:`PrecisionApplied` every framework gives for a standard precision name.

    The initial dynamic loss scale is :data:`DYNAMIC_LOSS_SCALE_INIT` unless the
    framework options set ``initial_loss_scale``.  ``fp64`` keeps parameters,
    compute and logits in float64 (the host lets it through only to a plugin
    that declares it).  Raises :class:`UnsupportedError` for ``tf32`` on a
    device without TF32.  ``fp8`` computes in bfloat16 outside its FP8 matmuls
    and records the recipe and whether its matmuls run natively
    (``fp8_native_path``: the plugin has a path to FP8 tensor cores, used on a
    device that has them, :func:`fp8_matmul_path`).
    """
    initial_scale = float(run.options.get("initial_loss_scale", DYNAMIC_LOSS_SCALE_INIT))
    scaling = _loss_scaling(run)
    precision = run.precision
    if precision not in COMPUTE_DTYPES:
        raise UnsupportedError(f"precision {precision!r} is not supported; allowed: {', '.join(COMPUTE_DTYPES)}")
    if precision == "tf32" and not device.supports_tf32:
        raise UnsupportedError(f"tf32 needs an NVIDIA GPU of compute capability 8.0 or newer; this run is on {device.kind} ({device.name})")
    scaled = precision in LOSS_SCALED_PRECISIONS and scaling != "none"
    stored = stored_dtype(precision)
    kept = _keep_fp32(run)
    amp = precision in AMP_PRECISIONS
    notes = (f"keep_fp32={','.join(kept)}: no effect, every layer of {precision} computes in "
             f"{COMPUTE_DTYPES[precision]}",) if kept and not amp else ()
    return PrecisionApplied(
        precision=precision,
        compute_dtype=COMPUTE_DTYPES[precision],
        param_dtype=stored,
        output_dtype=stored,
        loss_scaling=scaling if scaled else "none",
        initial_loss_scale=initial_scale if scaled else None,
        notes=notes,
        keep_fp32=kept if amp else (),
        fp8_recipe=RECIPE.describe() if precision == "fp8" else "",
        fp8_matmul=fp8_matmul_path(device, fp8_native_path) if precision == "fp8" else "",
    )


def _loss_scaling(run: RunSpec) -> str:
    """How an ``amp_fp16`` cell scales its loss: option ``loss_scaling`` (default ``dynamic``).

    ``dynamic``: halve on a step with inf/NaN gradients (skipped), double
    after :func:`loss_scale_growth_interval` finite steps; ``static``: the
    initial scale throughout, a step with inf/NaN gradients still skipped;
    ``none``: no scale and no check.  Read it from ``applied.loss_scaling``,
    which is ``none`` for every precision without a loss scale.
    """
    return str(run.options.get("loss_scaling", DEFAULT_LOSS_SCALING))


def _keep_fp32(run: RunSpec) -> tuple[str, ...]:
    """The layer names and kinds option ``keep_fp32`` keeps in float32 (empty: none); see
    :func:`amp_suite.workloads.kept.keeps` for which layers they pick."""
    return tuple(str(name) for name in run.options.get("keep_fp32", ()))


# One optimizer step on a staged batch: returns ``(loss, applied)`` as the
# framework's own (device) values, without waiting for them.  ``applied`` is
# false for a step skipped on overflow.
StepFn = Callable[[Any], tuple[Any, Any]]


def fetch_floats(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
    """Losses and applied flags of a window, turned into Python values (the default fetch)."""
    return [float(loss) for loss, _ in outcomes], [bool(applied) for _, applied in outcomes]


def no_meet() -> None:
    """A cell of one process has no other process to meet before the clock starts."""


def no_wait(outcome: tuple[Any, Any]) -> None:
    """The default wait: the step's work is done when it returns (eager CPU code)."""


# The figure (an EpochResult.extra key) that keeps this process's own window time when a cell of several
# processes reports the slowest process's as its window time.
PROCESS_WINDOW_TIME = "process_window_time_s"


def take_slowest_window(result: EpochResult, slowest: Callable[[float], float]) -> None:
    """A window of several processes: its time becomes the slowest process's, this process's own is kept.

    ``slowest(seconds)`` is the framework's collective that returns the largest
    of every process's ``seconds`` (an all-reduce MAX, an all-gather then max);
    call this after the window's clock stopped.  The process's own time goes to
    ``result.extra[PROCESS_WINDOW_TIME]`` (``process_window_time_s``, in every
    framework), the cell's to ``result.window_time_s``.
    """
    result.extra[PROCESS_WINDOW_TIME] = result.window_time_s
    result.window_time_s = float(slowest(result.window_time_s))


def timed_window(
    batches: list[Any],
    step: StepFn,
    *,
    wait: Callable[[tuple[Any, Any]], None] = no_wait,
    fetch: Callable[[list[tuple[Any, Any]]], tuple[list[float], list[bool]]] = fetch_floats,
    guard: Callable[[], AbstractContextManager[Any]] = nullcontext,
    step_times: Callable[[], list[float]] | None = None,
    samples: Callable[[Any], int] | None = None,
    meet: Callable[[], None] = no_meet,
) -> EpochResult:
    """Run ``step`` on each staged batch back to back, wait once, then fetch the losses.

    ``wait(last_outcome)`` blocks until the device finished every dispatched
    step (``torch.cuda.synchronize``, ``jax.block_until_ready``; nothing for
    eager CPU work, which is done when the call returns).  No host
    synchronization may happen between steps: ``guard()`` is entered around the
    dispatch loop and may forbid it (JAX's transfer guard does).  ``fetch``
    turns the window's outcomes into floats and bools in one go after the wait.
    ``step_times``, where the framework records device events per step, returns
    their durations after the wait.  ``samples(batch)`` counts a staged
    batch's examples where its labels have no ``shape`` (per-replica values).
    ``meet()``, in a cell of several processes, returns once every process
    has reached it (a barrier): the clock starts after it, so the slowest
    process's window (:func:`take_slowest_window`) holds no wait for the
    processes that finished staging later.
    The caller fills in ``loss_scale_final`` and ``extra``.
    """
    outcomes: list[tuple[Any, Any]] = []
    meet()
    start = time.perf_counter()
    with guard():
        for batch in batches:
            outcomes.append(step(batch))
    if outcomes:
        wait(outcomes[-1])
    window = time.perf_counter() - start
    losses, applied = fetch(outcomes)
    return EpochResult(
        step_losses=losses, samples=sum((samples or _batch_size)(b) for b in batches), window_time_s=window,
        step_times_s=step_times() if step_times is not None else [], skipped_steps=sum(not a for a in applied),
    )


def _batch_size(batch: Any) -> int:
    labels = batch[1] if isinstance(batch, tuple) else batch.labels
    return int(labels.shape[0])


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
