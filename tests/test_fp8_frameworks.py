"""The fp8 precision in each framework: one dense layer's FP8 forward and backward against the NumPy reference of
the recipe (amp_suite.numerics.fp8), and the layers a model puts in FP8.

With float64 operands every framework must give the reference exactly: the
casts to e4m3 / e5m2 are the frameworks' own, the scales and the matmul
float64, the result rounded to bfloat16 as the reference rounds it.  With
float32 operands (what a training step holds) the scale and the matmul are
float32, whose rounding can move a result across a bfloat16 rounding
boundary: at most one bfloat16 step, and nearly every element still equal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from amp_suite.records import RunSpec
from amp_suite.workloads.fp8_layers import fp8_layer_names, head_name
from amp_suite.workloads.workload import init_variables, workload_from_config
from fp8_layer_check import compare
from suite_cli import HELPERS, REPO

pytestmark = pytest.mark.slow  # real frameworks on 2 cores

VIT = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
       "mlp": 16, "patch": 4, "batch_size": 4, "optimizer": "adamw", "learning_rate": 1e-2}


def _check(report: dict[str, dict[str, float]], dtype: str) -> None:
    for name, figures in report.items():
        if dtype == "float64":
            assert figures["equal"] == 1.0 and figures["ulps"] == 0.0, (name, report)
        else:
            assert figures["equal"] >= 0.9 and figures["ulps"] <= 1.0, (name, report)


def torch_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray, dtype: str) -> tuple[Any, Any, Any]:
    import torch

    from amp_suite_plugins.torch.fp8 import fp8_linear

    kind = getattr(torch, dtype)
    xt = torch.tensor(x, dtype=kind, requires_grad=True)
    wt = torch.tensor(w.T.copy(), dtype=kind, requires_grad=True)  # torch's (out, in)
    out = fp8_linear(torch, xt, wt, torch.tensor(b, dtype=kind))
    assert out.dtype == torch.bfloat16
    out.backward(torch.tensor(grad, dtype=torch.float32).to(torch.bfloat16))
    assert xt.grad.dtype == kind and wt.grad.dtype == kind
    return out.double().detach().numpy(), xt.grad.double().numpy(), wt.grad.double().numpy().T


def jax_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray, dtype: str) -> tuple[Any, Any, Any]:
    import jax
    import jax.numpy as jnp

    from amp_suite_plugins.jax.fp8 import fp8_dense

    kind = getattr(jnp, dtype)
    xj, wj, bj = jnp.asarray(x, kind), jnp.asarray(w, kind), jnp.asarray(b, kind)
    out, pullback = jax.vjp(lambda a, c: fp8_dense(a, c, bj), xj, wj)
    grad_x, grad_w = pullback(jnp.asarray(grad, jnp.float32).astype(jnp.bfloat16))
    assert out.dtype == jnp.bfloat16 and grad_x.dtype == kind and grad_w.dtype == kind
    return (np.asarray(out.astype(jnp.float32), np.float64), np.asarray(grad_x, np.float64),
            np.asarray(grad_w, np.float64))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torchs_fp8_dense_is_the_recipes_reference(dtype: str) -> None:
    pytest.importorskip("torch")
    _check(compare(torch_layer, dtype), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_jaxs_fp8_dense_is_the_recipes_reference(dtype: str) -> None:
    jax = pytest.importorskip("jax")
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", dtype == "float64")
    try:
        _check(compare(jax_layer, dtype), dtype)
    finally:
        jax.config.update("jax_enable_x64", before)


def _barrier_lines(program: str, fp8_type: str) -> int:
    return sum("optimization_barrier" in line and fp8_type in line for line in program.splitlines())


def test_jaxs_fp8_casts_pass_an_optimization_barrier_so_xla_cannot_drop_the_rounding() -> None:
    """On an H100 XLA's GPU compiler folded the f32 -> f8 -> f32 round trip away (excess precision): the products
    matched the unrounded ones, 4-7% from the recipe.  Each FP8 tensor of the layer, forward (input, weight) and
    backward (gradient), must reach XLA behind a barrier, which no pass looks through."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from amp_suite_plugins.jax.fp8 import fp8_dense

    x, w = jnp.ones((16, 32), jnp.bfloat16), jnp.ones((32, 16), jnp.float32)

    def forward_backward(x, w):
        out, pullback = jax.vjp(fp8_dense, x, w)
        return out, *pullback(jnp.ones_like(out))

    program = jax.jit(forward_backward).lower(x, w).as_text()
    assert _barrier_lines(program, "f8E4M3FN") >= 2 and _barrier_lines(program, "f8E5M2") >= 1, program[-3000:]
    # and the three products rounded to bfloat16: grad_w's would otherwise be float32 -> bfloat16 -> float32
    assert _barrier_lines(program, "xbf16>") >= 3, program[-3000:]


KERAS_BARRIERS = """
import json, keras, numpy as np
from keras import ops
from amp_suite_plugins.keras.fp8 import fake_quantize
backend = keras.backend.backend()
x = np.linspace(-3, 3, 64, dtype="float32").reshape(8, 8)
if backend == "jax":
    import jax
    program = jax.jit(lambda v: fake_quantize(v, "float8_e4m3fn", 448.0)).lower(x).as_text()
    lines = [l for l in program.splitlines() if "optimization_barrier" in l and "f8E4M3FN" in l]
    found = len(lines)
else:
    import tensorflow as tf
    graph = tf.function(lambda v: fake_quantize(v, "float8_e4m3fn", 448.0)).get_concrete_function(
        tf.TensorSpec((8, 8), tf.float32)).graph
    found = sum(op.type == "XlaOptimizationBarrier" and op.inputs[0].dtype.name == "float8_e4m3fn"
                for op in graph.get_operations())
print(json.dumps({"backend": backend, "barriers": found}))
"""


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keras_fp8_casts_pass_an_optimization_barrier_where_xla_compiles(backend: str) -> None:
    pytest.importorskip("keras")
    pytest.importorskip(backend)
    done = subprocess.run([sys.executable, "-c", KERAS_BARRIERS], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "KERAS_BACKEND": backend})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"backend": backend, "barriers": 1}


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch", "torch-compiled"])
def test_keras_fp8_dense_is_the_recipes_reference_on_every_backend(backend: str) -> None:
    """torch-compiled: the layer through torch.compile after a compiled keras@torch fp8 cell's set_precision (without
    its rounding switch 14% of the outputs left the recipe on a CPU: inductor skipped the bfloat16 rounding)."""
    pytest.importorskip("keras")
    pytest.importorskip(backend.removesuffix("-compiled"))
    # compiled, float64 alone: its check is exact, and each dtype is an inductor compile of a minute on 2 cores
    dtypes = ["float64"] if backend.endswith("-compiled") else ["float64", "float32"]
    done = subprocess.run([sys.executable, str(HELPERS / "fp8_layer_check.py"), f"keras-{backend}", *dtypes],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(reports) == set(dtypes)
    for dtype, report in reports.items():
        _check(report, dtype)


def test_the_head_stays_out_of_fp8_and_every_other_dense_and_attention_layer_is_in() -> None:
    vit = workload_from_config("tiny_vit", VIT)
    names = fp8_layer_names(vit.layers)
    assert head_name(vit.layers) == "head" and "head" not in names
    assert "block1_attn" in names and {"block1_mlp1", "block1_mlp2"} <= set(names)
    cnn = workload_from_config("tiny_cnn", {"model": "mnist_cnn", "input_size": 8, "channels": 1, "num_classes": 3})
    assert fp8_layer_names(cnn.layers) == ("dense1",) and head_name(cnn.layers) == "logits"


def _torch_cell(precision: str) -> tuple[Any, Any, Any]:
    from amp_suite_plugins.torch import plugin as torch_plugin

    vit = workload_from_config("tiny_vit", VIT)
    vit = dataclasses.replace(vit, optimizer=dataclasses.replace(vit.optimizer, decay_steps=4))
    run = RunSpec(framework="torch", workload=vit.name, precision=precision, steps=2, warmup=0, batch_size=4)
    device = torch_plugin.select_device(run)
    applied = torch_plugin.set_precision(run, device)
    weights, _ = init_variables(vit, 0)
    return torch_plugin, applied, torch_plugin.build_model(run, vit, weights, {}, applied, device)


def test_a_torch_model_under_fp8_has_fp8_linears_where_the_recipe_says_and_records_it() -> None:
    torch = pytest.importorskip("torch")
    from amp_suite_plugins.torch.fp8 import fp8_linear_class

    plugin, applied, model = _torch_cell("fp8")
    assert applied.compute_dtype == "bfloat16" and applied.param_dtype == "float32"
    assert applied.fp8_matmul == "emulated" and "float8_e4m3fn" in applied.fp8_recipe
    assert "current amax" in applied.fp8_recipe and any("fp8 matmuls=emulated" in n for n in applied.notes)
    fp8 = fp8_linear_class(torch)
    turned = {name for name, module in model.module.named.items()
              if isinstance(module, fp8) or any(isinstance(c, fp8) for c in module.children())}
    assert turned == set(fp8_layer_names(model.module.specs)) and not isinstance(model.module.named["head"], fp8)
    images = np.random.default_rng(0).normal(size=(4, 8, 8, 1)).astype(np.float32)
    logits = plugin.predict(RunSpec(framework="torch", workload="tiny_vit", precision="fp8"), model, images, False)
    _, _, bf16 = _torch_cell("amp_bf16")
    reference = plugin.predict(RunSpec(framework="torch", workload="tiny_vit", precision="amp_bf16"), bf16, images,
                               False)
    assert logits.dtype == np.float32 and np.isfinite(logits).all()
    assert not np.array_equal(logits, reference)  # the FP8 casts are really in the path ...
    assert np.max(np.abs(logits - reference)) < 0.25 * np.max(np.abs(reference))  # ... and near bfloat16's


def test_on_a_gpu_with_fp8_tensor_cores_torch_records_native_and_a_plugin_without_a_native_path_emulated() -> None:
    # a fake H100's record: set_precision decides from it alone (the native matmuls themselves need the GPU)
    pytest.importorskip("torch")
    from amp_suite.records import DeviceInfo
    from amp_suite_plugins.torch import plugin as torch_plugin

    h100 = DeviceInfo(kind="gpu", platform="cuda", name="NVIDIA H100 80GB HBM3", count=1, compute_capability="9.0")
    a100 = dataclasses.replace(h100, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    run = RunSpec(framework="torch", workload="w", precision="fp8")
    native = torch_plugin.set_precision(run, h100)
    assert native.fp8_matmul == "native" and any("torch._scaled_mm" in note for note in native.notes)
    assert torch_plugin.set_precision(run, a100).fp8_matmul == "emulated"
    from amp_suite.plugins.kit import standard_precision

    assert standard_precision(run, h100).fp8_matmul == "emulated"  # what the Keras plugins ask: no native path


def test_jax_records_its_fp8_cells_emulated_on_an_fp8_gpu_and_names_its_gpus_platform_as_the_others_do() -> None:
    """XLA did not rewrite the recipe into FP8 GEMMs on an H100 (and the barrier now rules it out): a JAX fp8 cell
    on such a GPU is emulated.  JAX calls CUDA and ROCm devices "gpu"; the record says which, as torch does."""
    pytest.importorskip("jax")
    from amp_suite.plugins.kit import has_fp8_matmul
    from amp_suite.records import DeviceInfo
    from amp_suite_plugins.jax import plugin as jax_plugin
    from amp_suite_plugins.jax.devices import gpu_platform

    assert gpu_platform("gpu", "cuda 13000") == "cuda" and gpu_platform("gpu", "rocm 60342") == "rocm"
    assert gpu_platform("gpu", "") == "gpu"
    h100 = DeviceInfo(kind="gpu", platform=gpu_platform("gpu", "cuda 13000"), name="NVIDIA H100 80GB HBM3",
                      compute_capability="9.0", supports_tf32=True)
    assert has_fp8_matmul(h100)  # the hardware has FP8 matmuls ...
    applied = jax_plugin.set_precision(RunSpec(framework="jax", workload="w", precision="fp8"), h100)
    assert applied.fp8_matmul == "emulated"  # ... the JAX plugin has no path to them
    assert any("optimization barrier" in note for note in applied.notes)


def test_only_shapes_that_torchs_scaled_mm_takes_go_native() -> None:
    torch = pytest.importorskip("torch")
    from amp_suite_plugins.torch.fp8 import fp8_linear, scaled_mm_fits

    assert scaled_mm_fits(torch.zeros(2, 8, 32), torch.zeros(48, 32))  # 16 rows, 32 in, 48 out
    assert not scaled_mm_fits(torch.zeros(3, 5, 32), torch.zeros(48, 32))  # 15 rows
    assert not scaled_mm_fits(torch.zeros(16, 24), torch.zeros(48, 24))  # 24 inputs
    # a shape _scaled_mm would refuse runs the emulated recipe even when native is asked (here: no GPU at all)
    x, w = torch.randn(3, 5, 24), torch.randn(8, 24)
    assert torch.equal(fp8_linear(torch, x, w, None, native=True), fp8_linear(torch, x, w, None, native=False))


def test_torch_compile_traces_the_fp8_linears_without_a_graph_break() -> None:
    """On an H200 the character GPT's compiled fp8 step broke its graph at every FP8 layer (31 breaks against
    amp_bf16's 4): dynamo could not trace the cached call that made the autograd function.  A forward through
    two FP8 linears must now be one graph, as through two plain ones."""
    torch = pytest.importorskip("torch")
    from amp_suite_plugins.torch.fp8 import use_fp8

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = torch.nn.Linear(32, 32), torch.nn.Linear(32, 16)
            self.named = {"first": self.first, "second": self.second}

        def forward(self, x: Any) -> Any:
            return self.second(torch.relu(self.first(x)))

    net = Net()
    assert use_fp8(torch, net, ("first", "second"), native=False) == 2
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda x: net(x).float().sum())(torch.randn(16, 32))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def torch_compiled_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray,
                         dtype: str) -> tuple[Any, Any, Any]:
    """The FP8 linear an fp8 cell builds, through torch.compile (inductor), forward and backward."""
    import torch

    from amp_suite_plugins.torch.fp8 import fp8_linear_class

    kind = getattr(torch, dtype)
    linear = fp8_linear_class(torch)(w.shape[0], w.shape[1], dtype=kind)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(w.T.copy(), dtype=kind))
        linear.bias.copy_(torch.tensor(b, dtype=kind))
    xt = torch.tensor(x, dtype=kind, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(linear)(xt)
    out.backward(torch.tensor(grad, dtype=torch.float32).to(torch.bfloat16))
    return out.double().detach().numpy(), xt.grad.double().numpy(), linear.weight.grad.double().numpy().T


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_compiled_torch_fp8_cell_keeps_the_recipes_roundings(dtype: str) -> None:
    """Inductor keeps a fused kernel's bfloat16 intermediates in float32 unless told to round them: compiled, the
    FP8 layer's products skipped the recipe's bfloat16 rounding (on this CPU 28% of the outputs off, every
    gradient element unrounded).  An fp8 cell in a compiled mode turns the rounding on in set_precision, and its
    compiled layer is then the recipe's reference as the eager one is; an amp_bf16 compiled cell leaves
    inductor's default."""
    torch = pytest.importorskip("torch")
    import torch._inductor.config as inductor_config

    from amp_suite.records import DeviceInfo
    from amp_suite_plugins.torch import plugin as torch_plugin
    from amp_suite_plugins.torch.fp8 import COMPILED_ROUNDING_NOTE, keep_roundings_under_compile

    cpu = DeviceInfo(kind="cpu", platform="cpu", name="cpu", count=1)
    try:
        bf16 = torch_plugin.set_precision(RunSpec(framework="torch", workload="w", precision="amp_bf16",
                                                  mode="compiled"), cpu)
        assert inductor_config.emulate_precision_casts is False and COMPILED_ROUNDING_NOTE not in bf16.notes
        applied = torch_plugin.set_precision(RunSpec(framework="torch", workload="w", precision="fp8",
                                                     mode="compiled"), cpu)
        assert inductor_config.emulate_precision_casts is True and COMPILED_ROUNDING_NOTE in applied.notes
        _check(compare(torch_compiled_layer, dtype), dtype)
    finally:
        keep_roundings_under_compile(torch, False)  # the value the process started with
