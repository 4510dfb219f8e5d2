"""Plans an epoch's measurement phases and turns what they measured into figures.

An epoch's steps run in phases, all through the same ``train_epoch`` hook and
in the host's batch order, so every framework trains identically whatever
the phase:

* ``warmup`` (epoch 0 only): the first ``warmup`` steps, one per call, so the
  first step's time (compilation included) is its own figure;
* ``window``: steps dispatched back to back, ``window_steps`` at a time, with
  one wait at the end of each window.  Throughput comes from these alone:
  total samples over total window time (averaging per-step rates would
  overweight fast steps);
* ``latency``: the last ``latency_steps`` steps of each epoch, one per call
  and each waited for, giving per-step latency (median, p90, std).  Where a
  framework records device events inside windows (CUDA), those per-step times
  are used instead and the latency phase is skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite.records import EpochResult

PHASES = ("warmup", "window", "latency")


@dataclass(frozen=True)
class Phase:
    """Steps ``[start, stop)`` of one epoch, run by one ``train_epoch`` call."""

    kind: str
    epoch: int
    start: int
    stop: int


def plan_epoch(epoch: int, steps: int, *, warmup: int, window_steps: int, latency_steps: int) -> list[Phase]:
    """The phases of one epoch of ``steps`` steps.

    At least half of the steps after warm-up stay in windows: the latency
    phase takes ``min(latency_steps, (steps - warmup) // 2)`` steps.
    """
    warm = min(warmup, steps) if epoch == 0 else 0
    latency = min(latency_steps, (steps - warm) // 2)
    phases = [Phase("warmup", epoch, i, i + 1) for i in range(warm)]
    for start in range(warm, steps - latency, window_steps):
        phases.append(Phase("window", epoch, start, min(start + window_steps, steps - latency)))
    phases += [Phase("latency", epoch, i, i + 1) for i in range(steps - latency, steps)]
    return phases


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"step_time_median_s": math.nan, "step_time_p90_s": math.nan, "step_time_std_s": math.nan,
                "step_time_cv": math.nan}
    arr = np.asarray(values, dtype=np.float64)
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {"step_time_median_s": float(np.median(arr)), "step_time_p90_s": float(np.percentile(arr, 90)),
            "step_time_std_s": std, "step_time_cv": std / float(arr.mean()) if arr.mean() > 0 else 0.0}


def steady_state(parts: list[tuple[Phase, EpochResult]]) -> dict[str, Any]:
    """Figures of a run from its phases' results, in the order they ran."""
    windows = [r for p, r in parts if p.kind == "window"]
    if not windows:
        raise ValueError("no timed window: warm-up and latency took every step")
    window_time = float(sum(r.window_time_s for r in windows))
    samples = int(sum(r.samples for r in windows))
    event_times = [t for r in windows for t in r.step_times_s]
    latency_times = [r.window_time_s for p, r in parts if p.kind == "latency"]
    warm = [r.window_time_s for p, r in parts if p.kind == "warmup"]
    epochs = sorted({p.epoch for p, _ in parts})
    losses = [[loss for p, r in parts if p.epoch == e for loss in r.step_losses] for e in epochs]
    last = parts[-1][1]
    figures: dict[str, Any] = {
        "throughput": samples / window_time if window_time > 0 else math.inf,
        "timed_steps": int(sum(r.steps for r in windows)),
        "timed_samples": samples,
        "timed_windows": len(windows),
        "window_time_s": window_time,
        **_summary(event_times or latency_times),
        "latency_source": "device events" if event_times else ("synchronized steps" if latency_times else "none"),
        "latency_steps_measured": len(event_times or latency_times),
        "first_step_time_s": float(warm[0]) if warm else float(parts[0][1].window_time_s),
        "warmup_time_s": float(sum(warm)),
        "warmup_steps": len(warm),
        "epoch_times_s": [float(sum(r.window_time_s for p, r in parts if p.epoch == e)) for e in epochs],
        "latency_step_times_s": event_times or latency_times,
        "step_losses": losses,
        "first_step_loss": float(losses[0][0]) if losses and losses[0] else math.nan,
        "final_loss": float(losses[-1][-1]) if losses and losses[-1] else math.nan,
        "final_epoch_mean_loss": float(np.mean(losses[-1])) if losses and losses[-1] else math.nan,
        "loss_scale_final": last.loss_scale_final,
        "skipped_steps": int(sum(r.skipped_steps for _, r in parts)),
    }
    return figures
