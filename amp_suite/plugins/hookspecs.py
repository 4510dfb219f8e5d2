"""Hook specifications of amp-suite.

Every hook is called with keyword arguments only.  An implementation may
accept fewer arguments than its spec, so new arguments never break old
plugins.  Hooks marked *firstresult* stop at the first implementation that
returns something other than ``None``.

The per-run hooks are called inside the worker process that owns the run,
in this order (``docs/hooks.md``, "The calls of one cell", says what each
line means; a test matches both against the calls of real cells)::

    framework_info
    select_device
    framework_info
    set_precision
    build_model
    ( reset_memory_peak? stage_batches train_epoch predict* )+
    measure+
    predict+
    ( stage_batches train_epoch )*
    runtime_versions

``amp-suite numerics`` runs its own worker per (framework, precision), which
calls ``framework_info select_device framework_info set_precision
build_model ( stage_batches trace_step )+``: one ``trace_step`` per traced
step, each with one staged batch.

``predict`` inside the training loop evaluates a workload with a target
accuracy between phases; the last group is the timing extension, trained
after validation.

A worker registers only the framework plugin its run names (plus plugins
that run no framework, i.e. that do not implement ``framework_info``), so a
framework plugin's hooks are only ever called for its own runs.

Reporting hooks are called in the host process.  ``docs/hooks.md`` has one
section per hook, headed by its exact signature; a test keeps the two in step.

This module is the one declaration of the hooks: the host's typed methods
and the framework plugin's protocol derive from it
(:mod:`amp_suite.plugins.hook_table`).  A cell hook marked :func:`optional`
is one a framework plugin may leave out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from amp_suite.markers import hookspec
from amp_suite.numerics.records import StepTrace
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

# The attribute :func:`optional` sets on a spec.
OPTIONAL_ATTRIBUTE = "amp_suite_optional"
Spec = TypeVar("Spec", bound=Callable[..., Any])


def optional(spec: Spec) -> Spec:
    """Mark a cell hook a framework plugin may leave out (its typed protocol,
    :class:`~amp_suite.plugins.framework_plugin.FrameworkPlugin`, then does not require it)."""
    setattr(spec, OPTIONAL_ATTRIBUTE, True)
    return spec


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
    :return: the chosen device.  Raise :class:`amp_suite.errors.UnsupportedError`
        when the requested device does not exist.
    """


@hookspec(firstresult=True)
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    """Apply ``run.precision`` (``fp32``, ``tf32``, ``amp_fp16``, ``amp_bf16``).

    Called before :func:`build_model`, so process-global switches (Keras dtype
    policies, TF32 flags) are in place when the model is built.

    :param run: the cell being run.
    :param device: what :func:`select_device` returned.
    :return: what was really applied: compute, parameter and output dtypes,
        loss-scaling kind and initial scale, and in ``notes`` the switches
        that change results (BatchNorm in float32, TF32 flags, XLA).  Raise
        :class:`amp_suite.errors.UnsupportedError` for a precision the device
        cannot run (``tf32`` on a CPU).
    """


@hookspec(firstresult=True)
def build_model(
    run: RunSpec,
    workload: Workload,
    initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray],
    applied: PrecisionApplied,
    device: DeviceInfo,
) -> Any | None:
    """Build the workload's model and optimizer, loaded with the host's variables.

    Translate ``workload.layers`` (the vocabulary of :mod:`amp_suite.workloads.layers`)
    into the framework's layers once, and the optimizer of
    ``workload.optimizer`` with the arithmetic ``docs/workloads.md`` states.

    :param run: the cell being run.
    :param workload: the framework-neutral architecture, input pipeline and optimizer.
    :param initial_weights: canonical float32 trainable parameters, keyed
        ``LAYER/w``, ``LAYER/b`` (conv and dense) and ``LAYER/scale``,
        ``LAYER/offset`` (BatchNorm); conv kernels are ``(kh, kw, in, out)``,
        dense kernels ``(in, out)``, and a flatten follows NHWC order.
    :param initial_state: canonical float32 model state: each BatchNorm's
        running ``LAYER/mean`` and ``LAYER/var``.  Empty for stateless models.
    :param applied: what :func:`set_precision` returned.
    :param device: what :func:`select_device` returned.
    :return: an opaque model handle the same plugin receives back in the later
        hooks (it never leaves the worker).  Every framework starts from
        exactly these values.
    """


@hookspec(firstresult=True)
def stage_batches(run: RunSpec, model: Any, batches: list[Batch]) -> Any | None:
    """Move one epoch's batches onto the device, outside every timed region.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param batches: the epoch's batches in the host's order (NHWC float32).
        Change only the layout; never reorder or re-normalize.  A model with
        ``dropout`` layers gets each batch's masks in ``Batch.masks`` (layer
        name -> float32 array, already scaled by ``1 / (1 - rate)``; shape
        ``(batch, *activation)``, or ``(batch,)`` for ``per_sample``): stage
        them with the batch, and multiply each dropout layer's activation by
        its mask in the training step; evaluation and :func:`predict` apply no
        dropout.  ``Batch.rows(start, stop)`` slices images, labels and masks
        together for a replica's shard.
    :return: framework-native staged batches for :func:`train_epoch`.
    """


@hookspec(firstresult=True)
def train_epoch(run: RunSpec, model: Any, staged: Any, epoch: int) -> EpochResult | None:
    """Train over ``staged`` batches of epoch ``epoch``, in order, as one measurement window.

    The host calls this several times per epoch, each time with the next
    batches (see :mod:`amp_suite.cell.windows`: warm-up steps one at a time, then
    windows of up to ``run.window_steps`` steps, then ``run.latency_steps``
    steps one at a time).  Dispatch the steps back to back without any host
    synchronization between them (keep losses, finite flags and loss scales on
    the device), wait for the device once at the end, then fetch the losses:
    :func:`amp_suite.plugins.kit.timed_window` does exactly this.  Training
    mode: BatchNorm normalizes with batch statistics and updates its running
    statistics, which the model handle carries on.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param staged: what :func:`stage_batches` returned for these batches.
    :param epoch: 0-based epoch index.
    :return: the window's time, per-step losses, samples seen, loss-scale
        figures and, where the framework records device events, per-step times.
    """


@optional
@hookspec
def reset_memory_peak(run: RunSpec, model: Any, device: DeviceInfo) -> None:
    """Restart peak-memory counters: warm-up is over and measured training begins.

    Every plugin may answer (the host's own plugin restarts the process's peak
    resident memory); a framework plugin resets its allocator's peak where the
    framework allows it (``torch.cuda.reset_peak_memory_stats``,
    ``tf.config.experimental.reset_memory_stats``).  :func:`measure` is called
    after training and before validation, so peaks cover training only.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param device: what :func:`select_device` returned.
    """


@hookspec(firstresult=True)
def predict(run: RunSpec, model: Any, images: np.ndarray, training: bool) -> np.ndarray | None:
    """Compute logits for ``images`` in the run's precision, without training.

    Used for validation accuracy (``training=False``) and by the
    cross-framework agreement tests (both modes).

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param images: NHWC float32 images, one batch, already normalized; for a
        token workload, int32 token ids ``(batch, context)``.
    :param training: ``False``: evaluation mode (BatchNorm uses its running
        statistics).  ``True``: training mode (BatchNorm uses the batch's
        statistics) *without* changing any variable or running statistic.
    :return: float32 logits of shape ``(batch, classes)``, or ``(batch,
        context, vocab)`` for token ids.
    """


@hookspec(firstresult=True)
def get_variables(run: RunSpec, model: Any) -> dict[str, np.ndarray] | None:
    """The model's current variables, in the canonical names and layouts.

    The inverse of the loading :func:`build_model` does: parameters and state
    keyed as in ``initial_weights`` and ``initial_state``, float32 numpy
    arrays in the canonical layouts.  Used to check that frameworks train
    identically, step for step.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :return: every trainable parameter and every state entry.
    """


@optional
@hookspec(firstresult=True)
def trace_step(run: RunSpec, model: Any, staged: Any) -> StepTrace | None:
    """Train one step on ``staged`` (one batch) and trace it, layer by layer, for ``amp-suite numerics``.

    The step is an ordinary training step of ``run``'s precision (autocast,
    loss scaling and the optimizer's update included), and it also records:
    every named layer's output activation (forward pass, training mode), by
    its neutral name; every trainable variable's gradient, by its canonical
    name (``LAYER/leaf``), unscaled; the loss; and the loss scale its
    backward pass used.  Values are float64 NumPy copies in the canonical
    layouts (NHWC activations, the kernel layouts of :func:`build_model`).

    :param run: the run being traced.
    :param model: the handle from :func:`build_model`.
    :param staged: what :func:`stage_batches` returned for one batch.
    :return: a :class:`~amp_suite.numerics.records.StepTrace`; ``None`` where
        the plugin cannot trace (the host then reports the framework as
        unable to, and never fails the command).
    """


@hookspec
def measure(run: RunSpec, model: Any, device: DeviceInfo) -> dict[str, Any] | None:
    """Add figures to the run's result after training.

    Every plugin may answer; the host merges the dicts and rejects a key
    given by two plugins.  Framework plugins should give ``param_count``
    (trainable parameters only),
    ``framework_version`` and, on a GPU, ``device_peak_memory_bytes`` from the
    framework allocator.  The host adds ``peak_rss_bytes`` itself.

    :param run: the cell being run.
    :param model: the handle from :func:`build_model`.
    :param device: what :func:`select_device` returned.
    :return: a flat dict of JSON-able values, or ``None``.
    """


@hookspec(firstresult=True)
def runtime_versions(run: RunSpec) -> dict[str, str] | None:
    """The CUDA runtime and cuDNN versions the framework really loaded for ``run``.

    Called in the worker after the cell succeeded; the answer goes into the
    cell's environment record (the report's header names each version a
    sweep's cells saw).  Read what the framework already loaded (its
    version APIs, its build information) and never raise: a version is a
    nicety, and a call that raises fails the cell.

    :param run: the cell that ran.
    :return: ``cuda_runtime_version`` and ``cudnn_version`` as text
        (``"13.0"``, ``"9.20.0"``; :func:`amp_suite.machine.devices.version_text`
        turns the integers CUDA libraries report into that), each only where
        known; ``{}`` or ``None`` on a CPU.
    """


# --- reporting, in the host process ---------------------------------------


@hookspec
def report_sections(
    results: list[CellResult], out_dir: Path, environment: dict[str, Any]
) -> list[tuple[str, str]] | None:
    """Contribute sections to ``report.md`` (a plugin's figures, links to its files).

    Called in the host before :func:`write_report`, with the same arguments.
    Every plugin may answer; sections appear in plugin registration order
    after the built-in tables.

    :param results: every cell's latest result, failures included.
    :param out_dir: the sweep's output directory.
    :param environment: the host's environment record.
    :return: ``(title, markdown)`` pairs, or ``None``.
    """


@hookspec
def write_report(
    results: list[CellResult], out_dir: Path, environment: dict[str, Any], sections: list[tuple[str, str]]
) -> list[Path] | None:
    """Write report files for a sweep's results.

    Called by ``amp-suite run`` after the sweep and by ``amp-suite report``.
    Every reporter answers.

    :param results: every cell's latest result, in sweep order, failures
        included.
    :param out_dir: the sweep's output directory.
    :param environment: the host's environment record (versions, CPU, GPU,
        and ``calibration`` and ``cost`` when known).
    :param sections: what :func:`report_sections` returned, flattened, for
        reporters that assemble a document (the built-in ``report.md``).
    :return: the paths written, or ``None``.
    """
