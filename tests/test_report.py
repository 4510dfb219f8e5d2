"""The report normalizes each precision against the same framework's fp32."""

from __future__ import annotations

import math

import pytest

from amp_suite.records import CellResult
from amp_suite.report.normalize import comparison_tables, render_markdown, results_frame, summary_frame

MIB = 1024 * 1024


def cell(framework, precision, *, repeat=0, status="ok", throughput=None, memory_mib=None, accuracy=None,
         device_memory_mib=None, loss=1.0, error="", device=("cpu", "Test CPU"),
         environment=None) -> CellResult:
    metrics = {}
    if status == "ok":
        metrics = {"throughput": throughput, "peak_rss_bytes": memory_mib * MIB, "val_accuracy": accuracy,
                   "final_loss": loss, "epoch_times_s": [1.0]}
        if device_memory_mib is not None:
            metrics["device_peak_memory_bytes"] = device_memory_mib * MIB
    return CellResult(key=f"{framework}/w/{precision}/r{repeat}", framework=framework, workload="w",
                      precision=precision, repeat=repeat, status=status, error=error, metrics=metrics,
                      config={"dataset": "mnist", "batch_size": 8}, environment=environment or {},
                      device={"kind": device[0], "name": device[1]} if device else {})


RESULTS = [
    cell("torch", "fp32", throughput=100.0, memory_mib=400, accuracy=0.90),
    cell("torch", "amp_bf16", throughput=250.0, memory_mib=300, accuracy=0.89),
    cell("torch", "amp_bf16", repeat=1, throughput=150.0, memory_mib=300, accuracy=0.91),
    cell("torch", "amp_bf16", repeat=2, throughput=200.0, memory_mib=300, accuracy=0.90),
    cell("torch", "amp_fp16", status="oom", error="MemoryError: boom", device=None),
    cell("jax", "fp32", throughput=50.0, memory_mib=100, accuracy=0.5, device_memory_mib=80),
    cell("jax", "amp_bf16", throughput=75.0, memory_mib=100, accuracy=0.55, device_memory_mib=40),
]


def _row(summary, framework, precision):
    return summary[(summary.framework == framework) & (summary.precision == precision)].iloc[0]


def test_speedup_memory_ratio_and_accuracy_delta_use_the_same_frameworks_fp32():
    summary = summary_frame(RESULTS)
    bf16 = _row(summary, "torch", "amp_bf16")
    assert bf16.throughput == 200.0  # median of three repeats
    assert bf16.speedup == pytest.approx(2.0)
    assert bf16.memory_ratio == pytest.approx(0.75)
    assert bf16.accuracy_delta == pytest.approx(0.0)
    assert bf16.ok_repeats == 3
    jax_bf16 = _row(summary, "jax", "amp_bf16")
    assert jax_bf16.speedup == pytest.approx(1.5)  # against jax's fp32, not torch's
    assert jax_bf16.memory_ratio == pytest.approx(0.5)  # the device allocator figure wins over RSS
    assert jax_bf16.accuracy_delta == pytest.approx(0.05)


def test_failed_cells_are_kept_with_their_status():
    summary = summary_frame(RESULTS)
    fp16 = _row(summary, "torch", "amp_fp16")
    assert fp16.status == "oom" and math.isnan(fp16.speedup)
    table = comparison_tables(summary)["Throughput, images/s (speed-up over fp32)"]
    torch_row = table[table.framework == "torch"].iloc[0]
    assert torch_row["amp_fp16"] == "oom at batch 8"  # out of memory names the batch it tried
    assert torch_row["amp_bf16"] == "200 (2.00x)"
    assert list(table.columns) == ["workload", "framework", "device", "fp32", "amp_fp16", "amp_bf16"]
    assert torch_row["device"] == "cpu"  # the oom cell, which reached no device, joins its row
    assert len(results_frame(RESULTS)) == len(RESULTS)


def test_markdown_has_environment_tables_and_failures():
    env = {"amp_suite_version": "9.9", "git_commit": "abc123", "python": "3.11", "platform": "Linux",
           "cpu_model": "Test CPU", "cpu_count": 2, "cpu_flags": ["avx512_bf16"], "gpus": [],
           "packages": {"torch": "2.13.0"}, "date": "2026-01-01"}
    text = render_markdown(RESULTS, env)
    assert "amp-suite 9.9, commit abc123" in text
    assert "Test CPU" in text and "avx512_bf16" in text and "torch 2.13.0" in text
    assert "| w          | torch       | cpu      | 100    | oom at batch 8 | 200 (2.00x)" in text
    assert "w / torch / amp_fp16 / repeat 0: **oom** — MemoryError: boom" in text
    assert "90.00%" in text and "(+5.00 pt)" in text


def test_missing_baseline_gives_no_ratio():
    summary = summary_frame([cell("torch", "amp_bf16", throughput=10.0, memory_mib=1, accuracy=0.1)])
    assert math.isnan(summary.iloc[0].speedup)


def test_scaling_table_compares_each_device_count_with_one_device():
    def scaled(framework, precision, devices, throughput, status="ok"):
        result = cell(framework, precision, throughput=throughput, memory_mib=100, accuracy=0.5, status=status)
        result.config["devices"] = devices
        return result

    results = [scaled("torch", "fp32", 1, 100.0), scaled("torch", "fp32", 2, 150.0),
               scaled("torch", "amp_bf16", 1, 200.0), scaled("torch", "amp_bf16", 2, 0, status="failed"),
               scaled("jax", "fp32", 1, 80.0), scaled("jax", "fp32", 2, 160.0)]
    from amp_suite.report.normalize import scaling_table

    summary = summary_frame(results)
    two = summary[(summary.framework == "torch") & (summary.precision == "fp32") & (summary.devices == 2)].iloc[0]
    assert two["scaling_speedup"] == pytest.approx(1.5) and two["scaling_efficiency"] == pytest.approx(0.75)
    table = scaling_table(summary)
    assert list(table.columns) == ["workload", "framework", "device", "precision", "1 device", "2 devices"]
    rows = {(r["framework"], r["precision"]): r for r in table.to_dict("records")}
    assert rows[("torch", "fp32")]["2 devices"] == "150 (1.50x, eff 75%)"
    assert rows[("jax", "fp32")]["2 devices"] == "160 (2.00x, eff 100%)"
    assert rows[("torch", "amp_bf16")]["2 devices"] == "failed"
    # fp32 ratios compare cells on the same device count
    bf16 = summary[(summary.precision == "amp_bf16") & (summary.devices == 1)].iloc[0]
    assert bf16["speedup"] == pytest.approx(2.0)
    markdown = render_markdown(results, {})
    assert "## Scaling over devices" in markdown and "| devices" in markdown


def test_one_device_sweeps_have_no_devices_column_and_no_scaling_table():
    tables = comparison_tables(summary_frame(RESULTS))
    assert all("devices" not in table.columns for table in tables.values())
    assert "Scaling" not in render_markdown(RESULTS, {})


def test_cpu_and_gpu_runs_of_one_framework_are_separate_rows_each_with_its_own_baseline():
    a100 = ("gpu", "NVIDIA A100")
    results = [cell("torch", "fp32", throughput=100.0, memory_mib=400, accuracy=0.9),
               cell("torch", "amp_bf16", throughput=120.0, memory_mib=400, accuracy=0.9),
               cell("torch", "fp32", throughput=1000.0, memory_mib=400, accuracy=0.9, device=a100),
               cell("torch", "amp_bf16", throughput=3000.0, memory_mib=400, accuracy=0.9, device=a100),
               cell("keras", "amp_bf16", status="unavailable", device=None,
                    error="DeviceUnavailableError: Keras (TF) would fall back to the CPU")]
    table = comparison_tables(summary_frame(results))["Throughput, images/s (speed-up over fp32)"]
    rows = {(r.framework, r.device): r for r in table.itertuples()}
    assert rows[("torch", "cpu")].amp_bf16 == "120 (1.20x)"
    assert rows[("torch", "gpu (NVIDIA A100)")].amp_bf16 == "3,000 (3.00x)"  # not 30x over the CPU fp32
    assert rows[("keras", "–")].amp_bf16 == "unavailable"


def test_header_names_gpu_clocks_power_and_each_frameworks_cuda_and_cudnn():
    env = {"gpus": [{"name": "NVIDIA A100", "driver": "580.65.06", "memory": "40960 MiB", "compute_capability": "8.0",
                     "sm_clock_max_mhz": 1410.0, "memory_clock_max_mhz": 1215.0, "power_limit_w": 400.0}]}
    results = [cell("torch", "fp32", throughput=1.0, memory_mib=1, accuracy=0.5, device=("gpu", "NVIDIA A100"),
                    environment={"cuda_runtime_version": "13.0", "cudnn_version": "9.20.0"}),
               cell("jax", "fp32", throughput=1.0, memory_mib=1, accuracy=0.5, device=("gpu", "NVIDIA A100"),
                    environment={"cuda_runtime_version": "12.9", "cudnn_version": "9.28.0"})]
    text = render_markdown(results, env)
    assert ("- GPU: NVIDIA A100 (driver 580.65.06, 40960 MiB, sm 8.0, max clocks 1410 MHz sm / 1215 MHz memory, "
            "power limit 400 W)") in text
    assert "- CUDA runtime / cuDNN: torch CUDA 13.0, cuDNN 9.20.0; jax CUDA 12.9, cuDNN 9.28.0" in text
    assert "none used" in render_markdown(RESULTS, {})


def test_the_memory_table_states_the_figures_noise_from_fp32_against_tf32():
    """fp32 and tf32 hold the same float32 tensors; on an H100 their peaks still differed by 17% (916 vs 758 MiB)."""
    import pandas as pd

    from amp_suite.report.normalize import memory_noise_lines

    rows = [("fp32", 916.0), ("tf32", 758.0), ("amp_bf16", 487.0)]
    summary = pd.DataFrame([{"workload": "cifar10_resnet18", "framework": "torch", "device_kind": "gpu",
                             "precision": p, "status": "ok", "peak_memory_mib": m} for p, m in rows])
    (line, blank) = memory_noise_lines(summary)
    assert "torch cifar10_resnet18: 17% (916 vs 758 MiB)" in line and blank == ""
    cpu = summary[summary["precision"] != "tf32"]  # a CPU has no tf32: nothing to state
    assert memory_noise_lines(cpu) == []


def test_keras_on_a_backend_is_compared_with_that_backends_own_framework():
    def keras_cell(framework, backend, precision, throughput, memory_mib):
        result = cell(framework, precision, throughput=throughput, memory_mib=memory_mib, accuracy=0.9)
        result.metrics.update(keras_backend=backend, framework_version=f"keras 3.15.1, {backend} 1.0")
        return result

    results = [*RESULTS[:4], *RESULTS[5:],
               keras_cell("keras@jax", "jax", "fp32", 40.0, 200), keras_cell("keras@jax", "jax", "amp_bf16", 80.0, 100),
               keras_cell("keras@torch", "torch", "fp32", 25.0, 800),
               keras_cell("keras", "tensorflow", "fp32", 30.0, 500)]
    from amp_suite.report.keras_backends import keras_cost_table

    table = keras_cost_table(summary_frame(results), results_frame(results))
    rows = {(r["keras"], r["precision"]): r for r in table.to_dict("records")}
    assert set(rows) == {("keras@jax", "fp32"), ("keras@jax", "amp_bf16"), ("keras@torch", "fp32")}  # no native TF
    assert rows[("keras@jax", "fp32")]["native"] == "jax" and rows[("keras@jax", "fp32")]["throughput"] == "0.80x 1 run"
    assert rows[("keras@jax", "fp32")]["peak memory"] == "2.50x"  # 200 MiB against jax's 80 on the device
    assert rows[("keras@jax", "amp_bf16")]["throughput"] == "1.07x 1 run"  # 80 against jax's 75, single runs
    assert rows[("keras@jax", "amp_bf16")]["speed-up over fp32"] == "1.50x -> 2.00x"  # each over its own fp32
    assert rows[("keras@torch", "fp32")]["throughput"] == "0.25x 1 run"  # against torch's fp32, 100
    flagged = [*results[:-1], keras_cell("keras@torch", "torch", "fp8", 30.0, 500)]
    flagged[0].metrics["measurement_flags"] = "machine busy"  # torch fp32: the native side of keras@torch's row
    table = keras_cost_table(summary_frame(flagged), results_frame(flagged))
    marked = {(r["keras"], r["precision"]): r["throughput"] for r in table.to_dict("records")}
    assert marked[("keras@torch", "fp32")] == "0.25x ⚑ 1 run"
    native_fp8 = cell("torch", "fp8", throughput=20.0, memory_mib=400, accuracy=0.9)
    for result in (flagged[-1], native_fp8):
        result.applied = {**(result.applied or {}), "fp8_matmul": "emulated"}
    table = keras_cost_table(summary_frame([*flagged, native_fp8]), results_frame([*flagged, native_fp8]))
    [fp8] = [r for r in table.to_dict("records") if r["precision"] == "fp8"]
    assert fp8["throughput"] == "– (emulated: the emulation's speed, no ratio)" and fp8["speed-up over fp32"] == "–"
    report = render_markdown(results, {})
    assert "## Keras against its backend's own framework" in report
    backends = next(line for line in report.splitlines() if line.startswith("- Keras backends: "))
    assert "keras@jax: Keras on jax" in backends and "keras: Keras on tensorflow" in backends
    assert "## Keras against" not in render_markdown(RESULTS, {})  # no Keras, no section


def test_a_timeout_stored_without_its_mode_stands_in_its_rows_mode():
    """Folders written before the sweep recorded a killed cell's mode hold timeouts with none: each takes its
    row's one mode, so it sits beside the cells that ran, not in a row of its own; two modes in the row are not
    guessed between."""
    import dataclasses

    fp32 = dataclasses.replace(cell("torch", "fp32", throughput=100.0, memory_mib=400, accuracy=0.9), mode="eager")
    killed = dataclasses.replace(cell("torch", "amp_bf16", status="timeout", error="no result after 60 s"), mode=None)
    summary = summary_frame([fp32, killed])
    assert len(summary) == 2 and set(summary["mode"]) == {"eager"}
    assert _row(summary, "torch", "amp_bf16").status == "timeout"
    compiled = dataclasses.replace(fp32, key="torch/w/fp32/compiled/r0", mode="compiled")
    assert set(results_frame([fp32, compiled, killed])["mode"]) == {"eager", "compiled", ""}
    # a mode sweep's key names the mode: a killed compiled cell stays compiled, though only eager cells ran
    killed_compiled = dataclasses.replace(killed, key="torch/w/amp_bf16/compiled/r0")
    assert list(results_frame([fp32, killed_compiled])["mode"]) == ["eager", "compiled"]
