"""The three framework plugins run the same workload identically, and their AMP paths work.

Each probe runs one framework in its own process (tests/helpers/framework_probe.py).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import HELPERS, REPO

MODULES = {"torch": ("torch",), "keras": ("tensorflow", "keras"), "jax": ("jax", "haiku", "jmp", "optax")}
FRAMEWORKS = [pytest.param(name, marks=pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in mods), reason=f"{name} is not installed"))
    for name, mods in MODULES.items()]


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def probe(tmp_path_factory, framework: str, precision: str, *, steps: int = 1, batch_size: int = 16,
          epochs: int = 1, options: dict | None = None) -> dict:
    folder = tmp_path_factory.mktemp(f"{framework}-{precision}")
    request = folder / "request.json"
    request.write_text(json.dumps({"framework": framework, "precision": precision, "steps": steps,
                                   "batch_size": batch_size, "epochs": epochs, "options": options or {}}))
    out = folder / "probe.npz"
    done = subprocess.run([sys.executable, str(HELPERS / "framework_probe.py"), str(request), str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def fp32_probes(tmp_path_factory):
    cache: dict[str, dict] = {}

    def get(framework: str) -> dict:
        if framework not in cache:
            cache[framework] = probe(tmp_path_factory, framework, "fp32")
        return cache[framework]

    return get


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_fp32_logits_params_and_first_loss_match_pytorch(fp32_probes, framework):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    ref, other = fp32_probes("torch"), fp32_probes(framework)
    assert relative_error(other["logits_before"], ref["logits_before"]) <= 1e-4
    assert int(other["param_count"]) == int(ref["param_count"]) == 824_458
    assert abs(other["losses"][0] - ref["losses"][0]) / abs(ref["losses"][0]) <= 1e-4


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bf16_really_computes_in_bfloat16(fp32_probes, tmp_path_factory, framework):
    bf16 = probe(tmp_path_factory, framework, "amp_bf16")
    fp32 = fp32_probes(framework)
    error = relative_error(bf16["logits_before"], fp32["logits_before"])
    assert 1e-4 < error < 0.1  # rounded like bfloat16 (8-bit mantissa), not garbage
    assert bf16["logits_before"].dtype == np.float32
    applied = json.loads(str(bf16["applied"]))
    assert applied["compute_dtype"] == "bfloat16" and applied["loss_scaling"] == "none"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_fp16_overflowing_step_is_skipped_and_the_scale_halves(tmp_path_factory, framework):
    # A loss scale of 2**100 makes the float16 gradients overflow on the first step.
    result = probe(tmp_path_factory, framework, "amp_fp16", options={"initial_loss_scale": 2.0 ** 100})
    assert int(result["skipped"]) == 1
    assert float(result["loss_scale_final"]) == 2.0 ** 99
    np.testing.assert_array_equal(result["logits_after"], result["logits_before"])  # parameters unchanged
    assert np.isfinite(result["losses"]).all()  # the reported loss is the unscaled one


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_fp16_finite_steps_apply_and_the_scale_grows(tmp_path_factory, framework):
    result = probe(tmp_path_factory, framework, "amp_fp16", steps=4,
                   options={"initial_loss_scale": 2.0 ** 10, "loss_scale_growth_interval": 2})
    assert int(result["skipped"]) == 0
    assert float(result["loss_scale_final"]) == 2.0 ** 12  # doubled after steps 2 and 4
    assert not np.array_equal(result["logits_after"], result["logits_before"])
    applied = json.loads(str(result["applied"]))
    assert applied["loss_scaling"] == "dynamic" and applied["initial_loss_scale"] == 2.0 ** 10


@pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_train_step_compiles_once_across_epochs(tmp_path_factory, framework, precision):
    # amp_fp16 carries a loss-scale state through every step: it must not retrace either
    result = probe(tmp_path_factory, framework, precision, steps=3, epochs=2)
    assert result["traces"].tolist() == [1, 1]
