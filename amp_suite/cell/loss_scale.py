"""The loss-scale trajectory of a cell that scales its loss (``amp_fp16`` under dynamic or static scaling).

Cheap by construction: no step is added and nothing is read per step.  A
plugin already reads its scale once after every phase
(``EpochResult.loss_scale_final``: after each warm-up or latency step, and
at the end of each timed window, after the window's one wait), and counts
the phase's skipped steps from the applied flags it fetches with the
losses.  The trajectory is the scale at every phase end where it changed,
with the number of optimizer steps taken by then: exact step by step in the
single-step phases, at window resolution inside a window.

Figures (``CellResult.metrics``):

* ``loss_scale_trajectory``: ``[[step, scale], ...]``, starting with
  ``[0, initial_loss_scale]``; at most :data:`MOST_POINTS` points (the first
  and the last half of them; ``loss_scale_points_dropped`` counts the rest);
* ``loss_scale_initial``, ``loss_scale_min`` (the smallest scale read);
* ``loss_scale_backoffs``: how many times the scale was halved, from the
  falls between readings (``log2`` of each fall, rounded: a window whose
  scale fell fourfold had two backoffs);
* ``loss_scale_final`` and ``skipped_steps`` as before (every cell has them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from amp_suite.records import EpochResult, PrecisionApplied

# Most points a stored trajectory keeps (a long run with frequent backoffs stays a small record).
MOST_POINTS = 200


def loss_scale_figures(parts: Sequence[tuple[Any, EpochResult]], applied: PrecisionApplied) -> dict[str, Any]:
    """The trajectory figures of a cell's phases (``(phase, result)`` in the order they ran); ``{}`` when the
    cell scales no loss."""
    if applied.loss_scaling not in ("dynamic", "static") or applied.initial_loss_scale is None:
        return {}
    current = float(applied.initial_loss_scale)
    points: list[list[float]] = [[0, current]]
    lowest, backoffs, step = current, 0, 0
    for _, part in parts:
        step += part.steps
        scale = part.loss_scale_final
        if scale is None or not math.isfinite(scale) or scale <= 0 or scale == current:
            continue
        if scale < current:
            backoffs += max(1, round(math.log2(current / scale)))
        points.append([step, float(scale)])
        lowest, current = min(lowest, float(scale)), float(scale)
    dropped = max(0, len(points) - MOST_POINTS)
    if dropped:
        half = MOST_POINTS // 2
        points = points[:half] + points[-half:]
    return {"loss_scale_trajectory": points, "loss_scale_initial": float(applied.initial_loss_scale),
            "loss_scale_min": lowest, "loss_scale_backoffs": backoffs, "loss_scale_points_dropped": dropped}
