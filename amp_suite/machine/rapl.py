"""CPU package energy over the timed windows, from Linux powercap (RAPL): :class:`RaplMeter`.

AMD's kernel driver exposes the same ``intel-rapl`` interface as Intel's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_suite.machine.window_meter import EnergyTotals, TelemetryUnavailable, WindowMeter, one_line

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")


@dataclass(frozen=True)
class RaplDomain:
    """One RAPL package domain: ``intel-rapl:N`` with its ``name`` (``package-0``) and counter range."""

    path: Path
    name: str
    max_energy_range_uj: int

    def read_uj(self) -> int:
        """The domain's energy counter in microjoules (it wraps to 0 after ``max_energy_range_uj``)."""
        return int((self.path / "energy_uj").read_text().strip())


def rapl_package_domains(root: Path = DEFAULT_POWERCAP_ROOT) -> list[RaplDomain]:
    """The package domains under ``root`` whose energy counter this process can read.

    Raises :class:`TelemetryUnavailable` (one line saying why) when there is none.
    Sub-domains (``intel-rapl:0:0``: core, uncore, dram) are parts of or beside
    a package and are left out, as is ``psys`` (the whole platform).
    """
    try:
        zones = sorted(p for p in root.iterdir() if p.name.startswith("intel-rapl:") and p.name.count(":") == 1)
    except OSError as error:
        raise TelemetryUnavailable(f"no readable RAPL energy counter under {root} "
                                   f"({error.strerror or one_line(error)})") from error
    domains, problems = [], []
    for zone in zones:
        try:
            name = (zone / "name").read_text().strip()
            if not name.startswith("package"):
                continue
            domain = RaplDomain(zone, name, int((zone / "max_energy_range_uj").read_text().strip()))
            domain.read_uj()
        except (OSError, ValueError) as error:
            problems.append(f"{zone.name}: {getattr(error, 'strerror', None) or one_line(error)}")
            continue
        domains.append(domain)
    if not domains:
        why = "; ".join(problems) if problems else "no package domain"
        raise TelemetryUnavailable(f"no readable RAPL energy counter under {root} ({why})")
    return domains


class RaplMeter(WindowMeter):
    """CPU package energy over the timed windows from Linux powercap (RAPL).

    The counters cover whole CPU packages, other processes included. A counter
    that went backwards wrapped once (``max_energy_range_uj``, typically minutes
    of full load); more than one wrap inside a window cannot be seen.
    Raises :class:`TelemetryUnavailable` when no package counter is readable.
    """

    def __init__(self, root: Path = DEFAULT_POWERCAP_ROOT) -> None:
        self.domains = rapl_package_domains(Path(root))
        self.source = f"RAPL ({', '.join(d.name for d in self.domains)})"
        self._energy = EnergyTotals()
        self._start_uj: list[int] | None = None
        self._started: float | None = None

    def _read_all(self) -> list[int] | None:
        try:
            return [domain.read_uj() for domain in self.domains]
        except (OSError, ValueError):
            return None

    def start(self) -> None:
        self._start_uj = self._read_all()
        self._started = time.perf_counter()

    def stop(self, samples: float) -> None:
        if self._started is None:
            return
        end_uj = self._read_all()
        seconds = time.perf_counter() - self._started
        self._started = None
        joules = None
        if self._start_uj is not None and end_uj is not None:
            total_uj = 0
            for domain, before, after in zip(self.domains, self._start_uj, end_uj, strict=True):
                delta = after - before
                if delta < 0:
                    delta += domain.max_energy_range_uj
                total_uj += delta
            joules = total_uj / 1e6
        self._energy.add(joules, seconds, samples)

    def summary(self) -> dict[str, Any]:
        """``energy_j`` (CPU packages, J), ``energy_per_image_j`` (J/image), ``mean_power_w`` (W), source."""
        found: dict[str, Any] = {"telemetry_source": self.source}
        found.update(self._energy.figures())
        return found
