"""Per-device-kind defaults, staged inputs kept out of peak memory, and the flags a report shows."""

import numpy as np
import pytest

from amp_suite.cell.worker import device_index, memory_without_inputs, staged_bytes
from amp_suite.config.catalog import for_device_kind, load_config
from amp_suite.errors import UsageError
from amp_suite.machine import devices
from amp_suite.records import Batch, CellResult
from amp_suite.report.normalize import render_markdown, summary_frame
from amp_suite.sweep.cells import plan_cells
from amp_suite.sweep.plan import SweepRequest
from amp_suite.sweep.resolve import sweep_device_kind


def _machine(monkeypatch, gpus: int) -> None:
    inventory = devices.NvidiaInventory(
        gpus=tuple(devices.NvidiaGpu(index=i, name="NVIDIA H100 80GB HBM3") for i in range(gpus)))
    monkeypatch.setattr(devices, "detect_nvidia", lambda *a, **k: inventory)


def test_a_cpu_sweep_has_no_tf32_column_unless_asked(monkeypatch):
    _machine(monkeypatch, 0)
    config = load_config(None)
    kind = sweep_device_kind(config, SweepRequest())
    assert kind == "cpu"
    assert "tf32" not in for_device_kind(config, kind).settings.precisions
    assert "tf32" in config.settings.precisions  # [defaults] itself keeps every precision
    # a flag still wins: with_overrides comes after the device kind's table
    asked = SweepRequest(overrides={"device": "cpu"})
    assert sweep_device_kind(config, asked) == "cpu"


def test_a_gpu_sweep_times_long_settled_windows(monkeypatch):
    _machine(monkeypatch, 1)
    config = load_config(None)
    assert sweep_device_kind(config, SweepRequest()) == "gpu"
    assert sweep_device_kind(config, SweepRequest(overrides={"device": "cpu"})) == "cpu"
    gpu = for_device_kind(config, "gpu")
    cells = plan_cells(gpu, gpu.settings)
    run = cells[0].run
    assert "tf32" in gpu.settings.precisions
    assert run.steps == 1500 and run.settle_warmup and run.window_seconds == 1.0
    assert run.min_timed_steps == 300 and run.min_timed_seconds == 3.0 and run.extend_timing
    cpu_run = plan_cells(for_device_kind(config, "cpu"), for_device_kind(config, "cpu").settings)[0].run
    assert cpu_run.steps == 20 and not cpu_run.settle_warmup and cpu_run.window_seconds == 0


def test_a_device_kind_table_cannot_set_the_device(tmp_path):
    path = tmp_path / "benchmarks.toml"
    path.write_text('[defaults]\nsteps = 10\n[defaults.on_gpu]\ndevice = "cpu"\n')
    with pytest.raises(UsageError, match=r"\[defaults.on_gpu\]: device cannot depend"):
        load_config(path)
    path.write_text('[defaults]\nsteps = 10\n[defaults.on_cpu]\nprecisions = ["fp4"]\n')
    with pytest.raises(UsageError, match="unknown precision 'fp4'"):
        load_config(path)


def _batch(rows: int, masks: bool = False) -> Batch:
    return Batch(np.zeros((rows, 28, 28, 1), np.float32), np.zeros(rows, np.int32),
                 {"drop": np.ones((rows, 10), np.float32)} if masks else {})


def test_staged_bytes_count_images_labels_and_masks_per_device():
    one = 128 * 28 * 28 * 4 + 128 * 4
    assert staged_bytes([_batch(128)] * 3) == 3 * one
    assert staged_bytes([_batch(128, masks=True)], devices=2) == (one + 128 * 10 * 4) // 2


def test_an_allocator_peak_loses_the_staged_inputs_and_keeps_them_beside():
    # a fake allocator whose peak holds 300 MiB of training and 256 MiB of staged batches
    staged = 256 * 2**20
    figures = memory_without_inputs({"device_peak_memory_bytes": 300 * 2**20 + staged}, staged)
    assert figures == {"staged_input_bytes": staged, "device_peak_memory_with_inputs_bytes": 300 * 2**20 + staged,
                       "device_peak_memory_bytes": 300 * 2**20}
    # JAX's figure (XLA's analysis of the step less its batch) has no inputs in it
    jax = memory_without_inputs({"device_peak_memory_bytes": 300 * 2**20,
                                 "device_peak_memory_excludes_inputs": True}, staged)
    assert jax == {"staged_input_bytes": staged}
    assert memory_without_inputs({"peak_rss_bytes": 10}, staged) == {}  # a CPU: RSS, nothing to take off


def test_the_telemetry_device_follows_local_rank():
    assert device_index({}) == 0
    assert device_index({"LOCAL_RANK": "3"}) == 3


def _cell(precision: str, throughput: float, flags=(), energy=None) -> CellResult:
    metrics = {"throughput": throughput, "measurement_flags": list(flags), "final_loss": 0.1,
               "device_peak_memory_bytes": 100 * 2**20}
    if energy is not None:
        metrics["energy_per_image_j"] = energy
    return CellResult(key=f"torch/w/{precision}/r0", framework="torch", workload="w", precision=precision,
                      repeat=0, status="ok", metrics=metrics,
                      device={"kind": "gpu", "name": "NVIDIA H100 80GB HBM3"}, config={"dataset": "mnist"})


def test_amp_is_reported_over_tf32_too_with_energy_and_flags():
    results = [_cell("fp32", 1000.0, energy=0.004), _cell("tf32", 2500.0, energy=0.002),
               _cell("amp_bf16", 5000.0, flags=["timed region too short: 96 steps in 0.027 s"], energy=0.001)]
    summary = summary_frame(results).set_index("precision")
    assert summary.loc["amp_bf16", "speedup"] == pytest.approx(5.0)
    assert summary.loc["amp_bf16", "speedup_over_tf32"] == pytest.approx(2.0)
    assert summary.loc["amp_bf16", "energy_ratio"] == pytest.approx(0.25)
    text = render_markdown(results, {})
    assert "5,000 ⚑ (5.00x; 2.00x over tf32)" in text
    assert "2,500 (2.50x)" in text  # tf32 itself: only its speed-up over fp32
    assert "## Energy per training image, mJ (ratio to fp32)" in text and "1 (0.25x)" in text
    assert "## Measurement flags" in text and "w / torch / amp_bf16 / repeat 0: timed region too short" in text
    # without a tf32 cell, neither the heading nor a cell speaks of tf32
    plain = render_markdown([results[0], results[2]], {})
    assert "over tf32" not in plain


def _inline_cell(tiny_config, tmp_path, name, **settings):
    import json

    from amp_suite.api import run

    frame = run(config=tiny_config, plugins=["fakefw"], inline=True, precisions=["fp32"], steps=6, warmup=1,
                out=str(tmp_path / name), dataset="synthetic", **settings)
    assert list(frame["status"]) == ["ok"], frame["error"].tolist()
    return json.loads((tmp_path / name / "results.jsonl").read_text().splitlines()[-1])["metrics"]


def test_a_timing_extension_times_further_training_and_leaves_accuracy_alone(tiny_config, tmp_path, clean_fake_env):
    # the tiny split holds few batches an epoch: 6 configured steps time 2 of them
    plain = _inline_cell(tiny_config, tmp_path, "plain", min_timed_steps=200, min_timed_seconds=0.0)
    assert plain["timed_steps"] < 200 and plain["measurement_flags"]
    assert plain["timing_source"] == "the configured training's windows"
    extended = _inline_cell(tiny_config, tmp_path, "extended", min_timed_steps=200, min_timed_seconds=0.0,
                            extend_timing=True, window_steps=64)
    assert extended["timed_steps"] >= 200
    # (the fake step takes microseconds: its windows may be flagged noisy, never too short)
    assert not [flag for flag in extended["measurement_flags"] if "too short" in flag]
    assert extended["timing_source"].startswith("timing extension:")
    # windows span epoch boundaries: 64-step windows on an epoch of far fewer batches
    assert extended["timed_steps"] // extended["timed_windows"] == 64
    assert extended["configured_timed_steps"] == plain["timed_steps"]
    # what the user compares for accuracy is the configured training's, untouched by the extension
    for key in ("val_accuracy", "final_loss", "step_losses", "first_step_loss"):
        assert extended[key] == plain[key], key


def test_energy_is_dropped_where_nvml_counter_steps_are_coarser_than_the_windows():
    from amp_suite.cell.worker import energy_figures

    summary = {"telemetry_source": "NVML", "energy_j": 24.8, "energy_per_image_j": 0.009, "mean_power_w": 2000.0,
               "sm_clock_mhz_median": 1980}
    # 21 steps in 12 ms: the H100's counter jumped 24.8 J in one of those windows
    short = energy_figures(summary, {"timed_windows": 1, "window_time_s": 0.012})
    assert "energy_j" not in short and "energy_per_image_j" not in short and short["sm_clock_mhz_median"] == 1980
    assert "0.012 s on average" in short["energy_note"]
    long = energy_figures(summary, {"timed_windows": 3, "window_time_s": 3.2})
    assert long["energy_per_image_j"] == 0.009 and "energy_note" not in long
    # RAPL counters tick every millisecond or so: kept over short windows
    rapl = energy_figures({**summary, "telemetry_source": "RAPL (package-0)"}, {"timed_windows": 1,
                                                                               "window_time_s": 0.012})
    assert rapl["energy_j"] == 24.8


def test_a_one_device_cell_sees_one_gpu():
    from amp_suite.records import RunSpec
    from amp_suite.sweep.runner import one_gpu_visible

    one = RunSpec("jax", "w", "fp32")
    assert one_gpu_visible(one, {}) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert one_gpu_visible(one, {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"CUDA_VISIBLE_DEVICES": "2"}
    assert one_gpu_visible(one, {"CUDA_VISIBLE_DEVICES": "GPU-1a2b, GPU-3c4d"}) == {"CUDA_VISIBLE_DEVICES": "GPU-1a2b"}
    assert one_gpu_visible(one, {"CUDA_VISIBLE_DEVICES": ""}) == {}  # the user hid every GPU
    assert one_gpu_visible(RunSpec("jax", "w", "fp32", devices=2), {}) == {}
    assert one_gpu_visible(RunSpec("jax", "w", "fp32", device="cpu"), {}) == {}


def test_a_gpu_cell_numbers_gpus_in_pci_order_as_nvml_does():
    from amp_suite.records import RunSpec
    from amp_suite.sweep.runner import gpu_numbering

    assert gpu_numbering(RunSpec("jax", "w", "fp32")) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert gpu_numbering(RunSpec("jax", "w", "fp32", devices=2)) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert gpu_numbering(RunSpec("jax", "w", "fp32", device="cpu")) == {}


def test_a_cell_of_two_gpus_meters_one_and_counts_its_share_of_the_images(tiny_config, monkeypatch, clean_fake_env):
    """A GPU review: one GPU's energy was divided by the images of every GPU of a data-parallel cell, so a cell of
    N GPUs read about N times too little energy per image.  The meter now gets its GPU's share of each window's
    images, and the cell says what its energy covers."""
    import dataclasses

    from amp_suite import hookimpl
    from amp_suite.cell import protocol
    from amp_suite.cell.worker import execute
    from amp_suite.config.catalog import load_config
    from amp_suite.machine.telemetry import energy_scope, metered_share
    from amp_suite.machine.window_meter import WindowMeter
    from amp_suite.plugins.host import PluginHost
    from amp_suite.records import DeviceInfo, RunSpec

    class TwoGpus:
        @hookimpl(tryfirst=True)
        def select_device(self, run):
            return DeviceInfo(kind="gpu", platform="cuda", name="fake gpu", count=run.devices)

    class Meter(WindowMeter):
        source = "NVML (GPU 0)"

        def __init__(self):
            self.images: list[float] = []

        def stop(self, samples):
            self.images.append(samples)

        def summary(self):
            return {"telemetry_source": self.source, "energy_j": 6.0, "energy_per_image_j": 6.0 / sum(self.images)}

    meters: list[Meter] = []
    monkeypatch.setattr(protocol.telemetry, "open_meter", lambda kind, index: meters.append(Meter()) or meters[-1])
    monkeypatch.setattr("amp_suite.cell.figures.ENERGY_MIN_MEAN_WINDOW_S", 0.0)
    workload = load_config(tiny_config).workloads["tiny"]
    host = PluginHost(autoload=False, extra_modules=("fakefw",), framework="fake")
    host.register(TwoGpus(), name="two_gpus")
    infos = host.frameworks()  # the fake declares a data-parallel engine: its one process trains both shares
    monkeypatch.setattr(host, "frameworks", lambda: {**infos, "fake": dataclasses.replace(infos["fake"],
                                                                                           launcher="process")})
    run = RunSpec(framework="fake", workload="tiny", precision="fp32", steps=6, warmup=1, batch_size=8, devices=2)
    result = execute(run, workload, host)
    assert result.status == "ok", result.error
    (meter,) = meters
    assert sum(meter.images) * 2 == result.metrics["timed_samples"]  # its GPU's half of every window's images
    assert result.metrics["energy_scope"] == energy_scope("gpu", 2) and "1/2 of the images" in energy_scope("gpu", 2)
    assert (metered_share("gpu", 8, 2), metered_share("cpu", 8, 2), metered_share("cpu", 4, 1)) == (8, 2, 1)
    assert energy_scope("gpu", 1) == "" and "one machine" in energy_scope("cpu", 2)
