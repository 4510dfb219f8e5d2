"""Turns per-step times into steady-state figures.

Throughput is total samples over total time of the timed steps; averaging
per-step rates would overweight fast steps.  Warm-up steps are reported as
their own figures, never mixed into the steady state.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from amp_suite.records import EpochResult


def steady_state(epochs: list[EpochResult], *, warmup: int, batch_size: int) -> dict[str, Any]:
    """Summarize a run's epochs; the first ``warmup`` steps of epoch 0 are warm-up."""
    times: list[float] = []
    samples = 0
    warm_times: list[float] = []
    for index, epoch in enumerate(epochs):
        step_times = list(epoch.step_times_s)
        if index == 0:
            warm_times, step_times = step_times[:warmup], step_times[warmup:]
        times.extend(step_times)
        samples += len(step_times) * batch_size
    if not times:
        raise ValueError("no timed steps: warm-up took every step")
    arr = np.asarray(times, dtype=np.float64)
    total = float(arr.sum())
    first_losses = epochs[0].step_losses if epochs else []
    last = epochs[-1]
    return {
        "throughput": samples / total if total > 0 else math.inf,
        "timed_steps": int(arr.size),
        "timed_samples": samples,
        "step_time_median_s": float(np.median(arr)),
        "step_time_p90_s": float(np.percentile(arr, 90)),
        "step_time_std_s": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "step_time_cv": float(arr.std(ddof=1) / arr.mean()) if arr.size > 1 and arr.mean() > 0 else 0.0,
        "first_step_time_s": float(warm_times[0]) if warm_times else float(epochs[0].step_times_s[0]),
        "warmup_time_s": float(sum(warm_times)),
        "warmup_steps": len(warm_times),
        "epoch_times_s": [float(e.epoch_time_s) for e in epochs],
        "step_times_s": [[float(t) for t in e.step_times_s] for e in epochs],
        "first_step_loss": float(first_losses[0]) if first_losses else math.nan,
        "final_loss": float(last.step_losses[-1]) if last.step_losses else math.nan,
        "final_epoch_mean_loss": last.mean_loss,
        "loss_scale_final": last.loss_scale_final,
        "skipped_steps": int(sum(e.skipped_steps for e in epochs)),
    }
