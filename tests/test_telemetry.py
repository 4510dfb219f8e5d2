"""amp_suite.machine.telemetry with a fake pynvml module and a fake powercap tree: no GPU, no root needed."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from amp_suite.machine import telemetry
from amp_suite.machine.nvml_meter import NvmlMeter
from amp_suite.machine.rapl import RaplMeter
from amp_suite.machine.telemetry import open_meter
from amp_suite.machine.window_meter import NullMeter, WindowMeter

OWN_PID = 1000
OTHER_PID = 4242


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """Just enough of pynvml: an energy counter that advances 50 J per window, and scripted readings.

    ``reasons`` is the clock event mask reported during each window (by window number);
    ``others`` are pids of other processes listed during each window.
    """

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwThermalSlowdown = 0x40

    def __init__(self, *, energy: bool = True, reasons: dict[int, int] | None = None,
                 others: dict[int, list[int]] | None = None, init_error: str | None = None) -> None:
        self.energy = energy
        self.reasons = reasons or {}
        self.others = others or {}
        self.init_error = init_error
        self.window = 0  # advanced by the test between windows
        self.energy_mj = 1_000_000
        self.handles_asked: list[int] = []

    def nvmlInit(self) -> None:
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.handles_asked.append(index)
        return f"gpu{index}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        if not self.energy:
            raise FakeNVMLError("Not Supported")
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        return {1: 1980 - 100 * self.window, 2: 2619}[kind]

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 300_000  # mW

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 60 + self.window

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return self.reasons.get(self.window, 0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[types.SimpleNamespace]:
        listed = [types.SimpleNamespace(pid=OWN_PID, usedGpuMemory=(1 + self.window) * 2**30)]
        return listed + [types.SimpleNamespace(pid=p, usedGpuMemory=None) for p in self.others.get(self.window, [])]


def run_windows(meter: WindowMeter, fake: FakeNvml, windows: int, images: int) -> None:
    for window in range(windows):
        fake.window = window
        meter.start()
        fake.energy_mj += 50_000  # 50 J in this window
        meter.stop(images)


def make_meter(fake: FakeNvml) -> NvmlMeter:
    return NvmlMeter(0, fake, sample_interval_s=0.001, environ={}, own_pids={OWN_PID})


def test_energy_per_image_and_throttle_and_other_process_flags() -> None:
    fake = FakeNvml(reasons={0: 0x1, 1: 0x4 | 0x1}, others={2: [OTHER_PID]})
    meter = make_meter(fake)
    run_windows(meter, fake, windows=3, images=100)
    summary = meter.summary()

    assert meter.source == "NVML" and summary["telemetry_source"] == "NVML"
    assert summary["energy_j"] == pytest.approx(150.0)
    assert summary["energy_per_image_j"] == pytest.approx(0.5)
    assert summary["mean_power_w"] > 0
    assert summary["timed_windows"] == 3
    assert summary["telemetry_samples"] >= 6  # one at start and one at stop of each window
    assert summary["sm_clock_mhz_min"] == 1780
    assert summary["memory_clock_mhz_median"] == 2619
    assert summary["temperature_c_max"] == 62
    assert summary["sampled_power_w_max"] == pytest.approx(300.0)
    assert summary["gpu_utilization_pct_mean"] == pytest.approx(90.0)
    # the software power cap is how a busy GPU runs: recorded, not a throttle that flags the timing
    assert summary["clock_event_reasons"] == [] and summary["power_capped_windows"] == 1
    assert summary["clock_event_reasons_benign"] == ["gpu idle"]  # idle is benign, listed apart
    assert summary["throttled_windows"] == 0
    assert summary["process_gpu_memory_bytes"] == 3 * 2**30
    assert summary["other_gpu_processes"] == [OTHER_PID]
    assert summary["power_reading"] == "averaged"  # this fake has no instantaneous field
    assert meter.flags() == [f"another process (pid {OTHER_PID}) used the GPU during timed windows"]


class FakeNvmlWithInstantPower(FakeNvml):
    """A driver with NVML's instantaneous power field (NVML_FI_DEV_POWER_INSTANT)."""

    NVML_FI_DEV_POWER_INSTANT = 186

    def nvmlDeviceGetFieldValues(self, handle: str, fields: list[int]) -> list[types.SimpleNamespace]:
        assert fields == [186]
        return [types.SimpleNamespace(fieldId=186, nvmlReturn=0, value=types.SimpleNamespace(uiVal=412_000))]


def test_power_is_read_instantaneously_where_the_driver_has_it() -> None:
    fake = FakeNvmlWithInstantPower(reasons={0: 0x40})
    meter = make_meter(fake)
    run_windows(meter, fake, windows=1, images=10)
    summary = meter.summary()
    assert summary["power_reading"] == "instantaneous"
    assert summary["sampled_power_w_max"] == pytest.approx(412.0)  # not the averaged 300 W
    assert summary["throttled_windows"] == 1  # a thermal slowdown still flags
    assert meter.flags() == ["GPU clocks throttled (hw thermal slowdown) during timed windows"]


def test_a_clean_run_has_no_flags() -> None:
    fake = FakeNvml(reasons={0: 0x1})
    meter = make_meter(fake)
    run_windows(meter, fake, windows=2, images=10)
    assert meter.flags() == []
    assert meter.summary()["other_gpu_processes"] == []


def test_sampler_thread_samples_while_the_window_is_open() -> None:
    import time

    fake = FakeNvml()
    meter = make_meter(fake)
    meter.start()
    time.sleep(0.05)
    meter.stop(1)
    assert meter.summary()["telemetry_samples"] > 5  # start + stop alone would be 2
    assert meter._sampler is None


def test_unsupported_energy_counter_leaves_energy_out_and_says_so() -> None:
    fake = FakeNvml(energy=False)
    meter = make_meter(fake)
    run_windows(meter, fake, windows=2, images=100)
    summary = meter.summary()
    assert "energy_j" not in summary and "energy_per_image_j" not in summary
    assert summary["telemetry_source"] == "NVML (energy counter not supported: Not Supported)"
    assert summary["mean_power_w"] == pytest.approx(300.0)  # from the power samples instead
    assert summary["sm_clock_mhz_median"] > 0


def test_failing_queries_never_fail_the_run() -> None:
    fake = FakeNvml()

    def broken(*args: object) -> None:
        raise FakeNVMLError("GPU is lost")

    for name in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
                 "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetComputeRunningProcesses"):
        setattr(fake, name, broken)
    meter = make_meter(fake)
    run_windows(meter, fake, windows=1, images=4)
    fake.nvmlDeviceGetTotalEnergyConsumption = broken  # the counter dies mid-run
    run_windows(meter, fake, windows=1, images=4)
    summary = meter.summary()
    assert summary["energy_j"] == pytest.approx(50.0)
    assert summary["energy_windows_missing"] == 1
    assert "sm_clock_mhz_median" not in summary and "clock_event_reasons" not in summary
    assert "other_gpu_processes" not in summary
    assert meter.flags() == []


def test_older_pynvml_throttle_api_is_the_fallback() -> None:
    fake = FakeNvml()
    fake.nvmlDeviceGetCurrentClocksEventReasons = None  # present but unusable, as in an older driver
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x40 | 0x10
    meter = make_meter(fake)
    run_windows(meter, fake, windows=1, images=1)
    assert meter.flags() == ["GPU clocks throttled (hw thermal slowdown) during timed windows"]
    assert meter.summary()["clock_event_reasons_benign"] == ["sync boost"]


def test_cuda_visible_devices_maps_the_cuda_index_to_the_nvml_index() -> None:
    fake = FakeNvml()
    NvmlMeter(1, fake, environ={"CUDA_VISIBLE_DEVICES": "5,3"}, own_pids={OWN_PID})
    assert fake.handles_asked == [3]


def test_unmatched_pids_in_a_pid_namespace() -> None:
    fake = FakeNvml(others={0: [OTHER_PID]})
    meter = NvmlMeter(0, fake, sample_interval_s=0.001, environ={}, own_pids={7})
    run_windows(meter, fake, windows=1, images=1)
    summary = meter.summary()
    assert "process_gpu_memory_bytes" not in summary
    assert summary["gpu_processes_unmatched"] == [OWN_PID, OTHER_PID]
    assert len(meter.flags()) == 1 and "PID namespace" in meter.flags()[0]


def test_open_meter_for_gpu() -> None:
    assert isinstance(open_meter("gpu", 0, nvml=FakeNvml()), NvmlMeter)
    failed = open_meter("gpu", 0, nvml=FakeNvml(init_error="Driver Not Loaded"))
    assert isinstance(failed, NullMeter)
    assert failed.summary() == {"telemetry_source": "none: NVML: Driver Not Loaded"}
    assert failed.flags() == []


def test_open_meter_without_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    meter = open_meter("gpu", 0)
    assert meter.summary() == {"telemetry_source": "none: nvidia-ml-py not installed"}


def test_machine_info() -> None:
    fake = FakeNvml()
    fake.nvmlDeviceGetPersistenceMode = lambda h: 1
    fake.nvmlDeviceGetMigMode = lambda h: [0, 1]
    fake.nvmlDeviceGetComputeMode = lambda h: 3
    fake.nvmlDeviceGetApplicationsClock = lambda h, kind: {1: 1755, 2: 2619}[kind]
    fake.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    fake.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: 700_000
    fake.others = {0: [OTHER_PID]}
    info = telemetry.nvml_machine_info(0, fake, environ={})
    assert info["persistence_mode"] is True and info["mig_mode"] is False
    assert info["compute_mode"] == "exclusive_process"
    assert info["applications_sm_clock_mhz"] == 1755 and info["applications_memory_clock_mhz"] == 2619
    assert info["power_limit_w"] == pytest.approx(700.0)
    assert "ecc_mode" not in info  # the fake has no ECC query: left out, not an error
    assert OTHER_PID in info["other_compute_processes"]
    assert telemetry.nvml_machine_info(0, FakeNvml(init_error="No GPU")) == {"error": "NVML: No GPU"}


# --------------------------------------------------------------------------- RAPL


def make_powercap(root: Path, packages: dict[int, tuple[int, int]]) -> Path:
    """A powercap tree: intel-rapl:N -> (energy_uj, max_energy_range_uj), plus a core sub-domain and psys."""
    for number, (energy_uj, max_range) in packages.items():
        zone = root / f"intel-rapl:{number}"
        zone.mkdir(parents=True)
        (zone / "name").write_text(f"package-{number}\n")
        (zone / "energy_uj").write_text(f"{energy_uj}\n")
        (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
        core = root / f"intel-rapl:{number}:0"
        core.mkdir()
        (core / "name").write_text("core\n")
        (core / "energy_uj").write_text("5\n")
        (core / "max_energy_range_uj").write_text(f"{max_range}\n")
    psys = root / "intel-rapl:9"
    psys.mkdir(parents=True)
    (psys / "name").write_text("psys\n")
    (psys / "energy_uj").write_text("0\n")
    (psys / "max_energy_range_uj").write_text("100\n")
    return root


def test_rapl_sums_packages_and_handles_wraparound(tmp_path: Path) -> None:
    root = make_powercap(tmp_path / "powercap", {0: (999_000_000, 1_000_000_000), 1: (10_000_000, 1_000_000_000)})
    meter = RaplMeter(root)
    assert meter.source == "RAPL (package-0, package-1)"
    meter.start()
    (root / "intel-rapl:0" / "energy_uj").write_text("2000000\n")  # wrapped: +3 J
    (root / "intel-rapl:1" / "energy_uj").write_text("17000000\n")  # +7 J
    meter.stop(20)
    summary = meter.summary()
    assert summary["energy_j"] == pytest.approx(10.0)
    assert summary["energy_per_image_j"] == pytest.approx(0.5)
    assert summary["mean_power_w"] > 0
    assert summary["telemetry_source"] == "RAPL (package-0, package-1)"
    assert meter.flags() == []


def test_unreadable_rapl_is_a_null_meter(tmp_path: Path) -> None:
    missing = open_meter("cpu", None, powercap_root=tmp_path / "nothing")
    assert isinstance(missing, NullMeter)
    assert missing.source.startswith("none: no readable RAPL energy counter under")
    root = make_powercap(tmp_path / "powercap", {0: (1, 100)})
    (root / "intel-rapl:0" / "energy_uj").write_text("not a number")
    unreadable = open_meter("cpu", None, powercap_root=root)
    assert isinstance(unreadable, NullMeter) and "intel-rapl:0" in unreadable.source
    assert isinstance(open_meter("cpu", None, powercap_root=make_powercap(tmp_path / "ok", {0: (1, 100)})),
                      RaplMeter)


def test_open_meter_on_this_machine_never_raises() -> None:
    for kind in ("cpu", "gpu", "tpu"):
        meter = open_meter(kind, 0)
        meter.start()
        meter.stop(1)
        assert isinstance(meter.summary()["telemetry_source"], str)
        assert isinstance(meter.flags(), list)


def test_no_framework_is_imported() -> None:
    code = ("import sys, amp_suite.machine.telemetry, amp_suite.machine.loaded_libraries; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_gpu_utilization_leaves_out_the_sample_taken_as_a_window_starts() -> None:
    """A GPU review: NVML's utilization is over its past sample period, which at a window's start lay before the
    clock (staging, an idle GPU), so counting it pulled a busy GPU's figure down toward the launch-bound mark."""

    class IdleBeforeEachWindow(FakeNvml):
        def __init__(self) -> None:
            super().__init__()
            self.read_in: set[int] = set()

        def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
            first = self.window not in self.read_in  # the start's reading: the GPU idled while batches staged
            self.read_in.add(self.window)
            return types.SimpleNamespace(gpu=0 if first else 90, memory=0 if first else 40)

    fake = IdleBeforeEachWindow()
    meter = make_meter(fake)
    run_windows(meter, fake, windows=3, images=100)
    summary = meter.summary()
    assert summary["gpu_utilization_pct_mean"] == pytest.approx(90.0)
    assert summary["memory_utilization_pct_mean"] == pytest.approx(40.0)
    assert summary["telemetry_samples"] >= 6  # the start samples still count for clocks, power and throttling
