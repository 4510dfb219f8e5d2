"""Where fp8 is native and where emulated, decided from the device record alone (fake devices: no GPU here), the
fp8 ceiling from a calibration, and the layers a workload puts in FP8 or the reason it has none."""

from __future__ import annotations

import pytest

from amp_suite.calibration.ceiling import ceiling_ratio, peak_tflops
from amp_suite.errors import UnsupportedError
from amp_suite.plugins.kit import BUILT_IN_PRECISIONS, fp8_matmul_path, has_fp8_matmul, standard_precision
from amp_suite.records import DeviceInfo, RunSpec
from amp_suite.workloads.fp8_layers import require_fp8_layers
from amp_suite.workloads.workload import workload_from_config


def _gpu(capability: str, platform: str = "cuda") -> DeviceInfo:
    return DeviceInfo(kind="gpu", platform=platform, name="a GPU", count=1, compute_capability=capability)


CPU = DeviceInfo(kind="cpu", platform="cpu", name="a CPU", count=1)


@pytest.mark.parametrize("device,expected", [
    (_gpu("9.0"), True),  # H100, H200
    (_gpu("8.9"), True),  # L4, L40S, RTX 4090
    (_gpu("10.0"), True),  # Blackwell: 10 > 8 as numbers, not as text
    (_gpu("8.6"), False),  # A10, RTX 3090
    (_gpu("8.0"), False),  # A100
    (_gpu("9.0", platform="rocm"), False),  # ROCm's FP8 formats are others (fnuz): no native path here
    (_gpu(""), False),
    (_gpu("n/a"), False),
    (CPU, False),
])
def test_fp8_matmuls_are_native_only_on_cuda_gpus_of_compute_capability_8_9_or_newer(device, expected) -> None:
    assert has_fp8_matmul(device) is expected
    assert fp8_matmul_path(device, native_path=True) == ("native" if expected else "emulated")
    assert fp8_matmul_path(device, native_path=False) == "emulated"  # a plugin without a native path


def test_standard_precision_records_the_recipe_and_the_path_under_fp8_only() -> None:
    run = RunSpec(framework="x", workload="w", precision="fp8")
    emulated = standard_precision(run, CPU, fp8_native_path=True)
    assert (emulated.compute_dtype, emulated.param_dtype, emulated.loss_scaling) == ("bfloat16", "float32", "none")
    assert emulated.fp8_matmul == "emulated" and "float8_e4m3fn forward operands" in emulated.fp8_recipe
    assert standard_precision(run, _gpu("9.0"), fp8_native_path=True).fp8_matmul == "native"
    assert standard_precision(run, _gpu("9.0")).fp8_matmul == "emulated"
    bf16 = standard_precision(RunSpec(framework="x", workload="w", precision="amp_bf16"), _gpu("9.0"),
                              fp8_native_path=True)
    assert bf16.fp8_matmul == "" and bf16.fp8_recipe == ""
    assert all("fp8" in names for names in BUILT_IN_PRECISIONS.values())


def test_the_fp8_ceiling_is_the_fp8_matmul_peak_over_fp32s() -> None:
    calibration = {"frameworks": {"torch": {"gpu": {"matmul": {"fp32": 50.0, "bf16": 700.0, "fp8": 1400.0}}}}}
    assert peak_tflops(calibration, "torch", "gpu", "fp8") == 1400.0
    assert ceiling_ratio(calibration, "torch", "gpu", "fp8") == pytest.approx(28.0)
    assert ceiling_ratio(calibration, "jax", "gpu", "fp8") is None  # not calibrated: no ceiling, not a made-up one


def test_a_workload_whose_only_dense_layer_is_its_head_is_refused_with_the_reason() -> None:
    resnet = workload_from_config("r8", {"model": "resnet8", "input_size": 8, "channels": 1, "num_classes": 3})
    with pytest.raises(UnsupportedError) as info:
        require_fp8_layers(resnet)
    message = str(info.value)
    assert "\n" not in message and "'r8'" in message and "'linear', is the head" in message
    cnn = workload_from_config("c", {"model": "mnist_cnn", "input_size": 8, "channels": 1, "num_classes": 3})
    assert require_fp8_layers(cnn) == ("dense1",)


def test_a_compiled_program_shows_whether_xla_made_an_fp8_gemm() -> None:
    from amp_suite_plugins.jax.fp8 import fp8_gemm_calls

    rewritten = ('%cublas-gemm.1 = (bf16[64,64]{1,0}, s8[33554432]{0}) custom-call(f8e4m3fn[64,64]{1,0} %p0, '
                 'f8e4m3fn[64,64]{0,1} %p1, f32[] %s0, f32[] %s1), custom_call_target="__cublas$lt$matmul$f8"')
    emulated = 'ROOT %dot.3 = f32[64,64]{1,0} dot(f32[64,64]{1,0} %convert.1, f32[64,64]{1,0} %convert.2)'
    assert fp8_gemm_calls(rewritten) == 1 and fp8_gemm_calls(emulated) == 0


@pytest.mark.parametrize("section,status,needle", [
    ({"compute_capability": "9.0", "native": True, "scaled_mm_calls": 3, "relative_difference": 0.004},
     "passed", "3 torch._scaled_mm calls"),
    ({"compute_capability": "9.0", "native": True, "scaled_mm_calls": 0, "relative_difference": 0.0},
     "failed", "do not reach the FP8 tensor cores"),
    ({"compute_capability": "9.0", "native": True, "scaled_mm_calls": 3, "relative_difference": 0.3},
     "failed", "differs from the emulated recipe"),
    ({"compute_capability": "8.0", "native": False}, "skipped", "sm 8.0 has no FP8 matmul"),
    ({"error": "RuntimeError: boom"}, "failed", "boom"),
])
def test_the_doctor_judges_whether_fp8_reaches_an_fp8_matmul(section, status, needle) -> None:
    from amp_suite.doctor import checks

    result = checks.judge_fp8("torch", section)
    assert result.status == status and needle in result.detail, result


def test_the_fp8_row_appears_only_for_a_probe_that_sent_an_fp8_section() -> None:
    from amp_suite.doctor.runner import framework_checks
    from amp_suite.machine.devices import NvidiaGpu, NvidiaInventory
    from amp_suite_plugins.torch.plugin import framework_info

    h100 = NvidiaGpu(0, "NVIDIA H100 80GB HBM3", "580.65.06", 81559.0, "9.0")
    inventory = NvidiaInventory((h100,), "580.65.06", "fake nvidia-smi lists 1")
    report = {"device": {"kind": "gpu", "cuda_build": True, "name": h100.name, "compute_capability": "9.0"}}
    without = {r.check for r in framework_checks(framework_info(), report, expect_gpu=True, inventory=inventory)}
    fp8 = {"compute_capability": "9.0", "native": True, "scaled_mm_calls": 3, "relative_difference": 0.01}
    rows = framework_checks(framework_info(), {**report, "fp8": fp8}, expect_gpu=True, inventory=inventory)
    assert "fp8 reaches an FP8 matmul" not in without
    assert {r.status for r in rows if r.check == "fp8 reaches an FP8 matmul"} == {"passed"}
