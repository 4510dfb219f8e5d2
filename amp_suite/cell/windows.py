"""Plans an epoch's measurement phases and turns what they measured into figures.

An epoch's steps run in phases, all through the same ``train_epoch`` hook and
in the host's batch order, so every framework trains identically whatever
the phase:

* ``warmup`` (epoch 0 only): the first ``warmup`` steps, one per call, so the
  first step's time (compilation included) is its own figure; with
  ``settle_warmup`` (the GPU default), more single steps until the step time
  settles (:class:`MeasurementPlan`);
* ``window``: steps dispatched back to back, ``window_steps`` at a time (or,
  with ``window_seconds``, as many as last that long), with one wait at the
  end of each window.  Throughput comes from these alone: total samples over
  total window time (averaging per-step rates would overweight fast steps);
* ``latency``: the last ``latency_steps`` steps of each epoch, one per call
  and each waited for on the host, giving per-step latency (median, p90,
  std) by the same method in every framework.  Device events a framework
  records inside windows (CUDA in PyTorch) are kept as a separate figure,
  and stand in for latency only when no latency phase ran.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
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


# Warm-up has settled when this many consecutive single steps each lie within
# SETTLE_TOLERANCE of their median (autotuning, lazy allocation and clock ramp-up behind).
SETTLE_RUN = 5
SETTLE_TOLERANCE = 0.10
# Settling may take at most this fraction of an epoch's steps (at least ``warmup``).
SETTLE_MAX_FRACTION = 0.25
# One window's staged batches, per device, stay under this many bytes: a window sized
# to a second of a fast workload would otherwise stage hundreds of batches at once.
MAX_STAGED_BYTES = 1 << 30


@dataclass
class MeasurementPlan:
    """Plans an epoch's phases as it runs, sizing them from what was measured so far.

    Without ``window_seconds`` and ``settle_warmup`` it yields exactly the
    phases of :func:`plan_epoch`.  With ``settle_warmup``, warm-up goes on
    (one step at a time, each waited for) past ``warmup`` steps until
    :data:`SETTLE_RUN` consecutive step times lie within
    :data:`SETTLE_TOLERANCE` of their median, for at most
    :data:`SETTLE_MAX_FRACTION` of the epoch.  With ``window_seconds``, each
    window holds as many steps as last that long at the latest estimate of
    the step time (the last window's time per step, else the settled
    warm-up's median), never more than :data:`MAX_STAGED_BYTES` of batches.
    Call :meth:`observe` with every phase's result before asking for the next.
    """

    steps: int
    warmup: int
    window_steps: int
    latency_steps: int
    window_seconds: float = 0.0
    settle_warmup: bool = False
    batch_bytes: int = 0
    warmup_times: list[float] = field(default_factory=list)
    step_time_estimate_s: float | None = None

    def settled(self) -> bool:
        """Whether the last :data:`SETTLE_RUN` warm-up steps agree within :data:`SETTLE_TOLERANCE`."""
        if len(self.warmup_times) < SETTLE_RUN:
            return False
        last = np.asarray(self.warmup_times[-SETTLE_RUN:], dtype=np.float64)
        median = float(np.median(last))
        return median > 0 and bool(np.all(np.abs(last - median) <= SETTLE_TOLERANCE * median))

    def _warmup_limit(self) -> int:
        if not self.settle_warmup:
            return min(self.warmup, self.steps)
        return min(max(self.warmup, int(self.steps * SETTLE_MAX_FRACTION)), self.steps)

    def window_size(self) -> int:
        """Steps of the next window."""
        size = self.window_steps
        if self.window_seconds > 0 and self.step_time_estimate_s:
            size = max(1, math.ceil(self.window_seconds / self.step_time_estimate_s))
        if self.batch_bytes > 0:
            size = min(size, max(1, MAX_STAGED_BYTES // self.batch_bytes))
        return size

    def phases(self, epoch: int) -> Iterator[Phase]:
        """The phases of one epoch, each planned after the previous one was observed."""
        step = 0
        if epoch == 0:
            limit = self._warmup_limit()
            while step < limit and (step < self.warmup or (self.settle_warmup and not self.settled())):
                yield Phase("warmup", epoch, step, step + 1)
                step += 1
        latency = min(self.latency_steps, (self.steps - step) // 2)
        end = self.steps - latency
        while step < end:
            stop = min(step + self.window_size(), end)
            yield Phase("window", epoch, step, stop)
            step = stop
        for index in range(end, self.steps):
            yield Phase("latency", epoch, index, index + 1)

    def observe(self, phase: Phase, result: EpochResult) -> None:
        """Take a phase's measured time into the estimates."""
        if phase.kind == "warmup":
            self.warmup_times.append(float(result.window_time_s))
            if len(self.warmup_times) >= SETTLE_RUN:
                self.step_time_estimate_s = float(np.median(self.warmup_times[-SETTLE_RUN:]))
            else:
                self.step_time_estimate_s = float(self.warmup_times[-1])
        elif phase.kind == "window" and result.steps > 0 and result.window_time_s > 0:
            self.step_time_estimate_s = float(result.window_time_s) / int(result.steps)


def timing_flags(figures: dict[str, Any], *, min_timed_steps: int, min_timed_seconds: float,
                 settle_asked: bool, settled: bool, steps_per_epoch: int, epochs: int,
                 latency_steps: int) -> list[str]:
    """One line per reason the cell's timed region is too short or unsettled to trust.

    A short region's line says how many steps per epoch would have met both
    bounds at the step time measured.
    """
    flags = []
    timed_steps = int(figures.get("timed_steps") or 0)
    timed_s = float(figures.get("window_time_s") or 0.0)
    if timed_steps < min_timed_steps or timed_s < min_timed_seconds:
        per_step = timed_s / timed_steps if timed_steps and timed_s > 0 else 0.0
        want = max(min_timed_steps, math.ceil(min_timed_seconds / per_step) if per_step > 0 else min_timed_steps)
        per_epoch = math.ceil(want / max(epochs, 1))
        latency = min(latency_steps, per_epoch)
        need = per_epoch + latency + int(figures.get("warmup_steps") or 0)
        need = max(need, steps_per_epoch + 1)
        missed = [bound for bound, short in ((f"{min_timed_steps} steps", timed_steps < min_timed_steps),
                                             (f"{min_timed_seconds:g} s", timed_s < min_timed_seconds)) if short]
        flags.append(f"timed region too short: {timed_steps} steps in {timed_s:.3g} s, under the "
                     f"{' and '.join(missed)} a trusted figure needs here (at least {min_timed_steps} steps and "
                     f"{min_timed_seconds:g} s); use --steps {need} or more")
    if settle_asked and not settled:
        flags.append(f"step time had not settled after {figures.get('warmup_steps', 0)} warm-up steps "
                     f"(the last {SETTLE_RUN} within ±{SETTLE_TOLERANCE:.0%} of their median); "
                     "the first windows may include warm-up")
    return flags


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"step_time_median_s": math.nan, "step_time_p90_s": math.nan, "step_time_std_s": math.nan,
                "step_time_cv": math.nan}
    arr = np.asarray(values, dtype=np.float64)
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {"step_time_median_s": float(np.median(arr)), "step_time_p90_s": float(np.percentile(arr, 90)),
            "step_time_std_s": std, "step_time_cv": std / float(arr.mean()) if arr.mean() > 0 else 0.0}


def window_spread(windows: list[EpochResult]) -> dict[str, Any]:
    """How throughput varied over a process's timed windows.

    ``window_throughputs`` holds each window's samples per second;
    ``window_throughput_cv`` is their standard deviation over their mean
    (``None`` with fewer than two windows: one window has no spread).
    """
    rates = [r.samples / r.window_time_s for r in windows if r.window_time_s > 0 and r.samples > 0]
    if not rates:
        return {"window_throughputs": [], "window_throughput_median": None, "window_throughput_min": None,
                "window_throughput_max": None, "window_throughput_cv": None}
    arr = np.asarray(rates, dtype=np.float64)
    cv = float(arr.std(ddof=1) / arr.mean()) if arr.size > 1 and arr.mean() > 0 else None
    return {"window_throughputs": [float(x) for x in arr], "window_throughput_median": float(np.median(arr)),
            "window_throughput_min": float(arr.min()), "window_throughput_max": float(arr.max()),
            "window_throughput_cv": cv}


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
        **window_spread(windows),
        # Latency is the same method in every framework: single steps, each waited for on the host.
        # Device events recorded inside windows (CUDA in PyTorch) are kept as a figure of their own.
        **_summary(latency_times or event_times),
        "latency_source": "synchronized steps" if latency_times else ("device events" if event_times else "none"),
        "latency_steps_measured": len(latency_times or event_times),
        "window_event_step_time_median_s": float(np.median(event_times)) if event_times else None,
        "first_step_time_s": float(warm[0]) if warm else float(parts[0][1].window_time_s),
        "warmup_time_s": float(sum(warm)),
        "warmup_steps": len(warm),
        "epoch_times_s": [float(sum(r.window_time_s for p, r in parts if p.epoch == e)) for e in epochs],
        "latency_step_times_s": latency_times or event_times,
        "step_losses": losses,
        "first_step_loss": float(losses[0][0]) if losses and losses[0] else math.nan,
        "final_loss": float(losses[-1][-1]) if losses and losses[-1] else math.nan,
        "final_epoch_mean_loss": float(np.mean(losses[-1])) if losses and losses[-1] else math.nan,
        "loss_scale_final": last.loss_scale_final,
        "skipped_steps": int(sum(r.skipped_steps for _, r in parts)),
    }
    return figures
