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
read.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from amp_suite.doctor import probe_kit as kit

# Why the GPU backend is not usable, as JAX said it.
GPU_ERRORS: list[str] = []


def _choose(jax: Any, requested: str) -> Any:
    if requested == "cpu":
        jax.config.update("jax_platforms", "cpu")  # before any backend starts
    else:
        try:
            return jax.devices("gpu")[0]
        except RuntimeError as exc:
            GPU_ERRORS.append(str(exc))
    return jax.devices("cpu")[0]


def _on_gpu(dev: Any) -> bool:
    return dev.platform in ("gpu", "cuda")


def device_section(jax: Any, dev: Any) -> dict[str, Any]:
    import importlib.util

    plugins = [name for name in ("jax_cuda13_plugin", "jax_cuda12_plugin") if importlib.util.find_spec(name)]
    found: dict[str, Any] = {"kind": "gpu" if _on_gpu(dev) else "cpu", "cuda_build": bool(plugins)}
    if plugins:  # the plugin's name says the CUDA major it was built for
        found["cuda_build_version"] = plugins[0].removeprefix("jax_cuda").removesuffix("_plugin")
    if GPU_ERRORS:
        found["gpu_error"] = " | ".join(dict.fromkeys(" ".join(e.split()) for e in GPU_ERRORS))[:1000]
    if _on_gpu(dev):
        from amp_suite_flax.plugin import cuda_versions

        found.update(cuda_versions())
        found.update(name=dev.device_kind, compute_capability=str(getattr(dev, "compute_capability", "")),
                     driver=str(getattr(dev.client, "platform_version", "")))
        conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME"))
        jax.block_until_ready(conv(jax.numpy.ones((1, 8, 8, 8)), jax.numpy.ones((8, 8, 3, 3))))
        found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")  # cuDNN loads with the first convolution
    return found


def precision_section(jax: Any, dev: Any) -> dict[str, Any]:
    import numpy as np

    jnp = jax.numpy
    k, hw = kit.PROBE_K, kit.CONV_PROBE_HW
    a = jax.device_put(jnp.ones((k, k)) * 1.0001, dev)
    b = jax.device_put(jnp.ones((k, k)), dev)
    image = jax.device_put(jnp.ones((1, hw, hw, kit.CONV_PROBE_IN)) * 1.0001, dev)
    kernel = jax.device_put(jnp.ones((1, 1, kit.CONV_PROBE_IN, kit.CONV_PROBE_OUT)), dev)
    found: dict[str, Any] = {}
    modes = [("fp32", "highest"), ("tf32", "tensorfloat32")] if _on_gpu(dev) else [("fp32", "highest")]
    for name, precision in modes:
        jax.config.update("jax_default_matmul_precision", precision)  # as set_precision does
        matmul = jax.jit(lambda x, y: x @ y)
        conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
            x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")))
        found[f"matmul_{name}"] = float(np.mean(np.asarray(matmul(a, b)), dtype=np.float64))
        found[f"conv_{name}"] = float(np.mean(np.asarray(conv(image, kernel)), dtype=np.float64))
    jax.config.update("jax_default_matmul_precision", "highest")
    return found


def amp_section(jax: Any, dev: Any, compute: Any) -> dict[str, Any]:
    import optax
    from flax import nnx

    jnp = jax.numpy
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


def _scaled_steps(jax: Any, dev: Any, initial: float, steps: int) -> tuple[float, bool]:
    import jmp

    jnp = jax.numpy
    w = jax.device_put(jax.random.uniform(jax.random.PRNGKey(0), (16, 4)), dev)
    x = jax.device_put(jax.random.uniform(jax.random.PRNGKey(1), (8, 16)), dev)

    def loss_fn(params: Any, scale: Any) -> Any:
        out = (x.astype(jnp.float16) @ params.astype(jnp.float16)).astype(jnp.float32)
        return scale.scale(jnp.mean(jnp.square(out)))

    @jax.jit
    def step(params: Any, scale: Any) -> tuple[Any, Any]:
        grads = scale.unscale(jax.grad(loss_fn)(params, scale))
        finite = jmp.all_finite(grads)
        return jmp.select_tree(finite, params - 0.1 * grads, params), scale.adjust(finite)

    scale = jmp.DynamicLossScale(jnp.asarray(initial, jnp.float32), period=kit.GROWTH_INTERVAL)
    params = w
    for _ in range(steps):
        params, scale = step(params, scale)
    return float(scale.loss_scale), not bool(jnp.array_equal(params, w))


def loss_scale_section(jax: Any, dev: Any) -> dict[str, Any]:
    after_overflow, overflow_changed = _scaled_steps(jax, dev, kit.OVERFLOW_SCALE, 1)
    grown, finite_changed = _scaled_steps(jax, dev, kit.GROWTH_SCALE, kit.GROWTH_INTERVAL)
    return {"initial": kit.OVERFLOW_SCALE, "after_overflow": after_overflow,
            "overflow_params_unchanged": not overflow_changed, "growth_initial": kit.GROWTH_SCALE,
            "growth_interval": kit.GROWTH_INTERVAL, "finite_steps": kit.GROWTH_INTERVAL,
            "after_finite_steps": grown, "finite_params_changed": finite_changed}


def timing_section(jax: Any, dev: Any) -> dict[str, Any]:
    import optax

    batches, width, hidden = kit.timing_shape(_on_gpu(dev))

    def build(batch: int) -> kit.StepKit:
        keys = jax.random.split(jax.random.PRNGKey(0), hidden + 3)
        params = jax.device_put({f"w{i}": jax.random.normal(keys[i], (width, width)) * 0.02 for i in range(hidden)}
                                | {"out": jax.random.normal(keys[hidden], (width, 10)) * 0.02}, dev)
        x = jax.device_put(jax.random.uniform(keys[hidden + 1], (batch, width)), dev)
        y = jax.device_put(jax.random.randint(keys[hidden + 2], (batch,), 0, 10), dev)

        def loss_fn(p: Any) -> Any:
            h = x
            for i in range(hidden):
                h = jax.nn.relu(h @ p[f"w{i}"])
            return optax.softmax_cross_entropy_with_integer_labels(h @ p["out"], y).mean()

        @jax.jit
        def train(p: Any) -> tuple[Any, Any]:
            loss, grads = jax.value_and_grad(loss_fn)(p)
            return jax.tree_util.tree_map(lambda a, g: a - 0.01 * g, p, grads), loss

        state: list[Any] = [params, None]

        def step() -> None:
            state[0], state[1] = train(state[0])

        def wait() -> None:
            jax.block_until_ready(state)

        return step, wait, None

    found = kit.time_sized(build, batches, method="host clock after block_until_ready")
    return {**found, "width": width, "hidden_layers": hidden}


def memory_section(jax: Any, dev: Any) -> dict[str, Any]:
    if not _on_gpu(dev):
        return {"api": None}
    block = jax.device_put(jax.numpy.zeros((kit.MEMORY_PROBE_BYTES // 4,), jax.numpy.float32), dev)
    jax.block_until_ready(block)
    stats = dev.memory_stats() or {}
    return {"api": "Device.memory_stats()['peak_bytes_in_use']", "peak_bytes": stats.get("peak_bytes_in_use"),
            "allocated_bytes": kit.MEMORY_PROBE_BYTES}


def preallocation_section(dev: Any) -> dict[str, Any]:
    stats = (dev.memory_stats() or {}) if _on_gpu(dev) else {}
    return {"preallocate_env": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "bytes_reserved": stats.get("pool_bytes", stats.get("bytes_reserved")),
            "bytes_limit": stats.get("bytes_limit")}


def main(argv: list[str]) -> None:
    import jax

    dev = _choose(jax, argv[0] if argv else "auto")
    jnp = jax.numpy
    kit.run_sections([
        ("device", lambda: device_section(jax, dev)),
        ("preallocation", lambda: preallocation_section(dev)),
        ("precision", lambda: precision_section(jax, dev)),
        ("amp_fp16", lambda: amp_section(jax, dev, jnp.float16)),
        ("amp_bf16", lambda: amp_section(jax, dev, jnp.bfloat16)),
        ("loss_scale", lambda: loss_scale_section(jax, dev)),
        ("timing", lambda: timing_section(jax, dev)),
        ("memory", lambda: memory_section(jax, dev)),
    ])


if __name__ == "__main__":
    main(sys.argv[1:])
