"""The doctor's sections that hold for any JAX backend, whichever library builds its model.

Loss scaling with ``jmp.DynamicLossScale``, the timing of a jitted MLP step
read after ``block_until_ready``, device memory through
``Device.memory_stats`` and what XLA preallocated: JAX's, jmp's and optax's
own APIs, no model library's.  The built-in backend's probe
(:mod:`amp_suite_plugins.jax.doctor`, haiku) and a third-party JAX backend's
(the Flax example's ``amp_suite_flax.doctor``) run these as they are and
measure their device, precision and AMP sections with their own recipe.

A doctor probe runs in a process of its own, so this module imports JAX at
once; importing JAX starts no backend, so a probe may still choose the CPU
platform after importing it.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import jmp
import optax

from amp_suite.doctor import probe_kit as kit


def found_gpu(dev: Any) -> bool:
    """Whether ``dev`` is a CUDA GPU (JAX names the platform ``gpu`` or ``cuda``)."""
    return dev.platform in ("gpu", "cuda")


def _scaled_steps(dev: Any, initial: float, steps: int) -> tuple[float, bool]:
    """``steps`` float16 steps under a dynamic loss scale from ``initial``: the scale after, and whether the
    parameters changed."""
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
    return kit.loss_scale_section(lambda initial, steps: _scaled_steps(dev, initial, steps))


def timing_section(dev: Any) -> dict[str, Any]:
    batches, width, hidden = kit.timing_shape(found_gpu(dev))

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
            with jax.default_matmul_precision("highest"):  # a float32 step, as the fp32 cells run it
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
