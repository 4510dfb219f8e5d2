"""The Keras plugins' ``keep_fp32``: a kept layer's Keras layers built under the ``float32`` dtype policy.

Keras casts a layer's floating inputs to its compute dtype, so the kept
layer's float16 or bfloat16 input is cast up and its variables are used in
float32; a ``linear`` activation built under the run's mixed policy after it
casts its output back to the compute dtype, as :mod:`amp_suite.workloads.kept`
defines for every framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def in_float32(keras: Any, build: Callable[[], Any], name: str) -> Any:
    """``build()`` (the kept layer's Keras calls) under the float32 policy, its output cast back."""
    policy = keras.mixed_precision.global_policy()
    if policy.compute_dtype == policy.variable_dtype:  # fp32, tf32, fp64: nothing runs below its variables' dtype
        return build()
    keras.mixed_precision.set_global_policy("float32")
    try:
        out = build()
    finally:
        keras.mixed_precision.set_global_policy(policy)
    return keras.layers.Activation("linear", name=f"{name}_to_compute" if name else None)(out)
