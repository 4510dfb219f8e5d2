"""One cell's protocol: the hooks called in the order ``docs/hooks.md`` states, one named step per line of it.

:func:`run_cell` reads as the documented order ("The calls of one cell"),
each step a function of this module::

    framework_info          check_framework    the framework is there and can run the workload
                            prepare_inputs     (no hook) initial variables, the batches, the learning rate
    select_device           choose_device      refused if it is not the device the run asked for
    framework_info          apply_precision    the precision is one the plugin declares
    set_precision
    build_model             build_model
    ( reset_memory_peak? stage_batches train_epoch predict* )+
                            train              every phase of every epoch; predict where an evaluation is due
                            training_figures   (no hook) the steady state, warm-up, FLOPs, plugins' extras
    measure+                measure            memory peaks of training, before validation
    predict+                validate           (validation.py)
    ( stage_batches train_epoch )*
                            extend_timing      only when the timed windows fell short (extension.py)
                            final_figures      (no hook) tokens, energy and the flags on the timing
                            record_machine     (no hook) what ran the cell
    runtime_versions        record_runtime

A step that raises ends the cell there; :func:`amp_suite.cell.worker.execute`
turns the exception into the cell's status.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from amp_suite import progress
from amp_suite.cell.curve import CurveTracker
from amp_suite.cell.extension import TIMING_KEYS, extend_timing, short_timing
from amp_suite.cell.figures import (
    MEMORY_KEYS,
    check_finite,
    device_index,
    energy_figures,
    epoch_extra_metrics,
    memory_without_inputs,
    staged_bytes,
)
from amp_suite.cell.kind_check import undeclared_kinds
from amp_suite.cell.loss_scale import loss_scale_figures
from amp_suite.cell.validation import TOKEN_KEYS, VALIDATION_KEYS, TargetTracker, once, token_figures, validate
from amp_suite.cell.windows import MeasurementPlan, Phase, steady_state, timing_flags
from amp_suite.datasets import InputPipeline, run_pipeline
from amp_suite.errors import FrameworkUnavailableError, UnsupportedError
from amp_suite.machine import devices, noise, telemetry
from amp_suite.machine.environment import cpu_info
from amp_suite.machine.loaded_libraries import loaded_cuda_libraries, numerics_environment
from amp_suite.modes import scaled_learning_rate
from amp_suite.plugins import host_memory
from amp_suite.plugins.host import PluginHost
from amp_suite.records import (
    CellResult,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    PrecisionApplied,
    RunSpec,
    Workload,
)
from amp_suite.workloads.fp8_layers import require_fp8_layers
from amp_suite.workloads.workload import forward_flops_per_image, init_variables, train_flops_per_image


@dataclass(frozen=True)
class CellInputs:
    """What the cell trains on, made before any framework call: the workload as this run trains it (its
    learning rate and schedule set), its initial variables and its input pipeline."""

    workload: Workload
    weights: dict[str, np.ndarray]
    state: dict[str, np.ndarray]
    pipeline: InputPipeline
    learning_rate: float


@dataclass
class Training:
    """What the training phases left: each phase's answer, the plan that timed them, the meter of their windows,
    the largest window's staged bytes, the machine's load before them and the evaluations made between them."""

    parts: list[tuple[Phase, EpochResult]]
    plan: MeasurementPlan
    meter: Any
    staged_peak: int
    load_before: Any
    target: TargetTracker
    curve: CurveTracker
    plugin: str  # the name of the plugin that answered train_epoch


def run_cell(run: RunSpec, workload: Workload, host: PluginHost, result: CellResult) -> None:
    """Run the cell ``run`` of ``workload`` through ``host``'s plugins, filling ``result`` (status aside)."""
    info = check_framework(run, workload, host)
    inputs = prepare_inputs(run, workload)
    device = choose_device(run, info, host, result)
    applied = apply_precision(run, device, host, result)
    host_memory.reset_peak_rss()
    rss_before = host_memory.current_rss_bytes()
    model = host.build_model(run, inputs.workload, inputs.weights, inputs.state, applied, device)
    training = train(run, inputs, host, model, device)
    metrics, dropped = training_figures(run, inputs, training, rss_before)
    metrics.update(loss_scale_figures(training.parts, applied))
    measured = measure(run, host, model, device, metrics, dropped, training.staged_peak, rss_before, result)
    metrics.update(validate(host, run, model, inputs.pipeline, run.batch_size, inputs.workload.outputs))
    meter, settled = time_again_if_short(run, host, model, inputs, training, device, metrics)
    final_figures(run, inputs, metrics, meter, settled, dropped, device.kind)
    result.metrics = metrics
    record_machine(run, device, measured, result)
    record_runtime(run, host, result)


def check_framework(run: RunSpec, workload: Workload, host: PluginHost) -> FrameworkInfo:
    """The run's framework as its plugin describes it (``framework_info``), refused before anything starts when it
    is not installed, cannot build a layer kind of the workload or has no data-parallel engine; its environment
    variables set where the user has not."""
    frameworks = host.frameworks()
    info = frameworks.get(run.framework)
    if info is None:
        failed = "; ".join(f"{f.name}: {f.error}" for f in host.failures)
        raise FrameworkUnavailableError(
            f"no plugin provides framework {run.framework!r}; loaded: {', '.join(frameworks) or 'none'}"
            + (f"; failed to load: {failed}" if failed else "")
        )
    missing = info.missing_modules()
    if missing:
        fix = (f"add it to the requirements of [environments.\"{run.environment}\"], then `amp-suite env create "
               f"{run.environment}`" if run.environment else info.install_hint())
        raise FrameworkUnavailableError(f"{info.display_name} is not installed (missing {', '.join(missing)}): {fix}")
    undeclared = undeclared_kinds(info, workload)
    if undeclared:
        raise UnsupportedError(f"{info.display_name} does not build layer kind(s) {', '.join(undeclared)} of workload "
                               f"{workload.name!r} (its plugin's FrameworkInfo.layer_kinds leaves them out)")
    if run.precision == "fp8":
        require_fp8_layers(workload)  # a workload with no FP8 layer but the head: unsupported, with the reason
    if run.distributed and not info.launcher:
        raise UnsupportedError(f"{info.display_name} has no data-parallel engine (its plugin's FrameworkInfo."
                               f"launcher is empty): run it with --devices 1")
    for name, value in info.env.items():
        os.environ.setdefault(name, value)
    return info


def prepare_inputs(run: RunSpec, workload: Workload) -> CellInputs:
    """The initial variables of the run's seed, its input pipeline, and the workload's optimizer for this run."""
    weights, state = init_variables(workload, run.seed)
    pipeline = run_pipeline(run, workload)
    # The cosine schedule decays over the optimizer steps this run really takes; the learning rate
    # follows the batch size by the run's rule (the workload's own batch size is the reference).
    learning_rate = scaled_learning_rate(run.learning_rate_rule, workload.optimizer.learning_rate,
                                         run.batch_size, workload.batch_size)
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(
        workload.optimizer, decay_steps=pipeline.steps_per_epoch * run.epochs, learning_rate=learning_rate))
    return CellInputs(workload, weights, state, pipeline, learning_rate)


def choose_device(run: RunSpec, info: FrameworkInfo, host: PluginHost, result: CellResult) -> DeviceInfo:
    """The device ``select_device`` picked, refused where it is not the one the run asked for (no silent CPU
    fallback)."""
    result.mode = run.mode or info.default_mode
    device = devices.select_checked(run, info, host.select_device)  # no silent CPU fallback
    result.device = asdict(device)
    return device


def apply_precision(run: RunSpec, device: DeviceInfo, host: PluginHost, result: CellResult) -> PrecisionApplied:
    """What ``set_precision`` really applied (the host first refuses a precision or mode the plugin never
    declares, asking ``framework_info``)."""
    applied = host.set_precision(run, device)
    result.applied = asdict(applied)
    return applied


def train(run: RunSpec, inputs: CellInputs, host: PluginHost, model: Any, device: DeviceInfo) -> Training:
    """Every phase of every epoch (warm-up, timed windows, latency steps): ``stage_batches`` then ``train_epoch``;
    ``reset_memory_peak`` once warm-up is over; ``predict`` between phases where an evaluation is due."""
    pipeline = inputs.pipeline
    workload = inputs.workload
    parts: list[tuple[Phase, EpochResult]] = []
    warmed = False
    plan = MeasurementPlan(pipeline.steps_per_epoch, run.warmup, run.window_steps, run.latency_steps,
                           window_seconds=run.window_seconds, settle_warmup=run.settle_warmup)
    meter = telemetry.open_meter(device.kind, device_index())
    share = telemetry.metered_share(device.kind, run.devices, run.nnodes)
    staged_peak = 0  # bytes of the largest window's batches on one device, staged after the peak reset
    load_before = noise.snapshot()
    target = TargetTracker(workload.target_accuracy, workload.eval_every, pipeline.steps_per_epoch)
    curve = CurveTracker(run.curve_every, pipeline.steps_per_epoch)
    for epoch in range(run.epochs):
        for phase in plan.phases(epoch):
            batches = pipeline.batches(epoch, phase.start, phase.stop)
            if not plan.batch_bytes and batches:
                plan.batch_bytes = staged_bytes(batches[:1], run.devices)
            if not warmed and phase.kind != "warmup":
                # Memory peaks count training only: warm-up (compilation, autotuning) is behind us.
                host.reset_memory_peak(run, model, device)
                warmed = True
            staged = host.stage_batches(run, model, batches)
            if phase.kind != "warmup":
                staged_peak = max(staged_peak, staged_bytes(batches, run.devices))
            if phase.kind == "window":
                meter.start()
            part = host.train_epoch(run, model, staged, epoch)
            if phase.kind == "window":
                meter.stop(part.samples / share)
            del staged, batches
            check_finite(part.step_losses, epoch, phase.start)
            parts.append((phase, part))
            plan.observe(phase, part)
            progress.step_done(phase.stop, pipeline.steps_per_epoch)  # between windows, never inside one
            if target.due(phase) or curve.due(phase):  # between phases, outside the training clock
                validation = once(lambda: validate(host, run, model, pipeline, run.batch_size, workload.outputs))
                if target.due(phase):
                    target.evaluate(phase, parts, validation)
                if curve.due(phase):
                    curve.record(phase, validation())
    return Training(parts, plan, meter, staged_peak, load_before, target, curve, host.implementer("train_epoch"))


def training_figures(run: RunSpec, inputs: CellInputs, training: Training,
                     rss_before: int | None) -> tuple[dict[str, Any], list[str]]:
    """The training's figures (steady state, load, evaluations, compile time, FLOPs, the plugin's extras) and the
    lines of the plugin's values that cannot be stored (left out, the cell kept)."""
    data = inputs.pipeline.dataset
    workload = inputs.workload
    parts = training.parts
    load_after = noise.snapshot()
    metrics: dict[str, Any] = steady_state(parts)
    metrics.update(noise.load_figures(training.load_before, load_after))
    metrics.update(training.target.figures())
    metrics.update(training.curve.figures())
    metrics["warmup_settled"] = training.plan.settled() if run.settle_warmup else None
    training.meter.close()
    if metrics.get("timed_steps"):
        # Warm-up beyond as many steady steps: compilation, CUDA-graph recording, autotuning and first
        # allocations, kept out of the steady-state figures and reported apart.
        steady_step_s = float(metrics["window_time_s"]) / int(metrics["timed_steps"])
        warm_steps = int(metrics.get("warmup_steps") or 0)
        metrics["compile_time_s"] = max(0.0, float(metrics.get("warmup_time_s") or 0.0) - warm_steps * steady_step_s)
    metrics["learning_rate"] = inputs.learning_rate
    metrics["learning_rate_rule"] = run.learning_rate_rule
    metrics["dataset_note"] = data.note
    metrics["dataset_substituted"] = data.substituted
    metrics["train_examples"] = int(data.train_labels.shape[0])
    metrics["rss_before_model_bytes"] = rss_before
    metrics["forward_flops_per_image"] = forward_flops_per_image(workload)
    metrics["train_flops_per_image"] = train_flops_per_image(workload)
    metrics["achieved_tflops"] = metrics["throughput"] * metrics["train_flops_per_image"] / 1e12
    dropped: list[str] = []  # a plugin's values that cannot be stored: left out, the cell kept
    metrics.update(epoch_extra_metrics(training.plugin, [part for _, part in parts], reserved=set(metrics),
                                       dropped=dropped))
    return metrics, dropped


def measure(run: RunSpec, host: PluginHost, model: Any, device: DeviceInfo, metrics: dict[str, Any],
            dropped: list[str], staged_peak: int, rss_before: int | None, result: CellResult) -> dict[str, Any]:
    """Every plugin's ``measure`` figures, merged into ``metrics`` (after training, before validation, so memory
    peaks are training's), with the device peak less the staged inputs and the resident memory's growth."""
    # Measured before validation, so memory peaks are those of training.
    measured = host.measure(run, model, device, reserved=(set(metrics) | set(VALIDATION_KEYS) | set(MEMORY_KEYS)
                                                          | set(TOKEN_KEYS)), dropped=dropped)
    for line in dropped:
        print(f"amp-suite worker: {line}", file=sys.stderr)
    metrics.update(measured)
    if not run.mode and isinstance(measured.get("mode"), str):  # a default mode an option chose (Keras's jit_compile)
        result.mode = measured["mode"]
    metrics.update(memory_without_inputs(measured, staged_peak))
    if measured.get("peak_rss_bytes") is not None and rss_before is not None:
        metrics["rss_growth_bytes"] = int(measured["peak_rss_bytes"]) - int(rss_before)
    return measured


def time_again_if_short(run: RunSpec, host: PluginHost, model: Any, inputs: CellInputs, training: Training,
                        device: DeviceInfo, metrics: dict[str, Any]) -> tuple[Any, bool]:
    """With ``--extend-timing`` and windows short of the bounds, the timing figures of further windows
    (``stage_batches``, ``train_epoch``) in ``metrics``; the meter whose summary the cell keeps, and whether
    warm-up had settled."""
    meter = training.meter
    settled = training.plan.settled()
    if run.extend_timing and short_timing(metrics, run):
        # Accuracy, losses and memory above are those of the configured training; the timing
        # comes from long windows of further training (the same step), which they never see.
        meter = telemetry.open_meter(device.kind, device_index())
        extension = extend_timing(host, run, model, inputs.pipeline, training.plan, meter,
                                  telemetry.metered_share(device.kind, run.devices, run.nnodes))
        meter.close()
        timed = steady_state(extension)
        for key in TIMING_KEYS:
            metrics[f"configured_{key}"] = metrics[key]
            metrics[key] = timed[key]
        metrics["timing_source"] = (f"timing extension: {timed['timed_windows']} windows of "
                                    f"{timed['timed_steps']} steps trained after the configured training "
                                    "and its validation")
        metrics["achieved_tflops"] = metrics["throughput"] * metrics["train_flops_per_image"] / 1e12
        settled = True  # long after warm-up
    else:
        metrics["timing_source"] = "the configured training's windows"
    return meter, settled


def final_figures(run: RunSpec, inputs: CellInputs, metrics: dict[str, Any], meter: Any, settled: bool,
                  dropped: list[str], device_kind: str) -> None:
    """A token workload's figures, the meter's energy and telemetry (with what it covered where that is one
    device of several), and every flag on the cell's timing."""
    data = inputs.pipeline.dataset
    metrics.update(token_figures(inputs.workload, metrics, data.baseline_bits_per_char, int(data.val_labels.size)))
    metrics.update(energy_figures(meter.summary(), metrics))
    scope = telemetry.energy_scope(device_kind, telemetry.metered_share(device_kind, run.devices, run.nnodes))
    if scope and "energy_j" in metrics:
        metrics["energy_scope"] = scope
    metrics["measurement_flags"] = timing_flags(
        metrics, min_timed_steps=run.min_timed_steps, min_timed_seconds=run.min_timed_seconds,
        settle_asked=run.settle_warmup, settled=settled, steps_per_epoch=inputs.pipeline.steps_per_epoch,
        epochs=run.epochs, latency_steps=run.latency_steps) + meter.flags() + noise.noise_flags(metrics) + dropped


def record_machine(run: RunSpec, device: DeviceInfo, measured: dict[str, Any], result: CellResult) -> None:
    """What ran the cell: process, host, CPU, the versions ``measure`` gave, the variables that change numerics;
    on a GPU the CUDA libraries loaded and the GPU's state; under torchrun this process's rank."""
    result.environment = {
        "pid": os.getpid(), "hostname": platform.node(), "python": platform.python_version(), **cpu_info(),
        **{k: v for k, v in measured.items() if k.endswith("_version")},
        # Variables that change numerics or speed (TF32 overrides, XLA flags, allocator, NCCL), as set.
        "numerics_environment": numerics_environment(),
    }
    if device.kind == "gpu":
        # The CUDA libraries this process loaded (not those the framework was built with), and the
        # GPU's state: persistence, MIG, ECC, compute mode, application clocks, power limit.
        result.environment["loaded_libraries"] = loaded_cuda_libraries()
        result.environment["gpu_state"] = telemetry.nvml_machine_info(device_index())
    if run.distributed:
        from amp_suite.launchers import this_process

        result.environment["process"] = asdict(this_process(run))


def record_runtime(run: RunSpec, host: PluginHost, result: CellResult) -> None:
    """The CUDA runtime and cuDNN the framework loaded (``runtime_versions``), once the cell succeeded."""
    result.environment.update(host.runtime_versions(run))
