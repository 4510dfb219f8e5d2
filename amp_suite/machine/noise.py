"""How busy the machine was while a cell trained, and when its timing is too noisy to trust.

The worker takes a :func:`snapshot` before the first training step and after
the last, and :func:`load_figures` turns the two into figures of the cell:

* ``load_avg_1m_before`` / ``load_avg_1m_after``: the 1-minute load average
  (``os.getloadavg``).  On a machine that runs nothing else it still rises
  during a sweep, because it counts the suite's own workers (the previous
  cell's too, decaying over about a minute), so it is recorded, not judged;
* ``other_cpu_cores``: the cores other processes kept busy on average over the
  cell's training, from the machine's busy CPU time (``/proc/stat``) minus this
  process's own (``os.times``).  This is what the busy flag judges: it is zero
  on an idle machine however hard the cell itself works;
* ``cpu_freq_mhz_before`` / ``cpu_freq_mhz_after``: CPU 0's current clock where
  Linux exposes it (``scaling_cur_freq``), else absent.

:func:`noise_flags` adds a line to the cell's ``measurement_flags`` when other
processes kept more than :data:`BUSY_CORES_FRACTION` of the cores busy, or when
the throughput of the cell's timed windows varied by more than
:data:`MAX_WINDOW_CV` (their coefficient of variation).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

# A cell is flagged busy when other processes kept more than this fraction of the cores busy on average.
BUSY_CORES_FRACTION = 0.25
# Without /proc/stat (not Linux): flagged busy when the 1-minute load average per core exceeded this before the cell.
BUSY_LOAD_PER_CORE = 1.0
# A cell is flagged noisy when its timed windows' throughput has a coefficient of variation above this.
MAX_WINDOW_CV = 0.10
# /proc/stat counts in clock ticks (10 ms): over a shorter training than this the share of other processes
# is too coarse to judge, and the 1-minute load average decides instead.
MIN_SPAN_S = 1.0
CPU_FREQ_FILE = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
PROC_STAT = Path("/proc/stat")


def load_average() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def cpu_frequency_mhz() -> float | None:
    """CPU 0's current clock in MHz, or None where it cannot be read."""
    try:
        return int(CPU_FREQ_FILE.read_text().strip()) / 1000.0
    except (OSError, ValueError):
        return None


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (every /proc/stat field but idle and iowait)."""
    try:
        first = PROC_STAT.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        ticks = [int(x) for x in first[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
    busy = sum(ticks[:8]) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    return busy / float(os.sysconf("SC_CLK_TCK"))


def own_cpu_seconds() -> float:
    """CPU seconds this process (all its threads) and its waited-for children have used."""
    times = os.times()
    return float(times.user + times.system + times.children_user + times.children_system)


def snapshot() -> dict[str, Any]:
    """The readings :func:`load_figures` compares, taken now."""
    return {"time": time.monotonic(), "load_avg_1m": load_average(), "cpu_freq_mhz": cpu_frequency_mhz(),
            "machine_busy_s": machine_busy_seconds(), "own_cpu_s": own_cpu_seconds()}


def load_figures(before: dict[str, Any], after: dict[str, Any], cpu_count: int | None = None) -> dict[str, Any]:
    """The cell's machine-load figures from two :func:`snapshot` readings (see the module)."""
    cores = cpu_count or os.cpu_count() or 1
    out: dict[str, Any] = {"cpu_cores": cores, "load_avg_1m_before": before.get("load_avg_1m"),
                           "load_avg_1m_after": after.get("load_avg_1m")}
    if before.get("cpu_freq_mhz") is not None or after.get("cpu_freq_mhz") is not None:
        out["cpu_freq_mhz_before"] = before.get("cpu_freq_mhz")
        out["cpu_freq_mhz_after"] = after.get("cpu_freq_mhz")
    span = float(after.get("time", 0.0)) - float(before.get("time", 0.0))
    out["load_span_s"] = span
    if before.get("machine_busy_s") is not None and after.get("machine_busy_s") is not None \
            and span >= MIN_SPAN_S:
        machine = float(after["machine_busy_s"]) - float(before["machine_busy_s"])
        own = float(after.get("own_cpu_s", 0.0)) - float(before.get("own_cpu_s", 0.0))
        out["other_cpu_cores"] = max(machine - own, 0.0) / span
    else:
        out["other_cpu_cores"] = None
    return out


def noise_flags(metrics: dict[str, Any]) -> list[str]:
    """One line per reason the machine's load or the windows' spread make the cell's timing untrustworthy."""
    flags = []
    cores = int(metrics.get("cpu_cores") or os.cpu_count() or 1)
    other = metrics.get("other_cpu_cores")
    if other is not None:
        if other > BUSY_CORES_FRACTION * cores:
            flags.append(f"machine busy: other processes kept {other:.2f} of {cores} cores busy while the cell "
                         f"trained (more than {BUSY_CORES_FRACTION:.0%} of them); its throughput is likely low")
    else:
        load = metrics.get("load_avg_1m_before")
        if load is not None and load > BUSY_LOAD_PER_CORE * cores:
            flags.append(f"machine busy: 1-minute load average {load:.2f} on {cores} cores before the cell "
                         f"(over {BUSY_LOAD_PER_CORE:g} per core)")
    cv = metrics.get("window_throughput_cv")
    if cv is not None and cv > MAX_WINDOW_CV:
        flags.append(f"noisy timing: throughput varied by {cv:.0%} (coefficient of variation) over the cell's "
                     f"{metrics.get('timed_windows', '?')} timed windows, above the {MAX_WINDOW_CV:.0%} bound")
    return flags


def is_busy_flag(flag: str) -> bool:
    """Whether a measurement flag is the busy-machine one."""
    return str(flag).startswith("machine busy")
