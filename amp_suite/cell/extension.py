"""The timing extension (``--extend-timing``): more timed windows when the configured training's fell short.

Accuracy, losses and memory stay those of the configured training; only the
timing comes from the further windows, trained after validation with the
same step and the batches that follow in the host's order.
"""

from __future__ import annotations

import time
from typing import Any

from amp_suite.cell.figures import check_finite
from amp_suite.cell.windows import MeasurementPlan, Phase
from amp_suite.datasets import InputPipeline
from amp_suite.plugins.host import PluginHost
from amp_suite.records import EpochResult, RunSpec

# Figures a timing extension replaces (the configured training's are kept as configured_KEY).
TIMING_KEYS = ("throughput", "timed_steps", "timed_samples", "timed_windows", "window_time_s",
               "window_throughputs", "window_throughput_median", "window_throughput_min",
               "window_throughput_max", "window_throughput_cv")
# A timing extension stops after this many seconds even if the bounds are not met (then flagged).
EXTENSION_MAX_S = 120.0


def short_timing(metrics: dict[str, Any], run: RunSpec) -> bool:
    """Whether the timed windows fall short of the run's trust bounds."""
    return (int(metrics.get("timed_steps") or 0) < run.min_timed_steps
            or float(metrics.get("window_time_s") or 0.0) < run.min_timed_seconds)


def extend_timing(host: PluginHost, run: RunSpec, model: Any, pipeline: InputPipeline, plan: MeasurementPlan,
                  meter: Any, share: int = 1) -> list[tuple[Phase, EpochResult]]:
    """Train on in timed windows until the trust bounds are met (or :data:`EXTENSION_MAX_S` passed).

    Batches continue in the host's order after the configured epochs; a
    window may span an epoch boundary (plugins train on the batches they are
    given, whatever their epoch), so on a small split the windows still last
    ``window_seconds``.  ``share``: :func:`~amp_suite.machine.telemetry.metered_share`.
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
        meter.stop(part.samples / share)
        del staged, batches
        check_finite(part.step_losses, first[0], first[1])
        phase = Phase("window", first[0], first[1], first[1] + part.steps)
        plan.observe(phase, part)
        windows.append((phase, part))
        timed_steps += part.steps
        timed_s += part.window_time_s
    return windows
