"""The ``fp8`` precision in JAX: the recipe of :mod:`amp_suite.numerics.fp8` as a ``jax.custom_vjp`` matmul.

JAX's maintained facility is Flax's ``flax.linen.fp8_ops`` (``Fp8DotGeneralOp``,
``in_qdq`` / ``out_qdq``): a quantize-dequantize written in plain ``jnp`` —
scale, clip, cast to ``float8_e4m3fn`` (``float8_e5m2`` for the gradient),
cast back, unscale — around an ordinary ``dot_general``, which XLA's GPU
compiler rewrites into a cuBLASLt FP8 GEMM on FP8 tensor cores (compute
capability 8.9 or newer).  Flax keeps a *delayed* amax history in its own
variable collection; the suite's recipe scales from the *current* amax and
this plugin is written in haiku, so the same quantize-dequantize is written
here (:func:`fp8_matmul`), with the gradient cast in a ``custom_vjp``
(and, as measured below, no FP8 GEMM comes of it on an H100).

The suite's fp8 cells in JAX are emulated on every device: the FP8 casts
are real (XLA's rounding to the FP8 types), the product runs in float32
(float64 for float64 operands, the tests' reference) and is rounded to
bfloat16.  On an H100 (jax 0.11.2, 2026-11-27; docs/gpu.md) XLA did not
rewrite this quantize-dequantize into an FP8 GEMM (no
``__cublas$lt$matmul$f8`` in the compiled program, :func:`fp8_gemm_calls`),
and worse, its GPU compiler removed the FP8 rounding itself: with excess
precision allowed (``--xla_allow_excess_precision``, on by default) its
``SimplifyFPConversions`` pass drops a narrowing round trip such as
``f32 -> f8e4m3fn -> f32``, and the layer's products matched the unrounded
ones to three digits, 4-7% from the recipe.  So :func:`fake_quantize` holds
the FP8 values behind ``jax.lax.optimization_barrier``, which no pass looks
through, and so are the products rounded to bfloat16 (a float32 weight's
gradient would make that ``f32 -> bf16 -> f32``): the rounding stays, on a CPU
(where the bits are unchanged) and on a GPU.  The barrier also rules out the
GEMM rewrite, which did not happen.

The FP8 layers are haiku modules of their own class (:func:`projection_class`)
with a jmp policy of float32 parameters and compute and a bfloat16 output:
the weight is cast to FP8 from the float32 master weight, as in every
framework, while the rest of the model keeps the bfloat16 policy of
``amp_bf16``.  JAX is imported inside the functions.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from amp_suite.numerics.fp8 import RECIPE
from amp_suite.numerics.fp8_scales import RecorderStack

# The recorder of the step being traced (trace.py's trace_step), else None: the FP8 matmuls hand it their casts.
_RECORDERS = RecorderStack()
recording = _RECORDERS.recording
_hand_over = _RECORDERS.hand_over


def _observe(label: tuple[str, str] | None, operand: str, values: Any, format_name: str, max_finite: float) -> None:
    """When a recorder is on while this is traced: hand it ``values`` and the amax and scale :func:`quantize` gives
    them, as the program runs."""
    if not _RECORDERS.active or label is None:
        return
    import jax

    amax, scale = amax_and_scale(values, max_finite)
    jax.debug.callback(partial(_hand_over, label, operand, format_name), values, amax, scale)


def amax_and_scale(values: Any, max_finite: float) -> tuple[Any, Any]:
    """The amax of ``values`` (non-finite values left out) and the scale ``max_finite / amax`` (1 for amax 0)."""
    import jax.numpy as jnp

    magnitude = jnp.abs(values)
    amax = jnp.max(jnp.where(jnp.isfinite(magnitude), magnitude, jnp.zeros_like(magnitude)))
    return amax, jnp.where(amax > 0, max_finite / amax, jnp.ones_like(amax)).astype(values.dtype)

# What XLA's GPU compiler names the cuBLASLt FP8 GEMM it rewrites a quantize-dequantize matmul into.
FP8_GEMM_TARGET = "__cublas$lt$matmul$f8"


def quantize(values: Any, format_name: str, max_finite: float) -> tuple[Any, Any]:
    """``(q, scale)``: ``values`` scaled by ``max_finite / amax`` (1 when the amax is 0, non-finite values left
    out of it), saturated and cast to the FP8 dtype ``format_name``; ``scale`` in ``values``' dtype."""
    import jax.numpy as jnp

    _, scale = amax_and_scale(values, max_finite)
    q = jnp.clip(values * scale, -max_finite, max_finite).astype(getattr(jnp, format_name))
    return q, scale


def fake_quantize(values: Any, format_name: str, max_finite: float) -> Any:
    """``values`` through the scaled FP8 cast and back, in ``values``' dtype; the FP8 values pass an optimization
    barrier, so no compiler pass can drop the round trip (the module's text says why)."""
    import jax

    q, scale = quantize(values, format_name, max_finite)
    return jax.lax.optimization_barrier(q).astype(values.dtype) / scale


@cache
def _matmul(label: tuple[str, str] | None = None) -> Any:
    """The recipe's matmul; ``label`` (layer, projection) names its casts to a :func:`recording` recorder."""
    import jax
    import jax.numpy as jnp

    e4m3, e5m2 = RECIPE.forward_format, RECIPE.gradient_format
    output_dtype = getattr(jnp, RECIPE.output_format.name)

    def rounded(product: Any) -> Any:
        """A product rounded to the recipe's output format, behind a barrier: cast back to float32 (a float32
        weight's gradient), the round trip would be XLA's to drop, as it dropped the FP8 one."""
        return jax.lax.optimization_barrier(product.astype(output_dtype))

    def wide(x: Any) -> Any:
        return jnp.float64 if x.dtype == jnp.float64 else jnp.float32

    def operands(x: Any, w: Any) -> tuple[Any, Any]:
        dtype = wide(x)
        _observe(label, "input", x.astype(dtype), e4m3.name, e4m3.max_finite)
        _observe(label, "weight", w.astype(dtype), e4m3.name, e4m3.max_finite)
        return (fake_quantize(x.astype(dtype), e4m3.name, e4m3.max_finite),
                fake_quantize(w.astype(dtype), e4m3.name, e4m3.max_finite))

    @jax.custom_vjp
    def matmul(x: Any, w: Any) -> Any:
        x_q, w_q = operands(x, w)
        return rounded(x_q @ w_q)

    def forward(x: Any, w: Any) -> tuple[Any, Any]:
        x_q, w_q = operands(x, w)
        # zero-size arrays carry the primal dtypes, which the cotangents must have
        return rounded(x_q @ w_q), (x_q, w_q, jnp.zeros((0,), x.dtype), jnp.zeros((0,), w.dtype))

    def backward(residuals: Any, grad: Any) -> tuple[Any, Any]:
        x_q, w_q, x_like, w_like = residuals
        _observe(label, "gradient", grad.astype(x_q.dtype), e5m2.name, e5m2.max_finite)
        g = fake_quantize(grad.astype(x_q.dtype), e5m2.name, e5m2.max_finite)
        grad_x = rounded(g @ w_q.T).astype(x_like.dtype)
        flat_x, flat_g = x_q.reshape(-1, x_q.shape[-1]), g.reshape(-1, g.shape[-1])
        grad_w = rounded(flat_x.T @ flat_g).astype(w_like.dtype)
        return grad_x, grad_w

    matmul.defvjp(forward, backward)
    return matmul


def fp8_matmul(x: Any, w: Any, label: tuple[str, str] | None = None) -> Any:
    """``x @ w`` (``w`` canonical ``(in, out)``) under the recipe, bfloat16 out; its gradient casts to e5m2."""
    return _matmul(label)(x, w)


def fp8_dense(x: Any, w: Any, b: Any = None, label: tuple[str, str] | None = None) -> Any:
    """:func:`fp8_matmul`, then the bias added in bfloat16 (outside the FP8 matmul)."""
    out = fp8_matmul(x, w, label)
    return out if b is None else out + b.astype(out.dtype)


@cache
def projection_class() -> type:
    """The haiku module of an FP8 layer, with its jmp policy: float32 parameters and compute, bfloat16 output.

    ``Fp8Projection(name=LAYER)(x, w_leaf, b_leaf, features)`` makes (or reads)
    the parameters ``LAYER/w_leaf`` ``(in, features)`` and ``LAYER/b_leaf``
    (none when ``b_leaf`` is empty) and applies :func:`fp8_dense`; one module
    called twice keeps one name scope (an attention layer's ``qkv`` and ``out``).
    """
    import haiku as hk
    import jax.numpy as jnp
    import jmp

    class Fp8Projection(hk.Module):
        def __init__(self, name: str) -> None:
            super().__init__(name=name)
            self.layer = name  # the neutral layer name, for the recorder

        def __call__(self, x: Any, w_leaf: str, b_leaf: str, features: int) -> Any:
            w = hk.get_parameter(w_leaf, (x.shape[-1], features), jnp.float32, init=jnp.zeros)
            b = hk.get_parameter(b_leaf, (features,), jnp.float32, init=jnp.zeros) if b_leaf else None
            projection = w_leaf.removesuffix("w").removesuffix("_")  # "w" -> "", "qkv_w" -> "qkv"
            return fp8_dense(x, w, b, (self.layer, projection))

    output = getattr(jnp, RECIPE.output_format.name)
    hk.mixed_precision.set_policy(Fp8Projection, jmp.Policy(param_dtype=jnp.float32, compute_dtype=jnp.float32,
                                                            output_dtype=output))
    return Fp8Projection


def fp8_gemm_calls(compiled_text: str) -> int:
    """How many FP8 GEMM calls a compiled XLA program's text makes (``jax.jit(f).lower(...).compile().as_text()``):
    above 0 on a GPU with FP8 tensor cores, the sign that a quantize-dequantize became a native FP8 matmul."""
    return compiled_text.count(FP8_GEMM_TARGET)


def fp8_note() -> str:
    """The ``PrecisionApplied`` note of the fp8 layers' matmuls: emulated on every device (the module's text)."""
    return ("fp8 matmuls=emulated (operands cast to float8_e4m3fn / float8_e5m2 with their scales and back, behind "
            "an optimization barrier so XLA keeps the rounding; float32 matmul, bfloat16 result; the head and "
            "everything else as under amp_bf16)")
