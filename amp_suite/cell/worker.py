"""Runs one cell: in a fresh worker process (``python -m amp_suite.cell.worker``) or inline.

The worker builds its own plugin host, so a framework is imported only here,
after the framework's environment variables are set.  Whatever happens, the
worker returns a :class:`~amp_suite.records.CellResult` with a status.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from amp_suite import progress
from amp_suite.cell.curve import CurveTracker
from amp_suite.cell.kind_check import undeclared_kinds
from amp_suite.cell.windows import MeasurementPlan, Phase, steady_state, timing_flags
from amp_suite.datasets import InputPipeline, run_pipeline
from amp_suite.errors import DivergedError, FrameworkUnavailableError, PluginError, UnsupportedError, one_line
from amp_suite.host_watch import die_with_host_from_env
from amp_suite.machine import devices, noise, telemetry
from amp_suite.machine.environment import cpu_info
from amp_suite.machine.loaded_libraries import loaded_cuda_libraries, numerics_environment
from amp_suite.modes import scaled_learning_rate
from amp_suite.plugins import host_memory
from amp_suite.plugins.host import PluginHost, figure_problem
from amp_suite.records import (
    CellResult,
    EpochResult,
    RunSpec,
    Workload,
    cell_for_run,
    run_from_dict,
    to_plain,
    workload_from_dict,
)
from amp_suite.workloads.fp8_layers import require_fp8_layers
from amp_suite.workloads.workload import forward_flops_per_image, init_variables, train_flops_per_image

# Exception names (any module) that mean the device or host ran out of memory.
OOM_EXCEPTION_NAMES = ("OutOfMemoryError", "ResourceExhaustedError", "MemoryError")
# Messages of out-of-memory errors that come as a generic type: PyTorch's CPU
# allocator ("DefaultCPUAllocator: can't allocate memory"), XLA's
# RESOURCE_EXHAUSTED, TensorFlow's "OOM when allocating", C++'s std::bad_alloc,
# and an address-space limit (ENOMEM: "Cannot allocate memory").
OOM_MESSAGES = (
    "RESOURCE_EXHAUSTED", "out of memory", "Out of memory", "OOM when allocating",
    "can't allocate memory", "Cannot allocate memory", "Unable to allocate", "std::bad_alloc",
    "failed to allocate memory",
)
# Characters of a failure's traceback kept in its result (the innermost frames); the log holds all of it.
TRACEBACK_CHARS = 4000


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, innermost last."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _is_oom(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names.intersection(OOM_EXCEPTION_NAMES):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    text = str(exc)[:4000]
    return any(message in text for message in OOM_MESSAGES)


def classify_exception(exc: BaseException) -> str:
    """The cell status an exception stands for (its causes count too: a plugin's OOM stays oom)."""
    chain = _chain(exc)
    for kind, status in ((UnsupportedError, "unsupported"), (FrameworkUnavailableError, "unavailable"),
                         (DivergedError, "diverged")):
        if isinstance(exc, kind):
            return status
    if any(_is_oom(link) for link in chain):
        return "oom"
    return "failed"


def _check_finite(losses: list[float], epoch: int, first_step: int = 0) -> None:
    for step, loss in enumerate(losses, start=first_step):
        if not math.isfinite(loss):
            raise DivergedError(f"loss became {loss} at epoch {epoch} step {step}")


def epoch_extra_metrics(framework: str, epochs: list[EpochResult], reserved: set[str],
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
                raise PluginError(f"framework {framework!r}: EpochResult.extra key {key!r} is a figure the host "
                                  "computes itself; give the figure another name")
            problem = figure_problem(key, value)
            if problem:
                line = f"framework {framework!r}: EpochResult.extra key {key!r} {problem}; the value is left out"
                if dropped is None:
                    raise PluginError(line)
                if line not in dropped:
                    dropped.append(line)
                promoted.pop(key, None)
                continue
            promoted[key] = value.item() if isinstance(value, np.generic) else value
    return promoted


def validate(host: PluginHost, run: RunSpec, model: Any, pipeline: InputPipeline,
             batch_size: int) -> dict[str, float]:
    """Validation accuracy and loss, from eval-mode logits computed in the run's precision.

    A classifier's labels are ``(n,)`` and its logits ``(n, classes)``; a
    language model's labels are ``(n, context)`` next tokens and its logits
    ``(n, context, vocab)``: accuracy and loss are then over every token.  The
    inputs go to the model as the pipeline gives them (token ids stay int32).
    """
    labels = pipeline.dataset.val_labels
    correct = 0
    loss_sum = 0.0
    for start in range(0, int(labels.shape[0]), batch_size):
        images = pipeline.eval_images(pipeline.dataset.val_images[start:start + batch_size])  # one batch resized
        logits = np.asarray(host.predict(run, model, images, training=False), dtype=np.float64)
        y = labels[start:start + batch_size]
        if logits.shape[:-1] != y.shape:
            raise PluginError(f"framework {run.framework!r}: predict gave logits of shape {logits.shape} for "
                              f"labels of shape {y.shape}; expected {(*y.shape, 'classes')}")
        correct += int((logits.argmax(axis=-1) == y).sum())
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        loss_sum += float(-np.take_along_axis(log_probs, y[..., None].astype(np.intp), axis=-1).sum())
    count = int(labels.shape[0])
    predictions = int(labels.size)  # examples, or every token of every example
    return {"val_accuracy": correct / predictions, "val_loss": loss_sum / predictions, "val_examples": count}


VALIDATION_KEYS = ("val_accuracy", "val_loss", "val_examples")
# Figures of a token workload (a language model), beside its samples/s and validation loss.
TOKEN_KEYS = ("tokens_per_s", "val_bits_per_char", "val_tokens", "unigram_bits_per_char", "context")


def token_figures(workload: Workload, metrics: dict[str, Any], baseline_bits_per_char: float | None,
                  val_tokens: int) -> dict[str, Any]:
    """A token workload's figures: tokens/s (samples/s x context), validation bits per character, the baseline.

    ``val_bits_per_char`` is the validation loss (nats per token) over ln 2;
    ``unigram_bits_per_char`` is the dataset's unigram baseline (``None`` on
    synthetic tokens).  Empty for an image workload.
    """
    if not workload.tokens:
        return {}
    assert workload.transformer is not None
    context = workload.transformer.context
    throughput, loss = metrics.get("throughput"), metrics.get("val_loss")
    return {"context": context,
            "tokens_per_s": float(throughput) * context if throughput is not None else None,
            "val_bits_per_char": float(loss) / math.log(2) if loss is not None else None,
            "val_tokens": val_tokens,
            "unigram_bits_per_char": baseline_bits_per_char}


class TargetTracker:
    """Time to target accuracy: evaluates between phases and remembers when the target was first reached.

    An evaluation point is each epoch's end (``eval_every`` 0) or the end of
    the first phase that reaches each multiple of ``eval_every`` steps.  The
    validation runs outside the training clock (its time is kept apart, in
    ``eval_time_s``); training time counts every phase trained so far (warm-up,
    windows and latency steps).  Evaluation stops once the target is reached.
    """

    def __init__(self, target: float | None, every: int, steps_per_epoch: int):
        self.target, self.every, self.steps_per_epoch = target, int(every or 0), steps_per_epoch
        self.reached: dict[str, Any] | None = None
        self.best = -1.0
        self.eval_time_s = 0.0
        self.curve: list[list[float]] = []  # [steps, training seconds, accuracy] per evaluation point
        self._last_point = 0

    def due(self, phase: Phase) -> bool:
        if self.target is None or self.reached is not None:
            return False
        done = phase.epoch * self.steps_per_epoch + phase.stop
        if self.every <= 0:
            return phase.stop >= self.steps_per_epoch
        return done // self.every > self._last_point

    def evaluate(self, phase: Phase, parts: list[tuple[Phase, EpochResult]], validate_now: Any) -> None:
        done = phase.epoch * self.steps_per_epoch + phase.stop
        if self.every > 0:
            self._last_point = done // self.every
        began = time.perf_counter()
        accuracy = float(validate_now()["val_accuracy"])
        self.eval_time_s += time.perf_counter() - began
        trained_s = float(sum(r.window_time_s for _, r in parts))
        self.curve.append([done, trained_s, accuracy])
        self.best = max(self.best, accuracy)
        if accuracy >= float(self.target):  # type: ignore[arg-type]
            self.reached = {"time_to_target_s": trained_s, "steps_to_target": done,
                            "epochs_to_target": done / self.steps_per_epoch, "accuracy_at_target": accuracy}

    def figures(self) -> dict[str, Any]:
        if self.target is None:
            return {}
        out: dict[str, Any] = {"target_accuracy": float(self.target), "target_reached": self.reached is not None,
                               "best_val_accuracy": self.best if self.curve else None,
                               "eval_time_s": self.eval_time_s, "eval_every_steps": self.every or self.steps_per_epoch,
                               "target_curve": self.curve}
        out.update(self.reached or {"time_to_target_s": None, "steps_to_target": None, "epochs_to_target": None})
        return out


def _once(compute: Any) -> Any:
    """``compute`` called at most once: later calls return its first answer (one validation per point)."""
    answers: list[Any] = []

    def call() -> Any:
        if not answers:
            answers.append(compute())
        return answers[0]

    return call


def execute(run: RunSpec, workload: Workload, host: PluginHost | None = None, *,
            log: TextIO | None = None) -> CellResult:
    """Run one cell in this process and return its result (never raises).

    A cell that raises keeps its traceback, innermost frames last, in
    ``metrics["traceback"]`` (the last :data:`TRACEBACK_CHARS` characters);
    with ``log``, the whole traceback is also written there (the worker
    passes its stderr, which the runner sends to the cell's log).
    """
    started = time.perf_counter()
    result = cell_for_run(run, "failed",
                          started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    try:
        if host is None:
            host = PluginHost(extra_modules=run.plugin_modules, framework=run.framework)
        _execute(run, workload, host, result)
        result.environment.update(host.runtime_versions(run))
        result.status = "ok"
    except BaseException as exc:  # every outcome becomes a row
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.status = classify_exception(exc)
        result.error = one_line(exc)
        trace = "".join(traceback.format_exception(exc))
        result.metrics["traceback"] = trace[-TRACEBACK_CHARS:]
        if log is not None:
            write_failure(log, result, trace)
    # Which interpreter ran the cell: the host's, or its environment's (amp_suite.envs).
    result.environment.update({"interpreter": sys.executable, "prefix": sys.prefix,
                               "environment": run.environment})
    result.wall_time_s = time.perf_counter() - started
    return result


def write_failure(log: TextIO, result: CellResult, trace: str) -> None:
    """The cell's status, its one-line error and its whole traceback, appended to ``log`` (never raises)."""
    try:
        sys.stdout.flush()  # what the plugin printed comes before its traceback
    except (OSError, ValueError):
        pass
    try:
        log.write(f"amp-suite worker: cell {result.key} {result.status}: {result.error}\n{trace}")
        log.flush()
    except (OSError, ValueError):
        pass


def _execute(run: RunSpec, workload: Workload, host: PluginHost, result: CellResult) -> None:
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

    weights, state = init_variables(workload, run.seed)
    pipeline = run_pipeline(run, workload)
    data = pipeline.dataset
    # The cosine schedule decays over the optimizer steps this run really takes; the learning rate
    # follows the batch size by the run's rule (the workload's own batch size is the reference).
    learning_rate = scaled_learning_rate(run.learning_rate_rule, workload.optimizer.learning_rate,
                                         run.batch_size, workload.batch_size)
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(
        workload.optimizer, decay_steps=pipeline.steps_per_epoch * run.epochs, learning_rate=learning_rate))

    result.mode = run.mode or info.default_mode
    device = devices.select_checked(run, info, host.select_device)  # no silent CPU fallback
    result.device = asdict(device)
    applied = host.set_precision(run, device)
    result.applied = asdict(applied)
    host_memory.reset_peak_rss()
    rss_before = host_memory.current_rss_bytes()
    model = host.build_model(run, workload, weights, state, applied, device)

    parts: list[tuple[Phase, EpochResult]] = []
    warmed = False
    plan = MeasurementPlan(pipeline.steps_per_epoch, run.warmup, run.window_steps, run.latency_steps,
                           window_seconds=run.window_seconds, settle_warmup=run.settle_warmup)
    meter = telemetry.open_meter(device.kind, device_index())
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
                meter.stop(part.samples)
            del staged, batches
            _check_finite(part.step_losses, epoch, phase.start)
            parts.append((phase, part))
            plan.observe(phase, part)
            progress.step_done(phase.stop, pipeline.steps_per_epoch)  # between windows, never inside one
            if target.due(phase) or curve.due(phase):  # between phases, outside the training clock
                validation = _once(lambda: validate(host, run, model, pipeline, run.batch_size))
                if target.due(phase):
                    target.evaluate(phase, parts, validation)
                if curve.due(phase):
                    curve.record(phase, validation())

    load_after = noise.snapshot()
    metrics: dict[str, Any] = steady_state(parts)
    metrics.update(noise.load_figures(load_before, load_after))
    metrics.update(target.figures())
    metrics.update(curve.figures())
    metrics["warmup_settled"] = plan.settled() if run.settle_warmup else None
    meter.close()
    if metrics.get("timed_steps"):
        # Warm-up beyond as many steady steps: compilation, CUDA-graph recording, autotuning and first
        # allocations, kept out of the steady-state figures and reported apart.
        steady_step_s = float(metrics["window_time_s"]) / int(metrics["timed_steps"])
        warm_steps = int(metrics.get("warmup_steps") or 0)
        metrics["compile_time_s"] = max(0.0, float(metrics.get("warmup_time_s") or 0.0) - warm_steps * steady_step_s)
    metrics["learning_rate"] = learning_rate
    metrics["learning_rate_rule"] = run.learning_rate_rule
    metrics["dataset_note"] = data.note
    metrics["dataset_substituted"] = data.substituted
    metrics["train_examples"] = int(data.train_labels.shape[0])
    metrics["rss_before_model_bytes"] = rss_before
    metrics["forward_flops_per_image"] = forward_flops_per_image(workload)
    metrics["train_flops_per_image"] = train_flops_per_image(workload)
    metrics["achieved_tflops"] = metrics["throughput"] * metrics["train_flops_per_image"] / 1e12
    dropped: list[str] = []  # a plugin's values that cannot be stored: left out, the cell kept
    metrics.update(epoch_extra_metrics(run.framework, [part for _, part in parts], reserved=set(metrics),
                                       dropped=dropped))
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
    metrics.update(validate(host, run, model, pipeline, run.batch_size))
    settled = plan.settled()
    if run.extend_timing and short_timing(metrics, run):
        # Accuracy, losses and memory above are those of the configured training; the timing
        # comes from long windows of further training (the same step), which they never see.
        meter = telemetry.open_meter(device.kind, device_index())
        extension = extend_timing(host, run, model, pipeline, plan, meter)
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
    metrics.update(token_figures(workload, metrics, data.baseline_bits_per_char, int(data.val_labels.size)))
    metrics.update(energy_figures(meter.summary(), metrics))
    metrics["measurement_flags"] = timing_flags(
        metrics, min_timed_steps=run.min_timed_steps, min_timed_seconds=run.min_timed_seconds,
        settle_asked=run.settle_warmup, settled=settled, steps_per_epoch=pipeline.steps_per_epoch,
        epochs=run.epochs, latency_steps=run.latency_steps) + meter.flags() + noise.noise_flags(metrics) + dropped
    result.metrics = metrics
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


# Figures a timing extension replaces (the configured training's are kept as configured_KEY).
TIMING_KEYS = ("throughput", "timed_steps", "timed_samples", "timed_windows", "window_time_s",
               "window_throughputs", "window_throughput_median", "window_throughput_min",
               "window_throughput_max", "window_throughput_cv")
# A timing extension stops after this many seconds even if the bounds are not met (then flagged).
EXTENSION_MAX_S = 120.0
# NVML's energy counter advances in steps (about every 0.1 s seen on an H100): over windows
# shorter than this on average, per-window differences are mostly quantization.
ENERGY_MIN_MEAN_WINDOW_S = 0.5
ENERGY_KEYS = ("energy_j", "energy_per_image_j", "mean_power_w")


def short_timing(metrics: dict[str, Any], run: RunSpec) -> bool:
    """Whether the timed windows fall short of the run's trust bounds."""
    return (int(metrics.get("timed_steps") or 0) < run.min_timed_steps
            or float(metrics.get("window_time_s") or 0.0) < run.min_timed_seconds)


def extend_timing(host: PluginHost, run: RunSpec, model: Any, pipeline: InputPipeline, plan: MeasurementPlan,
                  meter: Any) -> list[tuple[Phase, EpochResult]]:
    """Train on in timed windows until the trust bounds are met (or :data:`EXTENSION_MAX_S` passed).

    Batches continue in the host's order after the configured epochs; a
    window may span an epoch boundary (plugins train on the batches they are
    given, whatever their epoch), so on a small split the windows still last
    ``window_seconds``.
    """
    windows: list[tuple[Phase, EpochResult]] = []
    epoch, step = run.epochs, 0
    timed_steps, timed_s = 0, 0.0
    began = time.perf_counter()
    while ((timed_steps < run.min_timed_steps or timed_s < run.min_timed_seconds)
           and time.perf_counter() - began < EXTENSION_MAX_S):
        size = max(plan.window_size(), 1)
        first = (epoch, step)
        batches: list[Any] = []
        while len(batches) < size:
            take = min(size - len(batches), pipeline.steps_per_epoch - step)
            batches += pipeline.batches(epoch, step, step + take)
            step += take
            if step >= pipeline.steps_per_epoch:
                epoch, step = epoch + 1, 0
        staged = host.stage_batches(run, model, batches)
        meter.start()
        part = host.train_epoch(run, model, staged, first[0])
        meter.stop(part.samples)
        del staged, batches
        _check_finite(part.step_losses, first[0], first[1])
        phase = Phase("window", first[0], first[1], first[1] + part.steps)
        plan.observe(phase, part)
        windows.append((phase, part))
        timed_steps += part.steps
        timed_s += part.window_time_s
    return windows


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


def _result_line(result: CellResult) -> bytes:
    return (json.dumps(to_plain(asdict(result))) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    """The worker process.

    ``--result-fd N`` (how the runner starts it): the request is read from
    stdin and the result written to file descriptor ``N``.  ``REQUEST.json
    RESULT.json``: the same with files, for running one cell by hand.  A
    failure's whole traceback goes to stderr, which the runner makes the
    cell's log.
    """
    args = sys.argv[1:] if argv is None else argv
    die_with_host_from_env()
    result_fd = result_file = None
    if args[:1] == ["--result-fd"]:
        result_fd = int(args[1])
        os.set_inheritable(result_fd, False)  # processes the framework starts must not hold it open
        request = json.loads(sys.stdin.buffer.read())
    elif args[:1] == ["--result-file"]:  # a torchrun worker: the request is beside the result file
        result_file = args[1]
        from amp_suite.safe_files import read_regular

        request = json.loads(read_regular(result_file + ".request"))
    else:
        request = json.loads(Path(args[0]).read_text())
        result_file = args[1]
    run = run_from_dict(request["run"])
    workload = workload_from_dict(request["workload"])
    result = execute(run, workload, log=sys.stderr)  # stderr is the cell's log
    from amp_suite.launchers import this_process

    if not this_process(run).writes_result:
        # A failing rank must fail: torchrun then ends the others instead of leaving them waiting.
        return 0 if result.status == "ok" else 1
    if result_fd is not None:
        with os.fdopen(result_fd, "wb") as out:
            out.write(_result_line(result))
        return 0
    from amp_suite.safe_files import write_file_atomically

    assert result_file is not None  # no --result-fd: a result file was named
    write_file_atomically(Path(result_file), _result_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
