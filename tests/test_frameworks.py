"""The three built-in framework plugins hold the contract of amp_suite.testing, and agree with each other.

Every check lives in the installed conformance kit (:mod:`amp_suite.testing`),
which third-party backends use too: each probe runs one framework in its own
process.  PyTorch is the reference of the Keras and JAX plugins; the
mnist_cnn parameter count is pinned to the article's model.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_suite.records import RunSpec
from amp_suite.testing import framework_installed
from amp_suite.testing.conformance import BackendConformance

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow

MNIST_CNN_PARAMS = 824_458


class TestTorchConformance(BackendConformance):
    framework = "torch"
    reference = ""  # the reference of the others
    compiles = False
    inspect = "layer_dtypes:of_torch"


class TestKerasConformance(BackendConformance):
    framework = "keras"
    reference = "torch"
    param_count = MNIST_CNN_PARAMS
    inspect = "layer_dtypes:of_keras"


class TestJaxConformance(BackendConformance):
    framework = "jax"
    reference = "torch"
    param_count = MNIST_CNN_PARAMS
    inspect = "layer_dtypes:of_jax"


class TestKerasOnJaxConformance(BackendConformance):
    framework = "keras@jax"
    reference = "jax"  # the native framework of its backend
    param_count = MNIST_CNN_PARAMS
    inspect = "layer_dtypes:of_keras"


class TestKerasOnTorchConformance(BackendConformance):
    framework = "keras@torch"
    reference = "torch"
    param_count = MNIST_CNN_PARAMS
    inspect = "layer_dtypes:of_keras"
    compiles = False  # eager by default (jit_compile = false, Keras's own choice on PyTorch)


@pytest.mark.skipif(not framework_installed("torch"), reason="torch is not installed")
def test_torch_compile_is_an_option_compiled_in_warm_up(tmp_path):
    from amp_suite.sweep.runner import Cell, run_in_worker
    from amp_suite.workloads.workload import workload_from_config

    workload = workload_from_config("tiny", {"model": "mnist_cnn", "input_size": 8, "batch_size": 8})
    results = {}
    for compiled in (False, True):
        run = RunSpec(framework="torch", workload="tiny", precision="fp32", steps=6, warmup=2, batch_size=8,
                      window_steps=2, latency_steps=1, options={"compile": compiled}, timeout_s=900)
        results[compiled] = run_in_worker(Cell(run, workload), log_path=tmp_path / f"{compiled}.log")
        assert results[compiled].status == "ok", results[compiled].error
    eager, compiled = results[False].metrics, results[True].metrics
    assert eager["compilation"] == "eager" and compiled["compilation"] == "torch.compile (inductor): the forward pass"
    assert any("torch.compile" in note for note in results[True].applied["notes"])
    assert compiled["first_step_time_s"] > compiled["step_time_median_s"]  # compilation sits in warm-up
    np.testing.assert_allclose(compiled["step_losses"][0], eager["step_losses"][0], rtol=1e-4)


@pytest.mark.skipif(not framework_installed("jax"), reason="jax is not installed")
def test_jax_reports_the_compiled_steps_own_memory_with_donated_state_reused(tmp_path):
    from amp_suite.testing import ProbeRequest, run_probe

    result = run_probe(ProbeRequest(framework="jax", precision="fp32", steps=1, batch_size=16), tmp_path)
    m = result.measured
    assert m["train_step_traces"] == 1  # read before the analysis lowers the step again
    state_bytes = 3 * 4 * result.param_count  # float32 parameters and Adam's two moments
    # donation: parameters and optimizer state come back in the buffers they went in with
    assert m["compiled_step_alias_bytes"] >= state_bytes
    batch_bytes = 16 * 28 * 28 * 4 + 16 * 4  # float32 images, int32 labels
    assert m["compiled_step_argument_bytes"] >= state_bytes + batch_bytes
    assert m["compiled_step_temp_bytes"] > 0  # activations and gradients
    assert m["compiled_step_memory_bytes"] == (m["compiled_step_argument_bytes"] + m["compiled_step_output_bytes"]
                                               - m["compiled_step_alias_bytes"] + m["compiled_step_temp_bytes"])


# Counts the XLA programs the jax plugin compiles to build EfficientNet-B0 (32x32, fp64: the backbone checks' case).


@pytest.mark.skipif(not framework_installed("jax"), reason="jax is not installed")
def test_jax_builds_a_model_without_compiling_each_initializer():
    """build_model keeps only the shapes of haiku's init and compiles optax's init as one program.

    Run eagerly, both compiled op by op: 450 XLA programs to build this EfficientNet-B0 in fp64, and a probe of its
    3 steps took 43 s instead of 23 s.
    """
    from amp_suite.testing import jax_compiles_to_build
    from amp_suite.workloads.workload import init_variables, workload_from_config

    table = {"model": "efficientnet_b0", "input_size": 32, "channels": 3, "num_classes": 10, "batch_size": 8}
    weights, _ = init_variables(workload_from_config("efficientnet_b0", table), 0)
    assert sum(v.size for v in weights.values()) > 3_000_000  # the whole backbone: 213 parameters, 4.0 million values
    compiles = jax_compiles_to_build("jax", "efficientnet_b0", table, precision="fp64")
    assert compiles <= 5, f"{compiles} XLA programs compiled to build the model"


@pytest.mark.skipif(not framework_installed("torch"), reason="torch is not installed")
def test_torch_trains_the_same_in_channels_last_and_contiguous_layouts(tmp_path):
    # channels-last flattens in NHWC memory order with canonical (HWC) dense rows; contiguous flattens NCHW
    # and permutes the dense rows: the two must be the same network.
    from amp_suite.testing import OPTIMIZERS, WORKLOADS, ProbeRequest, assert_trains_like_reference, run_probe

    table = {**WORKLOADS["mnist_cnn"], **OPTIMIZERS["sgd"]}
    results = {layout: run_probe(ProbeRequest(framework="torch", table=table, steps=2, batch_size=16,
                                              options={"channels_last": layout}), tmp_path / str(layout))
               for layout in (True, False)}
    assert any("channels_last=False" in note for note in results[False].applied["notes"])
    assert_trains_like_reference(results[True], results[False], rtol=1e-5)
