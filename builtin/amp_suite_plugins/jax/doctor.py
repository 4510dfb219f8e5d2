"""The doctor's JAX probe: ``python -m amp_suite_plugins.jax.doctor cpu|auto``.

Uses JAX's, haiku's and jmp's own APIs (matmul precision, ``jmp.Policy`` on a
haiku module, ``jmp.DynamicLossScale``, ``block_until_ready``,
``Device.memory_stats``) the way the suite's recipe does, never the plugin's
internals.  The doctor sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before
this module imports JAX; the ``preallocation`` section reports what it found.
The sections that hold for any JAX backend (loss scale, timing, memory,
preallocation) are :mod:`amp_suite_plugins.jax.xla_checks`, which the Flax
example's probe runs too; device, precision and AMP are haiku's recipe, here.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import jax

if len(sys.argv) > 1 and sys.argv[1] == "cpu":  # before any backend starts
    jax.config.update("jax_platforms", "cpu")


class _Notes(logging.Handler):
    """Keeps the warnings JAX logs while it looks for and starts its backends (plugin errors among them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        self.lines.append(" ".join(text.split())[:500])


NOTES = _Notes()
logging.getLogger("jax._src.xla_bridge").addHandler(NOTES)
# Why the GPU backend is not usable: jax.devices("gpu")'s error and JAX's own record of failed backends.
GPU_ERRORS: list[str] = []

import haiku as hk  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jmp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from amp_suite.doctor import probe_kit as kit  # noqa: E402
from amp_suite_plugins.jax.plugin import cuda_versions  # noqa: E402
from amp_suite_plugins.jax.xla_checks import (  # noqa: E402
    found_gpu,
    loss_scale_section,
    memory_section,
    preallocation_section,
    timing_section,
)


def _choose(requested: str) -> Any:
    if requested != "cpu":
        try:
            return jax.devices("gpu")[0]
        except RuntimeError as exc:
            GPU_ERRORS.append(str(exc))
        try:
            from jax._src import xla_bridge

            GPU_ERRORS.extend(f"{name}: {error}" for name, error in
                              (getattr(xla_bridge, "_backend_errors", None) or {}).items())
        except Exception:  # a private record: absent in some versions
            pass
    return jax.devices("cpu")[0]


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def device_section(dev: Any) -> dict[str, Any]:
    plugins = [name for name in ("jax_cuda13_plugin", "jax_cuda12_plugin") if _importable(name)]
    found: dict[str, Any] = {"kind": "gpu" if found_gpu(dev) else "cpu", "cuda_build": bool(plugins)}
    if plugins:  # the plugin's name says the CUDA major it was built for
        found["cuda_build_version"] = plugins[0].removeprefix("jax_cuda").removesuffix("_plugin")
    if GPU_ERRORS:
        found["gpu_error"] = " | ".join(dict.fromkeys(" ".join(e.split()) for e in GPU_ERRORS))[:1000]
    if NOTES.lines:
        found["log_notes"] = list(dict.fromkeys(NOTES.lines))[:10]
    if found["kind"] == "gpu":
        found.update(cuda_versions())
        found.update(name=dev.device_kind, compute_capability=str(getattr(dev, "compute_capability", "")),
                     driver=str(getattr(dev.client, "platform_version", "")))
        # cuDNN loads lazily: run one convolution, then see which libcudnn files are mapped.
        conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME"))
        jax.block_until_ready(conv(jax.device_put(jnp.ones((1, 8, 8, 8)), dev),
                                   jax.device_put(jnp.ones((8, 8, 3, 3)), dev)))
        found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")
    return found


def precision_section(dev: Any) -> dict[str, Any]:
    k = kit.PROBE_K
    a = jax.device_put(jnp.ones((k, k)) * 1.0001, dev)
    b = jax.device_put(jnp.ones((k, k)), dev)
    hw = kit.CONV_PROBE_HW  # CONV_PROBE_IN channels of 1.0001 into CONV_PROBE_OUT all-ones 1x1 filters
    image = jax.device_put(jnp.ones((1, hw, hw, kit.CONV_PROBE_IN)) * 1.0001, dev)
    kernel = jax.device_put(jnp.ones((1, 1, kit.CONV_PROBE_IN, kit.CONV_PROBE_OUT)), dev)
    found: dict[str, Any] = {}
    modes = [("fp32", "highest"), ("tf32", "tensorfloat32")] if found_gpu(dev) else [("fp32", "highest")]
    for name, precision in modes:
        with jax.default_matmul_precision(precision):  # as the suite sets jax_default_matmul_precision
            matmul = jax.jit(lambda x, y: x @ y)
            conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
                x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")))
            # averaged on the host in float64, so no float32 reduction blurs the two answers
            found[f"matmul_{name}"] = float(np.mean(np.asarray(matmul(a, b)), dtype=np.float64))
            found[f"conv_{name}"] = float(np.mean(np.asarray(conv(image, kernel)), dtype=np.float64))
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
