"""What every telemetry meter is: the window protocol, the meter that measures nothing, energy totals.

A *timed window* is a stretch of training whose wall time becomes a
throughput figure. The worker calls :meth:`WindowMeter.start` right before a
window's clock starts and :meth:`WindowMeter.stop` right after it stops, with
the number of images trained in between. :meth:`WindowMeter.summary` then gives
the run's figures over all windows (plain JSON-able values, units in the key
names) and :meth:`WindowMeter.flags` one line per reason the cell's timing
cannot be trusted.  The meters of each source subclass it:
:class:`~amp_suite.machine.nvml_meter.NvmlMeter` and
:class:`~amp_suite.machine.rapl.RaplMeter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class TelemetryUnavailable(RuntimeError):
    """A meter cannot be opened on this machine; the message says why in one line."""


def one_line(error: BaseException) -> str:
    """An error as one line: its message's first line, else its type's name."""
    text = str(error).strip().splitlines()
    return (text[0] if text else "") or type(error).__name__


class WindowMeter:
    """Measures the timed windows of one run; the base class measures nothing.

    ``source`` names what measured (``"NVML"``, ``"RAPL (package-0)"``,
    ``"none: <reason>"``).
    """

    source: str = "none"

    def start(self) -> None:
        """Called right before a timed window's clock starts."""

    def stop(self, samples: float) -> None:
        """Called right after the window's clock stops; ``samples`` = the images trained in it that the meter's
        counter measured (its share of them: :func:`~amp_suite.machine.telemetry.metered_share`)."""

    def summary(self) -> dict[str, Any]:
        """The run's figures over all windows: JSON-able scalars and lists, units in the key names."""
        return {"telemetry_source": self.source}

    def flags(self) -> list[str]:
        """One line per reason the cell's timing cannot be trusted; empty when none."""
        return []

    def close(self) -> None:
        """Ends any background sampling (a window left open is abandoned)."""


class NullMeter(WindowMeter):
    """Nothing to measure: the summary is ``{"telemetry_source": "none: <reason>"}``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.source = f"none: {reason}"


@dataclass
class EnergyTotals:
    """Energy over the windows whose counter was read at both ends."""

    joules: float = 0.0
    seconds: float = 0.0
    samples: float = 0.0
    windows: int = 0
    windows_missing: int = 0

    def add(self, joules: float | None, seconds: float, samples: float) -> None:
        if joules is None:
            self.windows_missing += 1
            return
        self.joules += joules
        self.seconds += seconds
        self.samples += samples
        self.windows += 1

    def figures(self) -> dict[str, Any]:
        """``energy_j``, ``energy_per_image_j``, ``mean_power_w`` (empty when no window was measured)."""
        if not self.windows:
            return {}
        found: dict[str, Any] = {"energy_j": self.joules}
        if self.samples > 0:
            found["energy_per_image_j"] = self.joules / self.samples
        if self.seconds > 0:
            found["mean_power_w"] = self.joules / self.seconds
        if self.windows_missing:
            found["energy_windows_missing"] = self.windows_missing
        return found

