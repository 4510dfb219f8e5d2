"""The PyTorch GPU benchmarks run on a CPU too (tiny sizes), and their GPU-only arithmetic is checked with fakes.

``benchmarks/torch_gpu_speed.py`` puts the suite's step beside an idiomatic
loop, ``benchmarks/profile_torch_step.py`` profiles the suite's step.  Their
figures are the benchmarks' business; these tests check that both sides
compute the same numbers, that each script runs end to end, and that the
profile's kernel counts and idle fraction come out right from CUDA events.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # a real framework in fresh processes on 2 cores

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_speed_check_runs_on_a_cpu_with_equal_first_losses(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "torch_gpu_speed.py"), "--device", "cpu", "--workloads", "mnist_cnn",
         "--precisions", "fp32,tf32", "--batch-size", "4", "--steps", "3", "--warmup", "1"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("mnist_cnn")]
    assert "skipped: no TF32 on a CPU" in rows[1]
    fields = rows[0].split()
    assert fields[:4] == ["mnist_cnn", "fp32", "eager", "4"]
    losses = [float(v) for v in " ".join(fields[8:]).split(", ")]
    assert len(losses) == 2 and losses[0] == pytest.approx(losses[1], rel=1e-5)  # the two sides agree


def test_the_idiomatic_resnet_has_every_canonical_layer_of_the_suites():
    import torch

    from amp_suite.config.catalog import load_config
    from amp_suite.workloads.workload import init_variables

    idiomatic = _module("torch_idiomatic")
    workload = load_config(None).workloads["cifar10_resnet18"]
    model, named = idiomatic.build_model("resnet18", 10, 32, 3)
    weights, state = init_variables(workload, 0)
    assert set(named) == {key.rsplit("/", 1)[0] for key in (*weights, *state)}
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(v.size for v in weights.values())
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_the_profile_runs_on_a_cpu_and_says_there_are_no_kernels(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profile_torch_step.py"), "--device", "cpu", "--workload", "mnist_cnn",
         "--precision", "fp32", "--batch-size", "4", "--warmup", "1", "--steps", "2", "--profile-steps", "1",
         "--top", "3", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kernels per step: none to count on a CPU" in done.stdout
    assert "host ms/step" in done.stdout and "top 3 operators by host time" in done.stdout
    written = tmp_path / "profile-mnist_cnn-fp32-eager-b4.txt"
    assert written.read_text().startswith("profile of the suite's PyTorch step: mnist_cnn fp32 mode eager")


def test_the_profile_counts_kernels_and_idle_time_from_cuda_events():
    """Two steps: three kernels and a copy on the GPU, busy 6 of the 10 us between the first and last event."""
    from torch.autograd import DeviceType

    profile_module = _module("profile_torch_step")

    def event(name, kind, start, end):
        return SimpleNamespace(name=name, device_type=kind, time_range=SimpleNamespace(start=start, end=end))

    events = [event("aten::conv", DeviceType.CPU, 0, 2), event("cudaLaunchKernel", DeviceType.CPU, 0, 1),
              event("cudaLaunchKernel", DeviceType.CPU, 2, 3), event("cudaLaunchKernel", DeviceType.CPU, 4, 5),
              event("kernel_a", DeviceType.CUDA, 1, 3), event("kernel_b", DeviceType.CUDA, 2, 4),
              event("kernel_a", DeviceType.CUDA, 6, 7), event("Memcpy HtoD", DeviceType.CUDA, 8, 10)]
    averages = [SimpleNamespace(key="kernel_a", count=2, self_device_time_total=3.0, self_cpu_time_total=0.0),
                SimpleNamespace(key="kernel_b", count=1, self_device_time_total=2.0, self_cpu_time_total=0.0),
                SimpleNamespace(key="aten::conv", count=2, self_device_time_total=0.0, self_cpu_time_total=4.0)]
    profile = SimpleNamespace(events=lambda: events, key_averages=lambda: averages)
    lines = profile_module.summarize(None, SimpleNamespace(device_type="cuda"), profile, steps=2, top=2)
    assert lines[0].startswith("kernels per step: 2 (GPU activities with copies and sets: 2); launch calls per step: 2")
    assert lines[1].startswith("GPU idle: 40% of the profiled 0.01 ms per step")  # busy [1,4] [6,7] [8,10] of [0,10]
    assert "kernel_a" in lines[3] and "60.0%" in lines[3]
    assert profile_module.union_seconds([(0, 2), (1, 3), (5, 6)]) == 4
