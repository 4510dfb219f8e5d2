"""The hardware ceiling, the peak fraction, the cost columns and n/a accuracy on synthetic data."""

from __future__ import annotations

import math

import pytest

from amp_suite.calibration.ceiling import ceiling_ratio, datasheet_peaks, machine_key, peak_tflops
from amp_suite.config.cost import cost_settings
from amp_suite.errors import UsageError
from amp_suite.records import CellResult, FrameworkInfo
from amp_suite.report.normalize import render_markdown, results_frame, summary_frame

CALIBRATION = {"frameworks": {"torch": {"cpu": {
    "version": "2.13.0", "device": "cpu",
    "matmul": {"fp32": 0.20, "fp16": 0.01, "bf16": 0.02},
    "conv": {"fp32": 0.25, "fp16": 0.005, "bf16": 0.03},
}}}}


def cell(precision, throughput, *, dataset="mnist", accuracy=0.9) -> CellResult:
    metrics = {"throughput": throughput, "val_accuracy": accuracy, "final_loss": 0.5, "peak_rss_bytes": 2**30,
               "achieved_tflops": throughput * 1e9 / 1e12, "train_flops_per_image": 1e9,
               "epoch_times_s": [5.0], "framework_version": "2.13.0"}
    return CellResult(key=f"torch/w/{precision}/r0", framework="torch", workload="w", precision=precision,
                      repeat=0, status="ok", metrics=metrics, device={"kind": "cpu", "name": "cpu"},
                      config={"dataset": dataset, "batch_size": 100, "steps": 50})


def test_peak_is_the_larger_of_matmul_and_conv_and_ceiling_is_over_fp32():
    assert peak_tflops(CALIBRATION, "torch", "cpu", "fp32") == 0.25
    assert peak_tflops(CALIBRATION, "torch", "cpu", "amp_bf16") == 0.03
    assert ceiling_ratio(CALIBRATION, "torch", "cpu", "amp_bf16") == pytest.approx(0.12)
    assert peak_tflops(CALIBRATION, "torch", "gpu", "fp32") is None
    assert ceiling_ratio(None, "torch", "cpu", "amp_bf16") is None


@pytest.mark.parametrize("name,bf16", [("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA A100-SXM4-80GB", 312.0),
                                       ("NVIDIA L4", 121.0), ("Tesla T4", None), ("NVIDIA GeForce GTX 1080", None)])
def test_datasheet_peaks_of_known_gpus(name, bf16):
    sheet = datasheet_peaks(name)
    assert (sheet or {}).get("bf16") == bf16
    if name == "Tesla T4":
        assert sheet["fp16"] == 65.0 and "fp8" not in sheet  # FP8 tensor cores begin with Ada and Hopper
    if name == "NVIDIA H100 80GB HBM3":  # half the datasheet's 3,958 "with sparsity"; an H100 measured 1,337
        assert sheet["fp8"] == 1979.0
    if "A100" in name:
        assert "fp8" not in sheet


def test_machine_key_ignores_the_date_but_not_the_cpu():
    a = {"cpu_model": "X", "cpu_flags": ["avx2"], "cpu_count": 2, "gpus": [], "date": "1"}
    assert machine_key(a) == machine_key({**a, "date": "2"})
    assert machine_key(a) != machine_key({**a, "cpu_flags": ["avx2", "amx_bf16"]})


def test_report_shows_peak_fraction_and_ceiling_beside_the_speedup():
    results = [cell("fp32", 100.0), cell("amp_bf16", 50.0)]
    env = {"calibration": CALIBRATION, "gpus": []}
    frame = results_frame(results, env)
    bf16 = frame[frame.precision == "amp_bf16"].iloc[0]
    assert bf16.peak_tflops == 0.03 and bf16.peak_fraction == pytest.approx(0.05 / 0.03)
    assert bf16.ceiling_ratio == pytest.approx(0.12)
    text = render_markdown(results, env)
    assert "50 (0.50x; ceiling 0.12x)" in text
    assert "0.100 (40.0% of 0.25)" in text  # fp32: 0.1 TFLOP/s of a 0.25 peak
    assert "torch 2.13.0 on cpu (cpu): fp32 0.25, fp16 0.01, bf16 0.03" in text
    assert "## Achieved training TFLOP/s (% of the measured peak of the precision's dtype, TFLOP/s)" in text
    # without a calibration the heading promises no share of a peak (a new user's trial found one with none)
    uncalibrated = render_markdown(results, {"gpus": []})
    assert "% of the measured peak" not in uncalibrated and "% of " not in uncalibrated.split("Achieved")[1][:400]
    assert "## Achieved training TFLOP/s (no measured peak: `amp-suite calibrate` adds each dtype's)" in uncalibrated


def test_cost_per_epoch_per_million_images_and_saving():
    results = [cell("fp32", 100.0), cell("amp_bf16", 200.0)]
    env = {"cost": cost_settings({"price_per_hour": 3.6})}
    frame = results_frame(results, env)
    fp32 = frame[frame.precision == "fp32"].iloc[0]
    # 50 steps x 100 images at 100 images/s = 50 s at 0.001 per second
    assert fp32.images_per_epoch == 5000 and fp32.cost_per_epoch == pytest.approx(0.05)
    assert fp32.cost_per_million_images == pytest.approx(10.0) and fp32.currency == "USD"
    summary = summary_frame(results, env)
    bf16 = summary[summary.precision == "amp_bf16"].iloc[0]
    assert bf16.cost_saving_per_million == pytest.approx(5.0) and bf16.cost_saving_fraction == pytest.approx(0.5)
    assert "(saves 5, 50% less)" in render_markdown(results, env)


@pytest.mark.parametrize("table,needle", [({"price_per_hour": -1.0}, "must be >= 0"),
                                          ({"price_per_hour": "2"}, "must be a number"),
                                          ({"price": 2.0}, "unknown key 'price'"),
                                          ({"price_per_hour": 1.0, "currency": "U S D"}, "may hold only")])
def test_cost_settings_are_checked(table, needle):
    with pytest.raises(UsageError, match=needle):
        cost_settings(table)


def test_synthetic_data_has_no_accuracy():
    results = [cell("fp32", 100.0, dataset="synthetic", accuracy=1.0),
               cell("amp_bf16", 100.0, dataset="synthetic", accuracy=1.0)]
    frame = results_frame(results)
    assert frame.val_accuracy.isna().all()
    assert math.isnan(summary_frame(results).accuracy_delta.iloc[1])
    text = render_markdown(results, {})
    assert "Validation accuracy is n/a on synthetic data" in text
    accuracy_table = text.split("## Validation accuracy", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in accuracy_table.splitlines() if line.startswith("| w "))
    assert [c.strip() for c in row.strip("|").split("|")][-2:] == ["n/a", "n/a"]
    assert ",," in frame.to_csv(index=False)  # empty in the CSV


def test_calibrate_caches_per_machine_and_report_uses_it(tmp_path, monkeypatch, capsys):
    from amp_suite.calibration import ceiling as calibration
    from amp_suite.machine.environment import host_environment
    from amp_suite.plugins.host import PluginHost

    monkeypatch.setenv("AMP_SUITE_CACHE", str(tmp_path / "cache"))
    probed = []

    def fake_probe(framework, device, budget_s, python=""):
        probed.append(framework.name)
        return {"kind": "cpu", "device": "cpu", "version": "1.0",
                "matmul": {"fp32": 0.1, "bf16": 0.4}, "conv": {"fp32": 0.2, "bf16": 0.3}}

    monkeypatch.setattr(calibration, "_run_probe", fake_probe)
    monkeypatch.setattr(FrameworkInfo, "missing_modules", lambda info: [])
    host = PluginHost()
    assert calibration.calibrate(frameworks=("torch",), device="auto", force=False, host=host) == 0
    assert probed == ["torch"]
    env = host_environment()
    cached = calibration.read_cache(env)
    assert cached["frameworks"]["torch"]["cpu"]["matmul"]["bf16"] == 0.4
    assert calibration.ceiling_ratio(cached, "torch", "cpu", "amp_bf16") == pytest.approx(2.0)
    calibration.calibrate(frameworks=("torch",), device="auto", force=False, host=host)
    assert probed == ["torch"]  # cached: not measured again
    assert "cached; --force measures again" in capsys.readouterr().out
    environment = {k: env[k] for k in ("cpu_model", "cpu_flags", "cpu_count", "gpus")}
    calibration.attach_calibration(environment)
    assert environment["calibration"]["frameworks"]["torch"]["cpu"]["version"] == "1.0"


def test_growing_sizes_stop_at_a_measurable_call():
    from amp_suite.calibration import kit as calibration_kit

    sizes_seen = []

    def make(size):
        sizes_seen.append(size)
        return lambda: sum(range(size * 20_000))

    figure = calibration_kit.grow((1, 2, 4, 8, 16), make, lambda size: 1e9 * size, 0.05)
    assert figure["size"] == sizes_seen[-1] and figure["tflops"] > 0


def test_calibrate_names_the_device_once():
    from amp_suite.calibration.ceiling import _describe

    cpu = _describe("torch", "cpu", {"version": "2.13.0", "device": "cpu", "matmul": {"fp32": 0.2}}, cached=True)
    assert cpu.startswith("torch 2.13.0 on cpu (cached"), cpu
    gpu = _describe("jax", "gpu", {"version": "0.10.2", "device": "NVIDIA H100", "matmul": {"fp32": 50.0}},
                    cached=True)
    assert gpu.startswith("jax 0.10.2 on gpu NVIDIA H100 (cached"), gpu


def test_a_bad_price_from_a_flag_is_not_blamed_on_the_cost_table():
    with pytest.raises(UsageError) as raised:
        cost_settings({"price_per_hour": 1.0}, price_per_hour=-1.0)
    assert str(raised.value) == "price_per_hour must be >= 0, got -1.0 (allowed: 0 to 1000000)"
    with pytest.raises(UsageError, match=r"^\[cost\] price_per_hour must be >= 0"):
        cost_settings({"price_per_hour": -1.0})
