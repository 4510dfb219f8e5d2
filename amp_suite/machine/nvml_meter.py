"""GPU energy and telemetry over the timed windows, through NVML: :class:`NvmlMeter`."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from amp_suite.machine.nvml import (
    CLOCK_EVENT_REASON_BITS,
    clock_event_reason_names,
    import_pynvml,
    nvml_handle,
    this_process_pids,
)
from amp_suite.machine.window_meter import EnergyTotals, TelemetryUnavailable, WindowMeter, one_line

DEFAULT_SAMPLE_INTERVAL_S = 0.05
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
    # taken at the window's start: its utilization describes NVML's last sample period, before the clock started
    at_start: bool = False


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
            self._nvml = import_pynvml() if nvml is None else nvml
        except ImportError as error:
            raise TelemetryUnavailable("nvidia-ml-py not installed") from error
        try:
            self._nvml.nvmlInit()
            self._handle = nvml_handle(self._nvml, index, environ)
        except Exception as error:
            raise TelemetryUnavailable(f"NVML: {one_line(error)}") from error
        self.index = index
        self.sample_interval_s = sample_interval_s
        self._own_pids = this_process_pids() if own_pids is None else set(own_pids)
        self._failed_queries: set[str] = set()
        self.source = "NVML"
        self.power_reading = ""  # "instantaneous" or "averaged", once the first sample says which
        self._energy_supported = True
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception as error:
            self._energy_supported = False
            self.source = f"NVML (energy counter not supported: {one_line(error)})"

        self._energy = EnergyTotals()
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
            first = self._read_sample()
            first.at_start = True
            self._window_samples = [first]
            self._stop_sampling = threading.Event()
            self._sampler = threading.Thread(target=self._sample_until_stopped,
                                             name="amp-suite-nvml-sampler", daemon=True)
            self._sampler.start()
            self._window_start_mj = self._read_energy_mj()
            self._window_started = time.perf_counter()
        except Exception:
            self._window_started = None

    def stop(self, samples: float) -> None:
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
          time a kernel / memory transfer was running): over every sample but
          those taken as a window started (NVML's utilization is over its past
          sample period, which then lay before the clock: staging, an idle GPU).
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
        for key in ("gpu_utilization_pct", "memory_utilization_pct"):  # over the past period: not the start's
            if rates := [v for s in self._samples if not s.at_start and (v := getattr(s, key)) is not None]:
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

