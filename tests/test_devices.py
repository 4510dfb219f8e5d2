"""Device policy: no silent CPU fallback on a GPU machine, --device gpu without one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from amp_suite.errors import UnsupportedError
from amp_suite.machine import devices
from amp_suite.machine.devices import (
    DeviceUnavailableError,
    NvidiaGpu,
    NvidiaInventory,
    detect_nvidia,
    device_problem,
    parse_smi_csv,
    select_checked,
    version_text,
)
from amp_suite.machine.environment import cpu_info
from amp_suite.records import DeviceInfo, FrameworkInfo, RunSpec
from suite_cli import HELPERS

FAKE_SMI = str(HELPERS / "fake_nvidia_smi.py")
TORCH = FrameworkInfo(name="torch", display_name="PyTorch", modules=("torch",), extra="torch",
                      precisions={"cpu": ("fp32",), "gpu": ("fp32", "tf32")})
CPU_ONLY = FrameworkInfo(name="fake", display_name="Fake", modules=("numpy",), extra="test",
                         precisions={"cpu": ("fp32",)})
CPU = DeviceInfo(kind="cpu", platform="cpu", name="EPYC")
GPU = DeviceInfo(kind="gpu", platform="cuda", name="A100")
A100 = NvidiaInventory((NvidiaGpu(0, "NVIDIA A100", "580.65.06", compute_capability="8.0"),), "580.65.06", "fake")
NONE = NvidiaInventory(reason="nvidia-smi not found")

SMI_OUTPUT = """\
0, Tesla T4, 570.86.15, 15360 MiB, 7.5, 1590 MHz, 5001 MHz, 70.00 W
1, NVIDIA H100 80GB HBM3, 570.86.15, 81559 MiB, 9.0, [N/A], [Not Supported], [N/A]
garbage line
"""


def test_parse_smi_csv_reads_clocks_and_power_and_tolerates_na():
    t4, h100 = parse_smi_csv(SMI_OUTPUT)
    assert (t4.name, t4.driver, t4.memory_total_mib, t4.compute_capability) == ("Tesla T4", "570.86.15", 15360, "7.5")
    assert (t4.sm_clock_max_mhz, t4.memory_clock_max_mhz, t4.power_limit_w) == (1590, 5001, 70.0)
    assert h100.index == 1 and h100.compute_capability == "9.0"
    assert h100.sm_clock_max_mhz is None and h100.memory_clock_max_mhz is None and h100.power_limit_w is None


def test_detect_through_a_fake_nvidia_smi(monkeypatch):
    monkeypatch.setenv(devices.FAKE_SMI_ENV, FAKE_SMI)
    found = detect_nvidia()
    assert found.present and found.driver == "580.65.06"
    assert found.gpus[0].power_limit_w == 400.0 and found.gpus[0].compute_capability == "8.0"


def test_an_old_nvidia_smi_still_gives_the_basic_fields(monkeypatch):
    monkeypatch.setenv(devices.FAKE_SMI_ENV, FAKE_SMI)
    monkeypatch.setenv("FAKE_SMI_OLD", "1")
    gpu = detect_nvidia().gpus[0]
    assert gpu.name == "NVIDIA A100-SXM4-40GB" and gpu.compute_capability == "" and gpu.power_limit_w is None


def test_the_driver_file_alone_means_a_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv(devices.FAKE_SMI_ENV, "none")
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 2025\n")
    found = detect_nvidia(driver_file=version)
    assert found.present and found.driver == "580.65.06" and not found.gpus
    assert not detect_nvidia(driver_file=tmp_path / "absent").present


def test_faked_absence(monkeypatch):
    monkeypatch.setenv(devices.FAKE_SMI_ENV, "none")
    found = detect_nvidia()
    assert not found.present and devices.FAKE_SMI_ENV in found.reason


@pytest.mark.parametrize("requested,device,framework,inventory,needle", [
    ("cpu", CPU, TORCH, A100, None),  # asked for the CPU: fine anywhere
    ("auto", GPU, TORCH, A100, None),
    ("auto", CPU, TORCH, NONE, None),  # a CPU machine: the CPU is the device
    ("auto", CPU, CPU_ONLY, A100, None),  # a plugin with no GPU precisions is CPU by design
    ("auto", CPU, TORCH, A100, "PyTorch would fall back to the CPU on a machine with NVIDIA A100"),
    ("gpu", CPU, TORCH, NONE, "--device gpu: this machine has no NVIDIA GPU (nvidia-smi not found)"),
    ("gpu", CPU, CPU_ONLY, A100, "--device gpu: Fake cannot use this machine's NVIDIA A100"),
    ("gpu", GPU, TORCH, A100, None),
])
def test_device_policy(requested, device, framework, inventory, needle):
    problem = device_problem(requested, device, framework, inventory)
    if needle is None:
        assert problem is None
    else:
        assert problem is not None and needle in problem and "\n" not in problem


def test_the_fallback_message_carries_the_install_line():
    problem = device_problem("auto", CPU, TORCH, A100)
    assert "amp-suite env create torch@gpu" in problem and "--device cpu" in problem


def test_select_checked_turns_unsupported_gpu_into_unavailable():
    def no_gpu(run):
        raise UnsupportedError("device 'gpu' requested but PyTorch sees no GPU")

    run = RunSpec(framework="torch", workload="w", precision="fp32", device="gpu")
    with pytest.raises(DeviceUnavailableError, match="this machine has no NVIDIA GPU"):
        select_checked(run, TORCH, no_gpu, NONE)
    with pytest.raises(UnsupportedError):  # other unsupported answers stay what they are
        select_checked(RunSpec(framework="torch", workload="w", precision="fp32"), TORCH, no_gpu, NONE)
    assert select_checked(RunSpec(framework="torch", workload="w", precision="fp32", device="cpu"),
                          TORCH, lambda run: CPU) == CPU


def test_version_text():
    assert version_text(12090, "cuda") == "12.9" and version_text(13000, "cuda") == "13.0"
    assert version_text(92000, "cudnn") == "9.20.0" and version_text(8902, "cudnn") == "8.9.2"
    assert version_text("9", "cudnn") == "9"


def test_fake_smi_is_executable():
    assert Path(FAKE_SMI).stat().st_mode & 0o111


def test_cpu_flags_are_read_from_cpuinfo():
    text = "processor\t: 0\nmodel name\t: Example Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile avx512_fp16\n"
    info = cpu_info(text)
    assert info["cpu_model"] == "Example Xeon"
    assert info["cpu_flags"] == ["avx2", "avx512f", "avx512_fp16", "amx_tile", "amx_bf16"]
