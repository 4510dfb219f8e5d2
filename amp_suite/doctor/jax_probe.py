"""The doctor's JAX probe: ``python -m amp_suite.doctor.jax_probe cpu|auto``.

Uses JAX's, haiku's and jmp's own APIs (matmul precision, ``jmp.Policy`` on a
haiku module, ``jmp.DynamicLossScale``, ``block_until_ready``,
``Device.memory_stats``) the way the suite's recipe does, never the plugin's
internals.  The doctor sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before
this module imports JAX; the ``preallocation`` section reports what it found.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax

if len(sys.argv) > 1 and sys.argv[1] == "cpu":  # before any backend starts
    jax.config.update("jax_platforms", "cpu")

import haiku as hk  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jmp  # noqa: E402
import optax  # noqa: E402

from amp_suite.doctor import probe_kit as kit  # noqa: E402


def _choose(requested: str) -> Any:
    if requested != "cpu":
        try:
            return jax.devices("gpu")[0]
        except RuntimeError:
            pass
    return jax.devices("cpu")[0]


def found_gpu(dev: Any) -> bool:
    """Whether ``dev`` is a CUDA GPU (JAX names the platform ``gpu`` or ``cuda``)."""
    return dev.platform in ("gpu", "cuda")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _cuda_versions() -> tuple[str, str]:
    from jax._src.lib import cuda_versions

    from amp_suite.devices import version_text

    if cuda_versions is None:
        return "", ""
    return (version_text(cuda_versions.cuda_runtime_get_version(), "cuda"),
            version_text(cuda_versions.cudnn_get_version(), "cudnn"))


def device_section(dev: Any) -> dict[str, Any]:
    plugins = [name for name in ("jax_cuda13_plugin", "jax_cuda12_plugin") if _importable(name)]
    found: dict[str, Any] = {"kind": "gpu" if found_gpu(dev) else "cpu",
                             "cuda_build": bool(plugins)}
    if found["kind"] == "gpu":
        runtime, cudnn = _cuda_versions()
        found.update(name=dev.device_kind, compute_capability=str(getattr(dev, "compute_capability", "")),
                     driver=str(getattr(dev.client, "platform_version", "")), cuda_runtime=runtime, cudnn=cudnn)
    return found


def precision_section(dev: Any) -> dict[str, Any]:
    k = kit.PROBE_K
    a = jax.device_put(jnp.ones((k, k)) * 1.0001, dev)
    b = jax.device_put(jnp.ones((k, k)), dev)
    image = jax.device_put(jnp.ones((1, 8, 8, k)) * 1.0001, dev)
    kernel = jax.device_put(jnp.ones((1, 1, k, 1)), dev)
    found: dict[str, Any] = {}
    modes = [("fp32", "highest"), ("tf32", "tensorfloat32")] if found_gpu(dev) else [("fp32", "highest")]
    for name, precision in modes:
        with jax.default_matmul_precision(precision):  # as the suite sets jax_default_matmul_precision
            matmul = jax.jit(lambda x, y: jnp.mean(x @ y))
            conv = jax.jit(lambda x, w: jnp.mean(jax.lax.conv_general_dilated(
                x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))))
            found[f"matmul_{name}"] = float(matmul(a, b))
            found[f"conv_{name}"] = float(conv(image, kernel))
    return found


def amp_section(dev: Any, compute: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    class Probe(hk.Module):
        def __call__(self, x: Any) -> Any:
            x = hk.Conv2D(8, 3, padding="VALID", name="conv")(x)
            seen["conv"] = x.dtype.name  # dtypes are static: read while tracing the step
            x = hk.Flatten()(jax.nn.relu(x))
            x = hk.Linear(10, name="dense")(x)
            seen["matmul"] = x.dtype.name
            return x

    hk.mixed_precision.set_policy(Probe, jmp.Policy(param_dtype=jnp.float32, compute_dtype=compute,
                                                    output_dtype=jnp.float32))
    try:
        net = hk.without_apply_rng(hk.transform(lambda x: Probe()(x)))
        x = jax.device_put(jnp.ones((4, 8, 8, 3)), dev)
        y = jax.device_put(jnp.arange(4), dev)
        params = net.init(jax.random.PRNGKey(0), x)

        def loss_fn(p: Any) -> Any:
            logits = net.apply(p, x)
            seen["logits"] = logits.dtype.name
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        grads = jax.jit(jax.grad(loss_fn))(params)
        seen["params"] = sorted({leaf.dtype.name for leaf in jax.tree_util.tree_leaves(params)})
        seen["grads"] = sorted({leaf.dtype.name for leaf in jax.tree_util.tree_leaves(grads)})
        return seen
    finally:
        hk.mixed_precision.clear_policy(Probe)


def _scaled_steps(dev: Any, initial: float, steps: int) -> tuple[float, bool]:
    policy = jmp.get_policy("params=float32,compute=float16,output=float32")
    w = jax.device_put(jax.random.uniform(jax.random.PRNGKey(0), (16, 4)), dev)
    x = jax.device_put(jax.random.uniform(jax.random.PRNGKey(1), (8, 16)), dev)

    def loss_fn(params: Any, scale: Any) -> Any:
        p, inputs = policy.cast_to_compute((params, x))
        out = policy.cast_to_output(inputs @ p)
        return scale.scale(jnp.mean(jnp.square(out.astype(jnp.float32))))

    @jax.jit
    def step(params: Any, scale: Any) -> tuple[Any, Any]:
        grads = scale.unscale(jax.grad(loss_fn)(params, scale))
        finite = jmp.all_finite(grads)
        new = params - 0.1 * grads
        return jmp.select_tree(finite, new, params), scale.adjust(finite)

    scale = jmp.DynamicLossScale(jnp.asarray(initial, jnp.float32), period=kit.GROWTH_INTERVAL)
    params = w
    for _ in range(steps):
        params, scale = step(params, scale)
    return float(scale.loss_scale), not bool(jnp.array_equal(params, w))


def loss_scale_section(dev: Any) -> dict[str, Any]:
    after_overflow, overflow_changed = _scaled_steps(dev, kit.OVERFLOW_SCALE, 1)
    grown, finite_changed = _scaled_steps(dev, kit.GROWTH_SCALE, kit.GROWTH_INTERVAL)
    return {"initial": kit.OVERFLOW_SCALE, "after_overflow": after_overflow,
            "overflow_params_unchanged": not overflow_changed, "growth_initial": kit.GROWTH_SCALE,
            "growth_interval": kit.GROWTH_INTERVAL, "finite_steps": kit.GROWTH_INTERVAL,
            "after_finite_steps": grown, "finite_params_changed": finite_changed}


def timing_section(dev: Any) -> dict[str, Any]:
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    width, batch = kit.TIMING_WIDTH, kit.TIMING_BATCH
    params = jax.device_put({"w1": jax.random.normal(keys[0], (width, width)) * 0.05, "w2":
                             jax.random.normal(keys[1], (width, 10)) * 0.05}, dev)
    x = jax.device_put(jax.random.uniform(keys[2], (batch, width)), dev)
    y = jax.device_put(jax.random.randint(keys[3], (batch,), 0, 10), dev)

    def loss_fn(p: Any) -> Any:
        logits = jax.nn.relu(x @ p["w1"]) @ p["w2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train(p: Any) -> tuple[Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(p)
        return jax.tree_util.tree_map(lambda a, g: a - 0.01 * g, p, grads), loss

    state: list[Any] = [params, None]

    def step() -> None:
        state[0], state[1] = train(state[0])

    def wait() -> None:
        jax.block_until_ready(state)

    return kit.time_steps(step, wait, method="host clock after block_until_ready")


def memory_section(dev: Any) -> dict[str, Any]:
    if not found_gpu(dev):
        return {"api": None}
    block = jax.device_put(jnp.zeros((kit.MEMORY_PROBE_BYTES // 4,), jnp.float32), dev)
    jax.block_until_ready(block)
    stats = dev.memory_stats() or {}
    return {"api": "Device.memory_stats()['peak_bytes_in_use']", "peak_bytes": stats.get("peak_bytes_in_use"),
            "allocated_bytes": kit.MEMORY_PROBE_BYTES}


def preallocation_section(dev: Any) -> dict[str, Any]:
    stats = (dev.memory_stats() or {}) if found_gpu(dev) else {}
    return {"preallocate_env": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "bytes_reserved": stats.get("pool_bytes", stats.get("bytes_reserved")),
            "bytes_limit": stats.get("bytes_limit")}


def main(argv: list[str]) -> None:
    dev = _choose(argv[0] if argv else "auto")
    report: dict[str, Any] = {}
    kit.section(report, "device", lambda: device_section(dev))
    kit.section(report, "preallocation", lambda: preallocation_section(dev))
    kit.section(report, "precision", lambda: precision_section(dev))
    kit.section(report, "amp_fp16", lambda: amp_section(dev, jnp.float16))
    kit.section(report, "amp_bf16", lambda: amp_section(dev, jnp.bfloat16))
    kit.section(report, "loss_scale", lambda: loss_scale_section(dev))
    kit.section(report, "timing", lambda: timing_section(dev))
    kit.section(report, "memory", lambda: memory_section(dev))
    kit.emit(report)


if __name__ == "__main__":
    main(sys.argv[1:])
