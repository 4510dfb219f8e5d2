"""The doctor's probes on a real NVIDIA GPU (skipped without one): the checks that failed on an H100 pass.

On an H100 the former probes failed two checks for their own reasons: a 1x1
convolution with one output channel never reaches the Tensor Cores, so the
TF32 switch showed no effect, and a 0.1 ms timing step let launch gaps decide
the timing check.  These tests run each installed framework's probe on the GPU
and judge its report as ``amp-suite doctor --device gpu`` does.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from amp_suite.doctor.checks import FAILED, PASSED, SKIPPED
from amp_suite.doctor.runner import framework_checks, subprocess_probe
from amp_suite.machine.devices import detect_nvidia

INVENTORY = detect_nvidia()
pytestmark = pytest.mark.skipif(not INVENTORY.present, reason="needs an NVIDIA GPU")


def _info(name: str):
    module = importlib.import_module(f"amp_suite_plugins.{name}.plugin")
    return module.framework_info()


FRAMEWORKS = [name for name, module in (("torch", "torch"), ("keras", "tensorflow"), ("jax", "haiku"))
              if importlib.util.find_spec(module) is not None]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_probe_on_the_gpu_passes_tf32_and_timing(name):
    info = _info(name)
    report = subprocess_probe(info, "gpu", 600.0)
    rows = framework_checks(info, report, expect_gpu=True, inventory=INVENTORY)
    table = "\n".join(f"{r.check:34} {r.status:8} {r.detail}" for r in rows)
    print(table)
    by_check = {r.check: r for r in rows}
    assert by_check["sees the expected device"].status == PASSED, table
    for check in ("tf32 conv is TF32", "tf32 matmul is TF32", "fp32 conv is fp32", "fp32 matmul is fp32"):
        assert by_check[check].status in (PASSED, SKIPPED), table  # skipped below sm 8.0
    assert by_check["step time covers device work"].status == PASSED, table
    assert report["timing"]["step_s"] >= 0.005, report["timing"]
    assert by_check["one cuDNN build loaded"].status == PASSED, table
    assert not [r for r in rows if r.status == FAILED], table
