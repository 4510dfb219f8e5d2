"""Hook specifications of amp-suite.

Every hook is called with keyword arguments only.  An implementation may
accept fewer arguments than its spec, so new arguments never break old
plugins.  Hooks marked *firstresult* stop at the first implementation that
returns something other than ``None``: a framework plugin returns ``None``
when ``run.framework`` is not its own.

The per-run hooks are called inside the worker process that owns the run,
in this order::

    select_device -> set_precision -> build_model
      -> (per epoch) stage_batches -> train_epoch
      -> predict (validation) -> measure

Reporting hooks are called in the host process.  ``docs/hooks.md`` has one
section per hook, headed by its exact signature; a test keeps the two in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from amp_suite import hookspec
from amp_suite.records import (
    Batch,
    CellResult,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    PrecisionApplied,
    RunSpec,
    Workload,
)

# --- describing plugins (host and worker) ---------------------------------


@hookspec
def framework_info() -> FrameworkInfo:
    """Describe the framework this plugin runs, without importing it.

    :return: a :class:`~amp_suite.records.FrameworkInfo`.  Plugins that run no
        framework (reporters, measurement add-ons) do not implement this hook.
        Two plugins describing the same framework name is an error.
    """


# --- one run, inside its worker process ------------------------------------


@hookspec(firstresult=True)
def select_device(run: RunSpec) -> DeviceInfo | None:
    """Pick and prepare the device for ``run``.

    Honour ``run.device`` (``"auto"``: a GPU when the framework sees one, else
    the CPU; ``"cpu"``; ``"gpu"``).  GPU set-up that must happen before the
    device is touched (TF memory growth) happens here.

    :param run: the cell being run.
    :return: the chosen device, or ``None`` when ``run.framework`` is not this
        plugin's.  Raise :class:`amp_suite.errors.UnsupportedError` when the
        requested device does not exist.
    """


@hookspec(firstresult=True)
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    """Apply ``run.precision`` (``fp32``, ``tf32``, ``amp_fp16``, ``amp_bf16``).

    Called before :func:`build_model`, so process-global switches (Keras dtype
    policies, TF32 flags) are in place when the model is built.

    :param run: the cell being run.
    :param device: what :func:`select_device` returned.
    :return: what was really applied: compute, parameter and output dtypes,
        loss-scaling kind and initial scale.  ``None`` when ``run.framework``
        is not this plugin's.  Raise :class:`amp_suite.errors.UnsupportedError`
        for a precision the device cannot run (``tf32`` on a CPU).
    """


@hookspec(firstresult=True)
def build_model(
    run: RunSpec,
    workload: Workload,
    initial_weights: dict[str, np.ndarray],
    applied: PrecisionApplied,
    device: DeviceInfo,
) -> Any | None:
    """Build the workload's model and optimizer, loaded with the host's weights.

    :param run: the cell being run.
    :param workload: the framework-neutral model and optimizer description.
    :param initial_weights: canonical float32 parameters, keyed ``LAYER/w`` and
        ``LAYER/b``; conv kernels are ``(kh, kw, in, out)``, dense kernels
        ``(in, out)``, and a flatten follows NHWC order.  Every framework
        starts from exactly these values.
    :param applied: what :func:`set_precision` returned.
    :param device: what :func:`select_device` returned.
    :return: an opaque model handle the same plugin receives back in the later
        hooks (it never leaves the worker), or ``None`` when ``run.framework``
        is not this plugin's.
    """


@hookspec(firstresult=True)
def stage_batches(run: RunSpec, model: Any, batches: list[Batch]) -> Any | None:
    """Move one epoch's batches onto the device, outside every timed region.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param batches: the epoch's batches in the host's order (NHWC float32).
        Change only the layout; never reorder or re-normalize.
    :return: framework-native staged batches for :func:`train_epoch`, or
        ``None`` when ``run.framework`` is not this plugin's.
    """


@hookspec(firstresult=True)
def train_epoch(run: RunSpec, model: Any, staged: Any, epoch: int) -> EpochResult | None:
    """Train one epoch over ``staged`` batches in order.

    Each step's time is read only after the device finished that step (CUDA
    events or a blocking fetch of the loss), so per-step times are honest.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param staged: what :func:`stage_batches` returned for this epoch.
    :param epoch: 0-based epoch index.
    :return: per-step times and losses, samples seen and loss-scale figures,
        or ``None`` when ``run.framework`` is not this plugin's.
    """


@hookspec(firstresult=True)
def predict(run: RunSpec, model: Any, images: np.ndarray) -> np.ndarray | None:
    """Compute logits for ``images`` in the run's precision (no training).

    Used for validation accuracy and by the cross-framework agreement tests.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param images: NHWC float32 images, one batch.
    :return: float32 logits of shape ``(batch, classes)``, or ``None`` when
        ``run.framework`` is not this plugin's.
    """


@hookspec
def measure(run: RunSpec, model: Any, device: DeviceInfo) -> dict[str, Any] | None:
    """Add figures to the run's result after training.

    Every plugin may answer; the host merges the dicts and rejects a key
    given by two plugins.  Framework plugins should give ``param_count``,
    ``framework_version`` and, on a GPU, ``device_peak_memory_bytes`` from the
    framework allocator.  The host adds ``peak_rss_bytes`` itself.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param device: what :func:`select_device` returned.
    :return: a flat dict of JSON-able values, or ``None``.
    """


# --- reporting, in the host process ---------------------------------------


@hookspec
def write_report(
    results: list[CellResult], out_dir: Path, environment: dict[str, Any]
) -> list[Path] | None:
    """Write report files for a sweep's results.

    Called by ``amp-suite run`` after the sweep and by ``amp-suite report``.
    Every reporter answers.

    :param results: every cell's latest result, in sweep order, failures
        included.
    :param out_dir: the sweep's output directory.
    :param environment: the host's environment record (versions, CPU, GPU).
    :return: the paths written, or ``None``.
    """
