"""The Flax backend's calibration probe: ``python -m amp_suite_flax.calibration DEVICE BUDGET``.

``framework_info().calibration_probe`` names this module, so ``amp-suite
calibrate`` measures Flax's ceiling as it measures the built-in frameworks':
peak matmul and convolution TFLOP/s per dtype, through ``nnx.Linear`` and
``nnx.Conv`` in the dtype under test (``dtype`` and ``param_dtype`` both),
jitted as the backend's train step is.  ``amp_suite.calibration.kit`` brings
the sizes, the timing and the protocol (``probe_main`` prints the figures).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from amp_suite.plugin_api import calibration_kit as kit


def probe(device: str, budget_s: float) -> dict[str, Any]:
    """The figures of ``device`` (``auto``, ``cpu`` or ``gpu``), ``budget_s`` seconds of calls per figure."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import flax
    import jax
    import jax.numpy as jnp
    from flax import nnx

    if device == "cpu":
        jax.config.update("jax_platforms", "cpu")
        target = jax.devices("cpu")[0]
    elif device == "gpu":
        try:
            target = jax.devices("gpu")[0]
        except RuntimeError as exc:
            raise kit.gpu_unusable("Flax (JAX)", " ".join(str(exc).split())[:300]) from None
    else:
        target = jax.devices()[0]
    kind = "cpu" if target.platform == "cpu" else "gpu"
    repeats = kit.GPU_CALLS_PER_SYNC if kind == "gpu" else 1
    tf32_ok = kind == "gpu" and float(getattr(target, "compute_capability", "0") or 0) >= 8.0
    dtypes = {"fp32": jnp.float32, "tf32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}

    def host_init(key: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """nnx's ``kernel_init``, drawn on the host: an initializer run on the device compiles a program for each
        shape (``kit.host_normal``)."""
        return jnp.asarray(kit.host_normal(shape, dtype))

    def jitted(layer: nnx.Module, x: Any) -> kit.Call:
        """``repeats`` calls of the jitted layer on ``x``, then a wait for the last (they run in order)."""
        graphdef, params = nnx.split(layer)
        apply: Callable[..., Any] = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))
        params, x = jax.device_put((params, x), target)
        return kit.batched_call(apply, params, x, repeats=repeats)

    out: dict[str, Any] = {"device": getattr(target, "device_kind", target.platform), "kind": kind,
                           "version": flax.__version__, "calls_per_sync": repeats}
    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        # as the backend's set_precision: float32 matmuls in full precision unless the cell asks for TF32
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if dtype_name == "tf32" else "highest")

        def matmul(n: int, dtype: Any = dtype) -> kit.Call:
            layer = nnx.Linear(n, n, use_bias=False, dtype=dtype, param_dtype=dtype, kernel_init=host_init,
                               rngs=nnx.Rngs(0))
            return jitted(layer, jnp.asarray(kit.host_normal((n, n), dtype, seed=1)))

        def conv(batch: int, dtype: Any = dtype) -> kit.Call:
            layer = nnx.Conv(kit.CONV_CHANNELS, kit.CONV_CHANNELS, (kit.CONV_KERNEL, kit.CONV_KERNEL),
                             padding="SAME", use_bias=False, dtype=dtype, param_dtype=dtype, kernel_init=host_init,
                             rngs=nnx.Rngs(0))
            images = kit.host_normal((batch, kit.CONV_HW, kit.CONV_HW, kit.CONV_CHANNELS), dtype, seed=1)
            return jitted(layer, jnp.asarray(images))

        kit.measure_both(out, dtype_name, kind, matmul, conv, budget_s, repeats)
    return out


if __name__ == "__main__":
    sys.exit(kit.probe_main(probe, sys.argv[1:]))
