"""The Flax backend's doctor probe: ``python -m amp_suite_flax.doctor cpu|auto``.

``framework_info().doctor_probe`` names this module, so ``amp-suite doctor``
checks Flax as it checks the built-in frameworks: it runs this module in a
fresh process with the plugin's ``env`` set (``XLA_PYTHON_CLIENT_PREALLOCATE``)
and judges the sections it prints.  The sections and their fields are those
of ``amp_suite.doctor.probe_kit`` (each filled with ``kit.section``, printed
with ``kit.emit``); the measurements follow this backend's recipe: the
default matmul precision for fp32/tf32, ``nnx.Conv``/``nnx.Linear`` with
``param_dtype=float32`` and ``dtype=<compute dtype>`` for the AMP precisions,
``jmp.DynamicLossScale`` for fp16 and ``block_until_ready`` before a clock is
read.  The loss-scale, timing, memory and preallocation sections hold for any
JAX backend: they are the built-in JAX backend's
(``amp_suite_plugins.jax.xla_checks``), run as they are.
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp

from amp_suite.plugin_api import probe_kit as kit
from amp_suite_plugins.jax.xla_checks import (
    found_gpu,
    loss_scale_section,
    memory_section,
    preallocation_section,
    timing_section,
)

# Why the GPU backend is not usable, as JAX said it.
GPU_ERRORS: list[str] = []


def _choose(requested: str) -> Any:
    if requested == "cpu":
        jax.config.update("jax_platforms", "cpu")  # before any backend starts
    else:
        try:
            return jax.devices("gpu")[0]
        except RuntimeError as exc:
            GPU_ERRORS.append(str(exc))
    return jax.devices("cpu")[0]


def device_section(dev: Any) -> dict[str, Any]:
    import importlib.util

    plugins = [name for name in ("jax_cuda13_plugin", "jax_cuda12_plugin") if importlib.util.find_spec(name)]
    found: dict[str, Any] = {"kind": "gpu" if found_gpu(dev) else "cpu", "cuda_build": bool(plugins)}
    if plugins:  # the plugin's name says the CUDA major it was built for
        found["cuda_build_version"] = plugins[0].removeprefix("jax_cuda").removesuffix("_plugin")
    if GPU_ERRORS:
        found["gpu_error"] = " | ".join(dict.fromkeys(" ".join(e.split()) for e in GPU_ERRORS))[:1000]
    if found_gpu(dev):
        from amp_suite_flax.plugin import cuda_versions

        found.update(cuda_versions())
        found.update(name=dev.device_kind, compute_capability=str(getattr(dev, "compute_capability", "")),
                     driver=str(getattr(dev.client, "platform_version", "")))
        conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME"))
        jax.block_until_ready(conv(jnp.ones((1, 8, 8, 8)), jnp.ones((8, 8, 3, 3))))
        found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")  # cuDNN loads with the first convolution
    return found


def precision_section(dev: Any) -> dict[str, Any]:
    import numpy as np

    k, hw = kit.PROBE_K, kit.CONV_PROBE_HW
    a = jax.device_put(jnp.ones((k, k)) * 1.0001, dev)
    b = jax.device_put(jnp.ones((k, k)), dev)
    image = jax.device_put(jnp.ones((1, hw, hw, kit.CONV_PROBE_IN)) * 1.0001, dev)
    kernel = jax.device_put(jnp.ones((1, 1, kit.CONV_PROBE_IN, kit.CONV_PROBE_OUT)), dev)
    found: dict[str, Any] = {}
    modes = [("fp32", "highest"), ("tf32", "tensorfloat32")] if found_gpu(dev) else [("fp32", "highest")]
    for name, precision in modes:
        jax.config.update("jax_default_matmul_precision", precision)  # as set_precision does
        matmul = jax.jit(lambda x, y: x @ y)
        conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
            x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")))
        found[f"matmul_{name}"] = float(np.mean(np.asarray(matmul(a, b)), dtype=np.float64))
        found[f"conv_{name}"] = float(np.mean(np.asarray(conv(image, kernel)), dtype=np.float64))
    jax.config.update("jax_default_matmul_precision", "highest")
    return found


def amp_section(dev: Any, compute: Any) -> dict[str, Any]:
    import optax
    from flax import nnx

    seen: dict[str, Any] = {}

    class Probe(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.conv = nnx.Conv(3, 8, (3, 3), padding="VALID", dtype=compute, param_dtype=jnp.float32, rngs=rngs)
            self.dense = nnx.Linear(8 * 6 * 6, 10, dtype=compute, param_dtype=jnp.float32, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            x = self.conv(x)
            seen["conv"] = x.dtype.name  # dtypes are static: read while tracing
            x = self.dense(jax.nn.relu(x).reshape(x.shape[0], -1))
            seen["matmul"] = x.dtype.name
            return x.astype(jnp.float32)  # logits in float32, as the backend returns them

    with jax.default_device(dev):
        graphdef, params = nnx.split(Probe(nnx.Rngs(0)))
        x, y = jnp.ones((4, 8, 8, 3)), jnp.arange(4)

        def loss_fn(p: Any) -> Any:
            logits = nnx.merge(graphdef, p)(x)
            seen["logits"] = logits.dtype.name
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        grads = jax.jit(jax.grad(loss_fn))(params)
    seen["params"] = sorted({leaf.dtype.name for leaf in jax.tree_util.tree_leaves(params)})
    seen["grads"] = sorted({leaf.dtype.name for leaf in jax.tree_util.tree_leaves(grads)})
    return seen


def main(argv: list[str]) -> None:
    dev = _choose(argv[0] if argv else "auto")
    kit.run_sections([
        ("device", lambda: device_section(dev)),
        ("preallocation", lambda: preallocation_section(dev)),
        ("precision", lambda: precision_section(dev)),
        ("amp_fp16", lambda: amp_section(dev, jnp.float16)),
        ("amp_bf16", lambda: amp_section(dev, jnp.bfloat16)),
        ("loss_scale", lambda: loss_scale_section(dev)),
        ("timing", lambda: timing_section(dev)),
        ("memory", lambda: memory_section(dev)),
    ])


if __name__ == "__main__":
    main(sys.argv[1:])
