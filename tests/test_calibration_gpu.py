"""Calibration on GPUs: datasheet peaks, MIG slices, the cache key, --device gpu, and (with a GPU) a real probe."""

from __future__ import annotations

import importlib.util
import json

import pytest

from amp_suite.calibration import ceiling as calibration
from amp_suite.calibration import kit as calibration_kit
from amp_suite.calibration.ceiling import datasheet_peaks, is_mig_name, machine_key
from amp_suite.machine.devices import detect_nvidia
from amp_suite.machine.environment import parse_mig_devices, parse_mig_modes

H100 = {"name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "power_limit_w": 700.0, "mig_mode": "Disabled",
        "mig_profiles": []}


@pytest.mark.parametrize("name,fp32,tf32,bf16", [
    ("NVIDIA H100 80GB HBM3", 67.0, 494.5, 989.5),
    ("NVIDIA H100 PCIe", 51.0, 378.0, 756.5),
    ("NVIDIA H100 NVL", 60.0, 417.5, 835.5),
    ("NVIDIA H200", 67.0, 494.5, 989.5),
    ("NVIDIA H200 NVL", 60.0, 417.5, 835.5),
    ("NVIDIA A100-SXM4-40GB", 19.5, 156.0, 312.0),
    ("NVIDIA A100-SXM4-80GB", 19.5, 156.0, 312.0),
    ("NVIDIA A100-PCIE-40GB", 19.5, 156.0, 312.0),
    ("NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0),
    ("NVIDIA L4", 30.3, 60.0, 121.0),
    ("NVIDIA L40S", 91.6, 183.0, 366.5),
    ("NVIDIA GeForce RTX 4090", 82.6, 82.6, 165.2),
    ("Tesla T4", 8.1, None, None),
    ("Tesla V100-SXM2-16GB", 15.7, None, None),
    ("Tesla V100-PCIE-32GB", 14.0, None, None),
])
def test_datasheet_dense_peaks(name, fp32, tf32, bf16):
    sheet = datasheet_peaks(name)
    assert sheet is not None and sheet["fp32"] == fp32
    assert sheet.get("tf32") == tf32 and sheet.get("bf16") == bf16
    assert sheet["fp16"] >= sheet["fp32"]  # every listed GPU has fp16 tensor cores


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                                  "MIG 7g.80gb"])
def test_a_mig_slice_never_gets_the_whole_gpus_peak(name):
    assert is_mig_name(name) and datasheet_peaks(name) is None


def test_no_peak_for_unknown_names():
    assert datasheet_peaks("NVIDIA GeForce GTX 1080") is None and datasheet_peaks("") is None
    assert not is_mig_name("NVIDIA H100 80GB HBM3")


def test_the_cache_key_holds_each_gpus_mig_profile_power_limit_and_driver():
    env = {"cpu_model": "X", "cpu_flags": [], "cpu_count": 16, "gpus": [H100]}
    key = machine_key(env)
    assert key == machine_key({**env, "date": "later"})
    for change in ({"power_limit_w": 350.0}, {"driver": "590.10.01"}, {"mig_mode": "Enabled",
                                                                       "mig_profiles": ["1g.10gb"]}):
        assert machine_key({**env, "gpus": [{**H100, **change}]}) != key, change
    sliced = {**H100, "mig_mode": "Enabled", "mig_profiles": ["1g.10gb"]}
    assert machine_key({**env, "gpus": [sliced]}) != machine_key(
        {**env, "gpus": [{**sliced, "mig_profiles": ["3g.40gb"]}]})


def test_mig_layout_from_nvidia_smi_output():
    assert parse_mig_modes("0, Enabled\n1, Disabled\n2, [N/A]\n") == {0: "Enabled", 1: "Disabled"}
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
               "  MIG 1g.10gb      Device  0: (UUID: MIG-a)\n"
               "  MIG 3g.40gb      Device  1: (UUID: MIG-b)\n"
               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n")
    assert parse_mig_devices(listing) == {0: ["1g.10gb", "3g.40gb"]}


def test_the_environment_records_mig_fields_with_the_fake_nvidia_smi(monkeypatch):
    from pathlib import Path

    from amp_suite.machine.environment import gpu_info

    fake = Path(__file__).parent / "helpers" / "fake_nvidia_smi.py"
    monkeypatch.setenv("AMP_SUITE_FAKE_NVIDIA_SMI", str(fake))
    (gpu,) = gpu_info()
    assert gpu["name"] == "NVIDIA A100-SXM4-40GB" and gpu["power_limit_w"] == 400.0
    assert gpu["mig_mode"] == "" and gpu["mig_profiles"] == []  # the fake knows no MIG field


def _host(monkeypatch, tmp_path):
    from amp_suite.plugins.host import PluginHost
    from amp_suite.records import FrameworkInfo

    monkeypatch.setenv("AMP_SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(FrameworkInfo, "missing_modules", lambda info: [])
    return PluginHost()


def test_device_gpu_never_caches_a_cpu_figure(tmp_path, monkeypatch, capsys):
    from amp_suite.machine.environment import host_environment

    host = _host(monkeypatch, tmp_path)
    monkeypatch.setattr(calibration, "_run_probe", lambda *a, **k: {"kind": "cpu", "device": "cpu", "version": "1",
                                                               "matmul": {"fp32": 0.1}})
    assert calibration.calibrate(frameworks=("torch",), device="gpu", force=True, host=host) == 1
    assert "--device gpu, but the probe measured cpu" in capsys.readouterr().err
    cached = calibration.read_cache(host_environment()) or {}
    assert "torch" not in (cached.get("frameworks") or {})

    def refused(*args, **kwargs):
        raise RuntimeError("probe exited with code 1: RuntimeError: --device gpu: PyTorch cannot use a GPU here "
                           "(a CPU-only build); nothing measured")

    monkeypatch.setattr(calibration, "_run_probe", refused)
    assert calibration.calibrate(frameworks=("torch",), device="gpu", force=True, host=host) == 1
    assert "a CPU-only build" in capsys.readouterr().err


TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
def test_the_torch_probe_refuses_gpu_without_one():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    from amp_suite_plugins.torch import calibration as torch_calibration

    with pytest.raises(RuntimeError, match="cannot use a GPU here"):
        torch_calibration.probe("gpu", 0.01)


GPU = detect_nvidia().present


@pytest.mark.skipif(not (GPU and TORCH), reason="needs an NVIDIA GPU and torch")
def test_torch_calibration_on_the_gpu_stays_under_the_datasheet():
    from amp_suite_plugins.torch import plugin as torch_plugin

    figures = calibration._run_probe(torch_plugin.framework_info(), "gpu", 0.3)
    assert figures["kind"] == "gpu" and figures["calls_per_sync"] == calibration_kit.GPU_CALLS_PER_SYNC
    assert figures["cudnn_benchmark"] is True
    print(json.dumps({k: figures.get(k) for k in ("device", "matmul", "conv", "sizes")}))
    sheet = datasheet_peaks(figures["device"])
    for dtype in ("fp32", "fp16", "bf16"):
        assert figures["matmul"].get(dtype, 0) > 0 and figures["conv"].get(dtype, 0) > 0
        # Only the matmul is held to the datasheet: with cudnn.benchmark cuDNN may pick a Winograd or FFT
        # convolution that does fewer multiplications than the direct FLOP count credits it with (on an
        # H100 the "fp32" 3x3 conv came out at 75 TFLOP/s against the 67 of the datasheet).
        if sheet and dtype in sheet:
            assert figures["matmul"][dtype] <= 1.1 * sheet[dtype], (dtype, figures["matmul"][dtype], sheet[dtype])
    assert figures["matmul"]["bf16"] > 2 * figures["matmul"]["fp32"]  # tensor cores at work
