"""Learning curves: validation loss and accuracy at declared points of a cell's training.

A point is each epoch's end (``curve_every`` 0) or the end of the first
phase that reaches each multiple of ``curve_every`` steps: the worker
evaluates between phases, never inside a timed window, as it does for the
time to target (the two share one validation where their points meet).  The
curve is stored with the cell as ``metrics["learning_curve"]``: ``{"every_steps":
N, "points": [[steps, val_loss, val_accuracy], ...]}``.
"""

from __future__ import annotations

from typing import Any

from amp_suite.cell.windows import Phase


class CurveTracker:
    """The learning-curve points of one cell; ``every`` None records none."""

    def __init__(self, every: int | None, steps_per_epoch: int):
        self.every, self.steps_per_epoch = every, steps_per_epoch
        self.points: list[list[float]] = []
        self._last_point = 0

    def due(self, phase: Phase) -> bool:
        if self.every is None:
            return False
        if self.every <= 0:
            return phase.stop >= self.steps_per_epoch
        return (phase.epoch * self.steps_per_epoch + phase.stop) // self.every > self._last_point

    def record(self, phase: Phase, figures: dict[str, float]) -> None:
        done = phase.epoch * self.steps_per_epoch + phase.stop
        if self.every:
            self._last_point = done // self.every
        self.points.append([done, float(figures["val_loss"]), float(figures["val_accuracy"])])

    def figures(self) -> dict[str, Any]:
        if self.every is None:
            return {}
        return {"learning_curve": {"every_steps": self.every or self.steps_per_epoch, "points": self.points}}
