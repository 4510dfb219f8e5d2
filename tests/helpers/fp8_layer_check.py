"""One FP8 dense layer, forward and backward, in one framework against the NumPy reference of the recipe.

Run as ``python fp8_layer_check.py keras-BACKEND DTYPE...`` (``tensorflow``,
``jax``, ``torch``, or ``torch-compiled``: the layer through torch.compile as a
compiled keras@torch fp8 cell sets it up; ``float32`` and/or ``float64``
operands): prints one
JSON line, per dtype and output (``out``, ``grad_x``, ``grad_w``), the
share of elements equal to the reference's and the largest difference in
units of the reference's bfloat16 spacing.  A process per Keras backend
(``KERAS_BACKEND`` is read once per process); the torch and JAX tests call
:func:`compare` in their own process.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from amp_suite.numerics.fp8 import dense_backward, dense_forward

# (batch, tokens, in) activations into (in, out) weights: a token tensor, as in a transformer block.
X_SHAPE, OUT = (3, 5, 24), 16
# The output gradient's scale: tiny, so that without its own scale e5m2 would flush much of it to zero.
GRADIENT_SCALE = 1e-6

# keras-torch-compiled: the PyTorch backend's layer runs through torch.compile (set by main).
COMPILED: list[bool] = []

Layer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str], tuple[Any, Any, Any]]


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``x``, ``w``, ``b`` and the output gradient (held as bfloat16 values in float64)."""
    from amp_suite.numerics.formats import BFLOAT16, round_to

    rng = np.random.default_rng(seed)
    x = round_to(rng.normal(size=X_SHAPE), BFLOAT16)  # what reaches a layer under AMP: bfloat16 activations
    w = rng.normal(scale=0.2, size=(X_SHAPE[-1], OUT))
    b = rng.normal(scale=0.1, size=OUT)
    grad = round_to(rng.normal(scale=GRADIENT_SCALE, size=(*X_SHAPE[:-1], OUT)), BFLOAT16)
    return x, w, b, grad


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    """The largest ``|got - want|`` over the bfloat16 spacing at ``want`` (2**-7 of its binade)."""
    spacing = np.ldexp(1.0, np.frexp(np.where(want == 0, np.finfo(np.float64).tiny, want))[1] - 8)
    return float(np.max(np.abs(got - want) / spacing))


def compare(layer: Layer, dtype: str, seed: int = 0) -> dict[str, dict[str, float]]:
    """Run ``layer(x, w, b, grad, dtype) -> (out, grad_x, grad_w)`` (NumPy float64 arrays of the framework's
    values) and compare each with the reference at the operands the framework really held."""
    x, w, b, grad = operands(seed)
    x, w, b = (np.asarray(np.asarray(a, dtype), np.float64) for a in (x, w, b))
    out, grad_x, grad_w = layer(x, w, b, grad, dtype)
    want_out = dense_forward(x, w, b)
    want_x, want_w = dense_backward(x, w, grad)
    report = {}
    for name, got, want in (("out", out, want_out), ("grad_x", grad_x, want_x), ("grad_w", grad_w, want_w)):
        got = np.asarray(got, np.float64)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        report[name] = {"equal": float(np.mean(got == want)), "ulps": _ulps(got, want)}
    return report


def keras_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray, dtype: str) -> tuple[Any, Any, Any]:
    import keras
    from keras import ops

    from amp_suite_plugins.keras.fp8 import fp8_dense

    xt, wt, bt = (ops.convert_to_tensor(np.asarray(a, dtype)) for a in (x, w, b))
    upstream = ops.cast(ops.convert_to_tensor(np.asarray(grad, np.float32)), "bfloat16")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch([xt, wt])
            out = fp8_dense(xt, wt, bt)
        grad_x, grad_w = tape.gradient(out, [xt, wt], output_gradients=upstream)
    elif backend == "jax":
        import jax

        out, pullback = jax.vjp(lambda a, c: fp8_dense(a, c, bt), xt, wt)
        grad_x, grad_w = pullback(upstream)
    else:
        import torch

        xt.requires_grad_(True)
        wt.requires_grad_(True)
        forward = lambda a, c: fp8_dense(a, c, bt)  # noqa: E731
        if COMPILED:
            torch._dynamo.reset()
            forward = torch.compile(forward)
        out = forward(xt, wt)
        out.backward(upstream)
        grad_x, grad_w = xt.grad, wt.grad

    def numpy(t: Any) -> np.ndarray:
        return np.asarray(ops.convert_to_numpy(ops.cast(t, "float64" if dtype == "float64" else "float32")))

    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(grad_w.dtype) == dtype  # the gradient of the variable, in its dtype
    return numpy(out), numpy(grad_x), numpy(grad_w)


def main(argv: list[str]) -> None:
    framework, dtypes = argv[0], (argv[1:] or ["float32"])
    if framework not in ("keras-tensorflow", "keras-jax", "keras-torch", "keras-torch-compiled"):
        raise SystemExit(f"unknown framework {framework!r}; allowed: keras-tensorflow, keras-jax, keras-torch, "
                         "keras-torch-compiled")
    os.environ["KERAS_BACKEND"] = framework.removeprefix("keras-").removesuffix("-compiled")
    if framework == "keras-torch-compiled":  # as a compiled keras@torch fp8 cell: its set_precision, then compile
        from amp_suite.records import DeviceInfo, RunSpec
        from amp_suite_plugins.keras import on_torch
        from amp_suite_plugins.torch.fp8 import COMPILED_ROUNDING_NOTE

        applied = on_torch.set_precision(RunSpec(framework="keras@torch", workload="w", precision="fp8",
                                                 mode="compiled"), DeviceInfo(kind="cpu", platform="cpu", name="cpu"))
        assert COMPILED_ROUNDING_NOTE in applied.notes, applied.notes
        COMPILED.append(True)
    if "float64" in dtypes and os.environ["KERAS_BACKEND"] == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)  # float32 arrays stay float32 with it on
    print(json.dumps({dtype: compare(keras_layer, dtype) for dtype in dtypes}))


if __name__ == "__main__":
    main(sys.argv[1:])
