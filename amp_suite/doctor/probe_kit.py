"""What every framework probe shares (no framework imported here).

A probe is ``python -m amp_suite.doctor.<framework>_probe DEVICE`` (``cpu`` or
``auto``): one framework in one fresh process, imported after the doctor set
the plugin's environment variables.  It prints one JSON object on its last
line, one entry per section; a section that raised holds ``{"error": ...}``:

- ``device``: ``kind`` (``gpu``/``cpu``), ``cuda_build``, ``name``,
  ``compute_capability``, ``driver``, ``cuda_runtime``, ``cudnn``;
- ``precision``: ``matmul_fp32``, ``conv_fp32`` and, on a GPU,
  ``matmul_tf32``, ``conv_tf32`` (see :data:`checks.PROBE_K`);
- ``amp_fp16``, ``amp_bf16``: dtype names seen inside one train step —
  ``conv``, ``matmul``, ``logits``, and lists ``params``, ``grads``;
- ``loss_scale``: ``initial``, ``after_overflow``,
  ``overflow_params_unchanged``, ``growth_initial``, ``growth_interval``,
  ``finite_steps``, ``after_finite_steps``, ``finite_params_changed``;
- ``timing``: ``steps``, ``per_step_sum_s``, ``wall_s`` and ``ratio`` of the
  trial with the median sum/wall ratio, ``trials``, ``method``, ``load_per_core``;
- ``memory``: ``api``, ``peak_bytes``, ``allocated_bytes`` (GPU only);
- ``preallocation`` (JAX): ``preallocate_env``, ``bytes_reserved``, ``bytes_limit``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from amp_suite.doctor.checks import MEMORY_PROBE_BYTES, PROBE_K

# The loss-scale probe: an initial scale that overflows float16 gradients, and
# a small one that must double after GROWTH_INTERVAL finite steps.
OVERFLOW_SCALE = 2.0 ** 100
GROWTH_SCALE = 2.0 ** 10
GROWTH_INTERVAL = 2
# The timing probe: trials of STEPS steps (timed, then untimed), the median trial
# kept; at least MIN_TRIALS, more (up to MAX_TRIALS) while a busy machine keeps
# the two further apart than AGREEMENT.
TIMING_STEPS = 10
# The timed step: a two-layer MLP, big enough (about 1.6 GFLOP) that one wait per
# step costs little beside the step itself.
TIMING_BATCH, TIMING_WIDTH = 512, 1024
MIN_TRIALS, MAX_TRIALS = 3, 15
AGREEMENT = 0.02

__all__ = ["GROWTH_INTERVAL", "GROWTH_SCALE", "MEMORY_PROBE_BYTES", "OVERFLOW_SCALE", "PROBE_K",
           "TIMING_BATCH", "TIMING_STEPS", "TIMING_WIDTH", "emit", "section", "time_steps"]


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
