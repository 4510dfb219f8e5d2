"""What every framework's doctor probe shares (no framework imported here).

A framework plugin names its probe in ``FrameworkInfo.doctor_probe``; the
doctor runs it as ``python -m MODULE DEVICE`` (``cpu`` or ``auto``): one
framework in one fresh process, imported after the doctor set the plugin's
environment variables.  It measures with the framework's own APIs, the way
the plugin's recipe does, fills its sections with :func:`section` and ends
with :func:`emit` (:func:`run_sections` does both): one JSON object on its
last line, one entry per section;
a section that raised holds ``{"error": ...}``.  The doctor's verdicts
(:mod:`amp_suite.doctor.checks`) read these sections:

- ``device``: ``kind`` (``gpu``/``cpu``), ``cuda_build``, ``name``,
  ``compute_capability``, ``driver``, ``cuda_runtime``, ``cudnn``;
- ``device`` may add, to explain a GPU it cannot use: ``cuda_build_version``
  (the CUDA the build targets), ``gpu_error`` (what the framework said when
  its GPU backend failed), ``log_notes`` (its log lines), and on a GPU
  ``cudnn_libraries`` (the ``libcudnn`` files mapped into the process after a
  convolution ran) and ``cudnn_compiled`` (the cuDNN it was built against);
- ``precision``: ``matmul_fp32``, ``conv_fp32`` and, on a GPU,
  ``matmul_tf32``, ``conv_tf32`` (see :data:`checks.PROBE_K` and
  :data:`checks.CONV_PROBE_IN`);
- ``amp_fp16``, ``amp_bf16``: dtype names seen inside one train step —
  ``conv``, ``matmul``, ``logits``, and lists ``params``, ``grads``;
- ``loss_scale``: ``initial``, ``after_overflow``,
  ``overflow_params_unchanged``, ``growth_initial``, ``growth_interval``,
  ``finite_steps``, ``after_finite_steps``, ``finite_params_changed``;
- ``timing``: ``steps``, ``per_step_sum_s``, ``wall_s`` and ``ratio`` of the
  trial with the median sum/wall ratio, ``trials``, ``method``, ``load_per_core``,
  and the MLP's ``batch``, ``width``, ``hidden_layers`` and one ``step_s``;
- ``memory``: ``api``, ``peak_bytes``, ``allocated_bytes`` (GPU only);
- ``preallocation`` (JAX): ``preallocate_env``, ``bytes_reserved``, ``bytes_limit``;
- ``fp8`` (PyTorch, on a GPU only): ``compute_capability``, ``native`` (8.9 or
  newer), and where native ``scaled_mm_calls`` (``torch._scaled_mm`` calls in
  one fp8 forward and backward) and ``relative_difference`` (from the
  emulated recipe);
- ``nvml`` (added to every probe by :func:`run_sections`): ``package`` (nvidia-ml-py's version or
  null), ``opened``, ``reason`` (why not), ``energy_counter``, ``power_w``, ``power_reading``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from amp_suite.doctor.checks import CONV_PROBE_HW, CONV_PROBE_IN, CONV_PROBE_OUT, MEMORY_PROBE_BYTES, PROBE_K

# The loss-scale probe: an initial scale that overflows float16 gradients, and
# a small one that must double after GROWTH_INTERVAL finite steps.
OVERFLOW_SCALE = 2.0 ** 100
GROWTH_SCALE = 2.0 ** 10
GROWTH_INTERVAL = 2
# The timing probe: trials of STEPS steps (timed, then untimed), the median trial
# kept; at least MIN_TRIALS, more (up to MAX_TRIALS) while a busy machine keeps
# the two further apart than AGREEMENT.
TIMING_STEPS = 10
# The timed step: an MLP whose step is long enough that one wait per step costs
# little beside the step itself.  On a CPU one hidden layer of 1024 over a batch
# of 512 (about 1.6 GFLOP a step) is plenty.  A GPU runs that in ~0.1 ms, where
# launch gaps and the host clock dominate, so there the MLP has two hidden
# layers of 4096 and the batch doubles until one step takes MIN_GPU_STEP_S
# (a float32 step of batch 2048 is ~0.4 TFLOP: ~10 ms on an H100).
TIMING_BATCH, TIMING_WIDTH, TIMING_HIDDEN = 512, 1024, 1
GPU_TIMING_BATCHES, GPU_TIMING_WIDTH, GPU_TIMING_HIDDEN = (2048, 4096, 8192, 16384), 4096, 2
MIN_GPU_STEP_S = 0.010
MIN_TRIALS, MAX_TRIALS = 3, 15
AGREEMENT = 0.02

__all__ = ["CONV_PROBE_HW", "CONV_PROBE_IN", "CONV_PROBE_OUT", "GROWTH_INTERVAL", "GROWTH_SCALE",
           "MEMORY_PROBE_BYTES", "OVERFLOW_SCALE", "PROBE_K", "TIMING_BATCH", "TIMING_STEPS", "TIMING_WIDTH",
           "emit", "loaded_libraries", "loss_scale_section", "run_sections", "section", "time_sized", "time_steps", "timing_shape"]

# (step, wait, timed_step or None) of an MLP step at one batch size.
StepKit = tuple[Callable[[], None], Callable[[], None], "Callable[[], float] | None"]


def section(report: dict[str, Any], name: str, measure: Callable[[], dict[str, Any]]) -> None:
    """``report[name] = measure()``, or the error it raised as one line."""
    try:
        report[name] = measure()
    except Exception as exc:  # one broken section must not hide the others
        first = (str(exc).strip().splitlines() or [""])[0]
        report[name] = {"error": f"{type(exc).__name__}: {first}"[:500]}


def time_steps(step: Callable[[], None], wait: Callable[[], None], *,
               timed_step: Callable[[], float] | None = None, method: str) -> dict[str, Any]:
    """Per-step times summed against the wall time of the same steps with one final wait.

    ``step`` dispatches one step; ``wait`` blocks until the device finished
    everything dispatched.  Each step is timed as the suite times it:
    ``timed_step()`` when given (e.g. CUDA events), else the host clock around
    ``step(); wait()``.  A trial is one timed run and one wall-clock run back
    to back, so both see the same machine load; the verdict uses the trial
    with the median ratio, with more trials (up to :data:`MAX_TRIALS`) while
    it is unclear.  ``load_per_core`` (1-minute load average over cores) lets the
    verdict tell a busy CPU from a timing fault.
    """
    def one_timed() -> float:
        if timed_step is not None:
            return timed_step()
        start = time.perf_counter()
        step()
        wait()
        return time.perf_counter() - start

    for _ in range(3):  # warm-up: compilation, autotuning, allocator growth
        step()
    wait()
    sums: list[float] = []
    walls: list[float] = []
    while len(sums) < MAX_TRIALS:
        sums.append(sum(one_timed() for _ in range(TIMING_STEPS)))
        wait()
        start = time.perf_counter()
        for _ in range(TIMING_STEPS):
            step()
        wait()
        walls.append(time.perf_counter() - start)
        middle = _median_trial(sums, walls)
        ratio = sums[middle] / walls[middle]
        if len(sums) >= MIN_TRIALS and abs(ratio - 1.0) <= AGREEMENT:
            break
    return {"steps": TIMING_STEPS, "per_step_sum_s": sums[middle], "wall_s": walls[middle], "ratio": ratio,
            "trials": len(sums), "method": method, "load_per_core": _load_per_core()}


def loss_scale_section(scaled_steps: Callable[[float, int], tuple[float, bool]]) -> dict[str, Any]:
    """The ``loss_scale`` section from ``scaled_steps(initial_scale, steps)``.

    ``scaled_steps`` runs ``steps`` float16 training steps under the
    framework's dynamic loss scale starting at ``initial_scale`` and returns the
    scale after them and whether the parameters changed: one step from
    :data:`OVERFLOW_SCALE` (the gradients overflow, so the step is skipped and
    the scale halves), then :data:`GROWTH_INTERVAL` steps from
    :data:`GROWTH_SCALE` (finite, so they apply and the scale doubles).
    """
    after_overflow, overflow_changed = scaled_steps(OVERFLOW_SCALE, 1)
    grown, finite_changed = scaled_steps(GROWTH_SCALE, GROWTH_INTERVAL)
    return {"initial": OVERFLOW_SCALE, "after_overflow": after_overflow,
            "overflow_params_unchanged": not overflow_changed, "growth_initial": GROWTH_SCALE,
            "growth_interval": GROWTH_INTERVAL, "finite_steps": GROWTH_INTERVAL,
            "after_finite_steps": grown, "finite_params_changed": finite_changed}


def timing_shape(on_gpu: bool) -> tuple[tuple[int, ...], int, int]:
    """(batches to try, width, hidden layers) of the timing MLP on this device kind."""
    if on_gpu:
        return GPU_TIMING_BATCHES, GPU_TIMING_WIDTH, GPU_TIMING_HIDDEN
    return (TIMING_BATCH,), TIMING_WIDTH, TIMING_HIDDEN


def time_sized(build: Callable[[int], StepKit], batches: tuple[int, ...], *, method: str,
               min_step_s: float = MIN_GPU_STEP_S) -> dict[str, Any]:
    """:func:`time_steps` on the first batch size whose step takes ``min_step_s`` (else the largest).

    ``build(batch)`` returns ``(step, wait, timed_step)``.  One size alone
    (the CPU) is timed as it is.
    """
    for index, batch in enumerate(batches):
        step, wait, timed = build(batch)
        if index < len(batches) - 1:
            for _ in range(2):  # compile and warm up, then time one waited step
                step()
            wait()
            start = time.perf_counter()
            step()
            wait()
            if time.perf_counter() - start < min_step_s:
                continue
        found = time_steps(step, wait, timed_step=timed, method=method)
        found.update(batch=batch, step_s=found["wall_s"] / found["steps"])
        return found
    raise AssertionError("no batch size")


def loaded_libraries(fragment: str, maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the shared libraries mapped into this process whose file name holds ``fragment``."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    found: dict[str, None] = {}
    for line in text.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if path.startswith("/") and fragment in os.path.basename(path):
            found.setdefault(os.path.realpath(path), None)
    return sorted(found)


def _median_trial(sums: list[float], walls: list[float]) -> int:
    """The trial whose sum/wall ratio is the (lower) median."""
    order = sorted(range(len(sums)), key=lambda i: sums[i] / walls[i])
    return order[(len(order) - 1) // 2]


def _load_per_core() -> float | None:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return None


def emit(report: dict[str, Any]) -> None:
    """Print the report as the last line of stdout, for the doctor to read."""
    sys.stdout.write("\n" + json.dumps(report, default=str) + "\n")
    sys.stdout.flush()


def run_sections(sections: Sequence[tuple[str, Callable[[], dict[str, Any]]]]) -> None:
    """Fill one report with each ``(name, measure)`` in order (:func:`section`), then :func:`emit` it.

    What a probe's ``main`` does once it has chosen its device: a section that
    raises holds its error and the next one still runs.
    """
    report: dict[str, Any] = {}
    for name, measure in sections:
        section(report, name, measure)
    section(report, "nvml", nvml_reading)
    emit(report)


def nvml_reading() -> dict[str, Any]:
    """Whether this environment reads GPU telemetry: nvidia-ml-py importable, NVML opened on device 0 (as
    CUDA numbers it), the energy counter and the instantaneous power field answering.  Every probe runs it
    in the environment its framework's cells run in, so a GPU environment without nvidia-ml-py shows."""
    import importlib.metadata

    from amp_suite.machine.nvml_meter import NvmlMeter
    from amp_suite.machine.window_meter import TelemetryUnavailable

    try:
        version = importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        version = None
    found: dict[str, Any] = {"package": version, "python": sys.executable}
    try:
        meter = NvmlMeter(0, sample_interval_s=1.0)
    except TelemetryUnavailable as exc:
        found["opened"] = False
        found["reason"] = str(exc)
        return found
    try:
        found["opened"] = True
        found["energy_counter"] = meter.source == "NVML"
        found["power_w"] = meter.read_power_w()
        found["power_reading"] = meter.power_reading
    finally:
        meter.close()
    return found
