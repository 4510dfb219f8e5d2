"""Energy and GPU telemetry over the timed windows of a run, without importing a framework.

A *timed window* is a stretch of training whose wall time becomes a
throughput figure. The worker calls :meth:`WindowMeter.start` right before a
window's clock starts and :meth:`WindowMeter.stop` right after it stops, with
the number of images trained in between. :meth:`WindowMeter.summary` then gives
the run's figures over all windows (plain JSON-able values, units in the key
names) and :meth:`WindowMeter.flags` one line per reason the cell's timing
cannot be trusted.

Meters:

- :class:`NvmlMeter` — an NVIDIA GPU through NVML (the ``pynvml`` module of the
  ``nvidia-ml-py`` package, imported lazily): the GPU's energy counter, and a
  background thread sampling clocks, power, temperature, utilisation, clock
  event (throttle) reasons and the processes on the GPU every
  ``sample_interval_s`` while a window is open.
- :class:`RaplMeter` — CPU package energy from Linux powercap (RAPL; AMD's
  kernel driver exposes the same ``intel-rapl`` interface).
- :class:`NullMeter` — nothing to measure; its summary says why.

:func:`open_meter` picks one. Telemetry never fails a run: every NVML or
file-system error after a meter is open is swallowed and only leaves figures out.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")
DEFAULT_SAMPLE_INTERVAL_S = 0.05

# NVML clock event ("throttle") reason bits: (pynvml constant suffix, value, name).
# pynvml >= 12 spells the constants nvmlClocksEventReason*, older ones
# nvmlClocksThrottleReason*; the values are the same in both.
CLOCK_EVENT_REASON_BITS: tuple[tuple[str, int, str], ...] = (
    ("GpuIdle", 0x1, "gpu idle"),
    ("ApplicationsClocksSetting", 0x2, "applications clocks setting"),
    ("SwPowerCap", 0x4, "sw power cap"),
    ("HwSlowdown", 0x8, "hw slowdown"),
    ("SyncBoost", 0x10, "sync boost"),
    ("SwThermalSlowdown", 0x20, "sw thermal slowdown"),
    ("HwThermalSlowdown", 0x40, "hw thermal slowdown"),
    ("HwPowerBrakeSlowdown", 0x80, "hw power brake slowdown"),
    ("DisplayClockSetting", 0x100, "display clock setting"),
)
# Reasons that do not make a timing untrustworthy: an idle GPU (between the
# window's first sample and its first kernel, or a host-bound step), clocks
# fixed by the administrator (recorded by :func:`nvml_machine_info`), clocks
# held in step with other GPUs of a sync-boost group, and a display clock
# setting. Every other reason means the GPU ran below the clocks it would
# otherwise have run at: power cap, thermal slowdown, hardware slowdown, power brake.
BENIGN_CLOCK_EVENT_REASONS = frozenset(
    {"gpu idle", "applications clocks setting", "sync boost", "display clock setting"}
)
# The software power cap: the driver lowering clocks to keep the board within its power limit.  A
# busy H100 spends much of any step there; it is how the card runs at full load, not a fault of the
# machine, so it is recorded (``power_capped_windows``) and does not flag a timing.  A thermal or
# hardware slowdown still does.
RECORDED_CLOCK_EVENT_REASONS = frozenset({"sw power cap"})
# NVML field of the instantaneous board power (mW); nvmlDeviceGetPowerUsage is, on Ampere and newer
# (GA100 excepted), an average over the last second (NVML API reference, nvmlDeviceGetPowerUsage).
NVML_FI_DEV_POWER_INSTANT = 186


class TelemetryUnavailable(RuntimeError):
    """A meter cannot be opened on this machine; the message says why in one line."""


def _one_line(error: BaseException) -> str:
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

    def stop(self, samples: int) -> None:
        """Called right after the window's clock stops; ``samples`` = images trained in it."""

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
class _EnergyTotals:
    """Energy over the windows whose counter was read at both ends."""

    joules: float = 0.0
    seconds: float = 0.0
    samples: int = 0
    windows: int = 0
    windows_missing: int = 0

    def add(self, joules: float | None, seconds: float, samples: int) -> None:
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


# --------------------------------------------------------------------------- NVML


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; imported only when a GPU meter is asked for

    return pynvml


def _reason_bit(nvml: Any, suffix: str, default: int) -> int:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        value = getattr(nvml, prefix + suffix, None)
        if isinstance(value, int):
            return value
    return default


def clock_event_reason_names(nvml: Any, mask: int) -> list[str]:
    """The names of the clock event reason bits set in ``mask`` (NVML's bitmask), in bit order."""
    return [name for suffix, default, name in CLOCK_EVENT_REASON_BITS
            if mask & _reason_bit(nvml, suffix, default)]


def _visible_device_entry(index: int, environ: Mapping[str, str]) -> str | None:
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    return entries[index] if 0 <= index < len(entries) else None


def nvml_handle(nvml: Any, index: int, environ: Mapping[str, str] = os.environ) -> Any:
    """NVML's handle of the GPU a CUDA program sees as device ``index``.

    NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``;
    CUDA numbers only the visible ones. An integer entry of that variable is an
    NVML index; a ``GPU-…`` (or ``MIG-…``) entry is a UUID or its prefix.
    """
    entry = _visible_device_entry(index, environ)
    if entry is None:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    try:
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    except Exception:  # a UUID prefix: compare with each GPU's UUID
        for nvml_index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            if uuid.startswith(entry):
                return handle
        raise


def _own_pids() -> set[int]:
    """This process's pid in each PID namespace /proc can see (``NSpid``), at least ``os.getpid()``."""
    pids = {os.getpid()}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                pids.update(int(p) for p in line.split()[1:] if p.isdigit())
    except OSError:
        pass
    return pids


@dataclass
class _GpuSample:
    """One reading of the GPU; a figure NVML did not give is ``None``."""

    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    gpu_utilization_pct: int | None = None
    memory_utilization_pct: int | None = None
    clock_event_mask: int | None = None
    process_memory_bytes: dict[int, int | None] = field(default_factory=dict)


class NvmlMeter(WindowMeter):
    """GPU energy and telemetry through NVML for the CUDA device ``index``.

    Per window: energy from ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules
    since the driver loaded; stop minus start), and samples taken at start, every
    ``sample_interval_s`` by a daemon thread while the window is open, and at
    stop. The thread takes the GIL for well under a millisecond per sample.

    NVML's energy counter is updated by the driver every few tens of
    milliseconds, so a window much shorter than that has a coarse energy figure.

    Raises :class:`TelemetryUnavailable` when NVML cannot be initialised or the
    device cannot be found; after that, no method raises.
    """

    def __init__(self, index: int, nvml: Any = None, *,
                 sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
                 environ: Mapping[str, str] = os.environ,
                 own_pids: set[int] | None = None) -> None:
        try:
            self._nvml = _import_pynvml() if nvml is None else nvml
        except ImportError as error:
            raise TelemetryUnavailable("nvidia-ml-py not installed") from error
        try:
            self._nvml.nvmlInit()
            self._handle = nvml_handle(self._nvml, index, environ)
        except Exception as error:
            raise TelemetryUnavailable(f"NVML: {_one_line(error)}") from error
        self.index = index
        self.sample_interval_s = sample_interval_s
        self._own_pids = _own_pids() if own_pids is None else set(own_pids)
        self._failed_queries: set[str] = set()
        self.source = "NVML"
        self.power_reading = ""  # "instantaneous" or "averaged", once the first sample says which
        self._energy_supported = True
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception as error:
            self._energy_supported = False
            self.source = f"NVML (energy counter not supported: {_one_line(error)})"

        self._energy = _EnergyTotals()
        self._samples: list[_GpuSample] = []
        self._window_count = 0
        self._throttled_windows = 0
        self._power_capped_windows = 0
        self._throttle_names: set[str] = set()
        self._benign_names: set[str] = set()
        # open window
        self._window_samples: list[_GpuSample] = []
        self._window_start_mj: float | None = None
        self._window_started: float | None = None
        self._sampler: threading.Thread | None = None
        self._stop_sampling = threading.Event()

    # -- reading NVML
    def _ask(self, name: str, *args: Any) -> Any:
        """``nvml.<name>(handle, *args)``, or ``None`` once it has failed (it is not asked again)."""
        if name in self._failed_queries:
            return None
        try:
            return getattr(self._nvml, name)(self._handle, *args)
        except Exception:
            self._failed_queries.add(name)
            return None

    def _read_energy_mj(self) -> float | None:
        if not self._energy_supported:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:
            return None

    def read_power_w(self) -> float | None:
        """The board's power now: NVML's instantaneous field where the driver has it, else its averaged reading."""
        if self.power_reading != "averaged":
            instant = self._instant_power_mw()
            if instant is not None:
                self.power_reading = "instantaneous"
                return instant / 1000.0
            self.power_reading = "averaged"
        power_mw = self._ask("nvmlDeviceGetPowerUsage")
        return None if power_mw is None else power_mw / 1000.0

    def _instant_power_mw(self) -> float | None:
        field_id = getattr(self._nvml, "NVML_FI_DEV_POWER_INSTANT", NVML_FI_DEV_POWER_INSTANT)
        values = self._ask("nvmlDeviceGetFieldValues", [field_id])
        if not values:
            return None
        value = values[0]
        if getattr(value, "nvmlReturn", 1) != 0:
            return None
        number = getattr(getattr(value, "value", None), "uiVal", None)
        return float(number) if isinstance(number, (int, float)) and number > 0 else None

    def _clock_event_mask(self) -> int | None:
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self._nvml, name) and name not in self._failed_queries:
                mask = self._ask(name)
                if mask is not None:
                    return int(mask)
        return None

    def _read_sample(self) -> _GpuSample:
        nvml = self._nvml
        sample = _GpuSample()
        sample.sm_clock_mhz = self._ask("nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_SM", 1))
        sample.memory_clock_mhz = self._ask("nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_MEM", 2))
        sample.power_w = self.read_power_w()
        sample.temperature_c = self._ask("nvmlDeviceGetTemperature", getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        rates = self._ask("nvmlDeviceGetUtilizationRates")
        if rates is not None:
            sample.gpu_utilization_pct = getattr(rates, "gpu", None)
            sample.memory_utilization_pct = getattr(rates, "memory", None)
        sample.clock_event_mask = self._clock_event_mask()
        processes = self._ask("nvmlDeviceGetComputeRunningProcesses")
        for process in processes or ():
            pid = getattr(process, "pid", None)
            if isinstance(pid, int):
                used = getattr(process, "usedGpuMemory", None)
                sample.process_memory_bytes[pid] = used if isinstance(used, int) else None
        return sample

    def _sample_until_stopped(self) -> None:
        while not self._stop_sampling.wait(self.sample_interval_s):
            try:
                self._window_samples.append(self._read_sample())
            except Exception:  # never let the thread die noisily
                return

    # -- the window protocol
    def start(self) -> None:
        try:
            self._end_sampler()
            self._window_samples = [self._read_sample()]
            self._stop_sampling = threading.Event()
            self._sampler = threading.Thread(target=self._sample_until_stopped,
                                             name="amp-suite-nvml-sampler", daemon=True)
            self._sampler.start()
            self._window_start_mj = self._read_energy_mj()
            self._window_started = time.perf_counter()
        except Exception:
            self._window_started = None

    def stop(self, samples: int) -> None:
        if self._window_started is None:
            return
        try:
            end_mj = self._read_energy_mj()
            seconds = time.perf_counter() - self._window_started
            self._end_sampler()
            window = self._window_samples + [self._read_sample()]
        except Exception:
            self._window_started = None
            return
        self._window_started = None
        if self._energy_supported:
            joules = None
            if self._window_start_mj is not None and end_mj is not None and end_mj >= self._window_start_mj:
                joules = (end_mj - self._window_start_mj) / 1000.0
            self._energy.add(joules, seconds, samples)
        self._window_count += 1
        self._samples.extend(window)
        mask = 0
        for sample in window:
            mask |= sample.clock_event_mask or 0
        names = clock_event_reason_names(self._nvml, mask)
        throttles = [n for n in names if n not in BENIGN_CLOCK_EVENT_REASONS | RECORDED_CLOCK_EVENT_REASONS]
        self._benign_names.update(n for n in names if n in BENIGN_CLOCK_EVENT_REASONS)
        if any(n in RECORDED_CLOCK_EVENT_REASONS for n in names):
            self._power_capped_windows += 1
        if throttles:
            self._throttled_windows += 1
            self._throttle_names.update(throttles)

    def _end_sampler(self) -> None:
        if self._sampler is not None:
            self._stop_sampling.set()
            self._sampler.join(timeout=max(1.0, 10 * self.sample_interval_s))
            self._sampler = None

    def close(self) -> None:
        try:
            self._end_sampler()
        except Exception:
            pass
        self._window_started = None

    # -- results
    def _ordered(self, names: set[str]) -> list[str]:
        return [name for _, _, name in CLOCK_EVENT_REASON_BITS if name in names]

    def _processes(self) -> tuple[int | None, list[int], list[int]]:
        """(this process's peak GPU memory in bytes, other pids, pids seen when this one was never listed)."""
        pids_seen: set[int] = set()
        own_bytes: int | None = None
        for sample in self._samples:
            for pid, used in sample.process_memory_bytes.items():
                pids_seen.add(pid)
                if pid in self._own_pids and used is not None:
                    own_bytes = used if own_bytes is None else max(own_bytes, used)
        if pids_seen & self._own_pids:
            return own_bytes, sorted(pids_seen - self._own_pids), []
        return None, [], sorted(pids_seen)

    def summary(self) -> dict[str, Any]:
        """The run's GPU figures over all timed windows.

        - ``energy_j``: GPU energy over the windows (J); ``energy_per_image_j``:
          that over the images trained in them (J/image); ``mean_power_w``: that
          over the windows' wall time (W). Absent when the energy counter is not
          supported; ``energy_windows_missing`` counts windows whose counter
          could not be read.
        - ``sm_clock_mhz_median`` / ``sm_clock_mhz_min``, ``memory_clock_mhz_median``
          (MHz), ``sampled_power_w_mean`` / ``sampled_power_w_max`` (W; NVML's
          instantaneous power where the driver has it, else its one-second
          average: ``power_reading`` says which), ``temperature_c_max`` (°C),
          ``gpu_utilization_pct_mean`` / ``memory_utilization_pct_mean`` (% of
          time a kernel / memory transfer was running): over every sample.
        - ``clock_event_reasons``: the non-benign clock event (throttle) reasons
          seen; ``clock_event_reasons_benign`` the benign ones
          (:data:`BENIGN_CLOCK_EVENT_REASONS`); ``throttled_windows``: how many
          windows saw a non-benign reason; ``power_capped_windows``: how many ran
          at the software power cap (recorded, not flagged).
        - ``process_gpu_memory_bytes``: the most GPU memory NVML saw this process
          use (bytes; what ``nvidia-smi`` shows, the framework's pool included);
          ``other_gpu_processes``: pids of other compute processes on the GPU.
          When this process's pid is never listed (a container's PID namespace),
          the pids seen are ``gpu_processes_unmatched`` instead.
        - ``timed_windows``, ``telemetry_samples``, ``telemetry_source``.
        """
        found: dict[str, Any] = {"telemetry_source": self.source, "timed_windows": self._window_count,
                                 "telemetry_samples": len(self._samples)}
        found.update(self._energy.figures())

        def values(attribute: str) -> list[float]:
            return [v for s in self._samples if (v := getattr(s, attribute)) is not None]

        sm = values("sm_clock_mhz")
        if sm:
            found["sm_clock_mhz_median"] = statistics.median(sm)
            found["sm_clock_mhz_min"] = min(sm)
        memory_clock = values("memory_clock_mhz")
        if memory_clock:
            found["memory_clock_mhz_median"] = statistics.median(memory_clock)
        power = values("power_w")
        if power:
            found["sampled_power_w_mean"] = statistics.fmean(power)
            found["sampled_power_w_max"] = max(power)
            found["power_reading"] = self.power_reading or "averaged"
            found.setdefault("mean_power_w", found["sampled_power_w_mean"])
        temperature = values("temperature_c")
        if temperature:
            found["temperature_c_max"] = max(temperature)
        for key in ("gpu_utilization_pct", "memory_utilization_pct"):
            if rates := values(key):
                found[f"{key}_mean"] = statistics.fmean(rates)
        if any(s.clock_event_mask is not None for s in self._samples):
            found["clock_event_reasons"] = self._ordered(self._throttle_names)
            found["clock_event_reasons_benign"] = self._ordered(self._benign_names)
            found["throttled_windows"] = self._throttled_windows
            found["power_capped_windows"] = self._power_capped_windows
        if self._samples and (any(s.process_memory_bytes for s in self._samples)
                              or "nvmlDeviceGetComputeRunningProcesses" not in self._failed_queries):
            own_bytes, others, unmatched = self._processes()
            if own_bytes is not None:
                found["process_gpu_memory_bytes"] = own_bytes
            found["other_gpu_processes"] = others
            if unmatched:
                found["gpu_processes_unmatched"] = unmatched
        return found

    def flags(self) -> list[str]:
        """Throttled clocks (a non-benign clock event reason) and other processes on the GPU, one line each."""
        found = []
        if self._throttle_names:
            found.append(f"GPU clocks throttled ({', '.join(self._ordered(self._throttle_names))}) "
                         f"during timed windows")
        own_bytes, others, unmatched = self._processes()
        if len(others) == 1:
            found.append(f"another process (pid {others[0]}) used the GPU during timed windows")
        elif others:
            found.append(f"other processes (pids {', '.join(map(str, others))}) used the GPU "
                         f"during timed windows")
        if len(unmatched) > 1:
            found.append(f"{len(unmatched)} processes (pids {', '.join(map(str, unmatched))}) used the GPU "
                         f"during timed windows and none is this process's pid (a PID namespace?): "
                         f"another process may have shared the GPU")
        return found


def nvml_machine_info(index: int, nvml: Any = None, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Settings of the GPU (CUDA device ``index``) that change timings, as NVML reports them.

    Keys, each present only when NVML answers: ``persistence_mode`` (bool),
    ``mig_mode`` (current, bool), ``ecc_mode`` (current, bool), ``compute_mode``
    (``default``, ``exclusive_thread``, ``prohibited``, ``exclusive_process``),
    ``applications_sm_clock_mhz``, ``applications_memory_clock_mhz`` (MHz),
    ``power_limit_w`` (enforced, W), ``default_power_limit_w`` (W),
    ``other_compute_processes`` (pids of the compute processes on the GPU now,
    this one left out). On failure
    to reach the GPU: ``{"error": "<one line>"}``.
    """
    try:
        nvml = _import_pynvml() if nvml is None else nvml
    except ImportError:
        return {"error": "nvidia-ml-py not installed"}
    try:
        nvml.nvmlInit()
        handle = nvml_handle(nvml, index, environ)
    except Exception as error:
        return {"error": f"NVML: {_one_line(error)}"}

    info: dict[str, Any] = {}

    def put(key: str, read: Any) -> None:
        try:
            info[key] = read()
        except Exception:
            pass

    def current(pair: Any) -> Any:
        return pair[0] if isinstance(pair, (list, tuple)) else pair

    compute_modes = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
    put("persistence_mode", lambda: bool(nvml.nvmlDeviceGetPersistenceMode(handle)))
    put("mig_mode", lambda: bool(current(nvml.nvmlDeviceGetMigMode(handle))))
    put("ecc_mode", lambda: bool(current(nvml.nvmlDeviceGetEccMode(handle))))
    put("compute_mode", lambda: compute_modes.get(int(mode := nvml.nvmlDeviceGetComputeMode(handle)), str(mode)))
    put("applications_sm_clock_mhz",
        lambda: int(nvml.nvmlDeviceGetApplicationsClock(handle, getattr(nvml, "NVML_CLOCK_SM", 1))))
    put("applications_memory_clock_mhz",
        lambda: int(nvml.nvmlDeviceGetApplicationsClock(handle, getattr(nvml, "NVML_CLOCK_MEM", 2))))
    put("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
    put("default_power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0)
    own = _own_pids()
    put("other_compute_processes",
        lambda: sorted({int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)} - own))
    return info


# --------------------------------------------------------------------------- RAPL


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
                                   f"({error.strerror or _one_line(error)})") from error
    domains, problems = [], []
    for zone in zones:
        try:
            name = (zone / "name").read_text().strip()
            if not name.startswith("package"):
                continue
            domain = RaplDomain(zone, name, int((zone / "max_energy_range_uj").read_text().strip()))
            domain.read_uj()
        except (OSError, ValueError) as error:
            problems.append(f"{zone.name}: {getattr(error, 'strerror', None) or _one_line(error)}")
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
        self._energy = _EnergyTotals()
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

    def stop(self, samples: int) -> None:
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


# --------------------------------------------------------------------------- choosing


def open_meter(device_kind: str, index: int | None = 0, *, nvml: Any = None,
               powercap_root: Path = DEFAULT_POWERCAP_ROOT,
               sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S) -> WindowMeter:
    """The meter for a run on ``device_kind`` (``"gpu"`` or ``"cpu"``); never raises.

    ``"gpu"``: :class:`NvmlMeter` for CUDA device ``index`` when ``pynvml``
    imports and NVML initialises, else a :class:`NullMeter` saying why.
    ``"cpu"``: :class:`RaplMeter` when a package energy counter is readable,
    else a :class:`NullMeter`. Anything else: a :class:`NullMeter`.
    """
    try:
        if device_kind == "gpu":
            return NvmlMeter(0 if index is None else index, nvml, sample_interval_s=sample_interval_s)
        if device_kind == "cpu":
            return RaplMeter(powercap_root)
        return NullMeter(f"no telemetry for device kind {device_kind!r}")
    except TelemetryUnavailable as error:
        return NullMeter(str(error))
    except Exception as error:
        return NullMeter(f"telemetry failed to open: {_one_line(error)}")
