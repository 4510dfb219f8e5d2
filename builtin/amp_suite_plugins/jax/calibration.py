"""JAX's calibration probe: ``python -m amp_suite_plugins.jax.calibration DEVICE BUDGET``.

Peak matmul and convolution TFLOP/s per dtype (the protocol and the timing:
:mod:`amp_suite.calibration.kit`), each operation jitted with the matmul
precision the suite's cells use (``HIGHEST`` for float32, ``DEFAULT`` for
TF32).  On a GPU a timed call dispatches ``GPU_CALLS_PER_SYNC`` operations
and waits for the last (they run in order).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from amp_suite.calibration import kit


def probe(device: str, budget_s: float) -> dict[str, Any]:
    """The figures of ``device`` (``auto``, ``cpu`` or ``gpu``), ``budget_s`` seconds of calls per figure."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    if device == "cpu":
        target = jax.devices("cpu")[0]
    elif device == "gpu":
        try:
            target = jax.devices("gpu")[0]
        except RuntimeError as exc:
            raise kit.gpu_unusable("JAX", " ".join(str(exc).split())[:300]) from None
    else:
        target = jax.devices()[0]
    kind = "cpu" if target.platform == "cpu" else "gpu"
    repeats = kit.GPU_CALLS_PER_SYNC if kind == "gpu" else 1
    tf32_ok = kind == "gpu" and float(getattr(target, "compute_capability", "0") or 0) >= 8.0
    dtypes = {"fp32": jnp.float32, "tf32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}

    out: dict[str, Any] = {"device": getattr(target, "device_kind", target.platform), "kind": kind,
                           "version": jax.__version__, "calls_per_sync": repeats}
    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        precision = jax.lax.Precision.DEFAULT if dtype_name == "tf32" else jax.lax.Precision.HIGHEST

        def matmul(n: int, dtype: Any = dtype, precision: Any = precision) -> kit.Call:
            a = jax.device_put(kit.host_normal((n, n), dtype, seed=0), target)
            b = jax.device_put(kit.host_normal((n, n), dtype, seed=1), target)
            fn = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision))
            return kit.batched_call(fn, a, b, repeats=repeats)

        def conv(batch: int, dtype: Any = dtype, precision: Any = precision) -> kit.Call:
            x = jax.device_put(kit.host_normal((batch, kit.CONV_HW, kit.CONV_HW, kit.CONV_CHANNELS), dtype), target)
            w = jax.device_put(kit.host_normal((kit.CONV_KERNEL, kit.CONV_KERNEL, kit.CONV_CHANNELS,
                                                kit.CONV_CHANNELS), dtype, seed=1), target)
            fn = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
                x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision))
            return kit.batched_call(fn, x, w, repeats=repeats)

        kit.measure_both(out, dtype_name, kind, matmul, conv, budget_s, repeats)
    return out


if __name__ == "__main__":
    sys.exit(kit.probe_main(probe, sys.argv[1:]))
