"""The ``fp8`` precision in Keras: the recipe of :mod:`amp_suite.numerics.fp8` in ``keras.ops``, every backend.

Keras's maintained facility is ``Model.quantize("float8")`` (and the
``float8`` dtype policies): it turns ``Dense`` and ``EinsumDense`` layers
into FP8 training layers with a *delayed* amax history (``amax_history_length``,
1024 by default) kept in extra variables that the gradient pass overwrites.  The
suite's recipe scales from the *current* amax, and ``quantize`` would also
turn the head and leave the suite's own attention layer alone, so the same
quantize-dequantize is written here with ``keras.ops`` and
``keras.ops.custom_gradient`` (implemented on TensorFlow, JAX and PyTorch):
each operand scaled by ``max_finite / amax``, saturated, cast to
``float8_e4m3fn`` (the output gradient to ``float8_e5m2``) and back, the
product in float32 (float64 for float64 operands) rounded to bfloat16, the
bias added in bfloat16.

No Keras backend gets an FP8 matmul from this: it is emulated (real FP8
numerics, no FP8 speed), and the Keras plugins record ``emulated`` on every
device.  Where XLA compiles the step (the JAX backend, and TensorFlow under
``jit_compile``), its GPU compiler would drop the FP8 rounding altogether (a
narrowing round trip ``f32 -> f8 -> f32`` under excess precision, XLA's
default: seen on an H100 with JAX, docs/gpu.md), so :func:`fake_quantize`
holds the FP8 values behind the backend's optimization barrier (:func:`_held`),
and so are the products rounded to bfloat16 (a float32 weight's gradient
would otherwise be an ``f32 -> bf16 -> f32`` round trip).

The FP8 layers turn Keras's autocast off (``autocast = False``, as its own
``LayerNormalization`` does): the weight is cast to FP8 from the float32
variable, as in every framework, and the activation arrives in bfloat16 from
the layer before it.  This module imports Keras: the plugins import it inside
their hooks.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

import keras
from keras import ops

from amp_suite.numerics.fp8 import RECIPE
from amp_suite.numerics.fp8_scales import RecorderStack
from amp_suite_plugins.keras.token_layers import TokenAttention, TokenDense

# The recorder of the step being traced (trace.py's trace_step), else None: the FP8 matmuls hand it their casts.
_RECORDERS = RecorderStack()
recording = _RECORDERS.recording
_hand_over = _RECORDERS.hand_over


def _observe(label: tuple[str, str] | None, operand: str, values: Any, format_name: str, max_finite: float) -> None:
    """When a recorder is on: hand it ``values`` and the amax and scale :func:`quantize` gives them."""
    if not _RECORDERS.active or label is None:
        return
    amax, scale = amax_and_scale(values, max_finite)
    if keras.backend.backend() == "jax":
        import jax

        jax.debug.callback(partial(_hand_over, label, operand, format_name), values, amax, scale)
    else:
        _hand_over(label, operand, format_name, ops.convert_to_numpy(ops.stop_gradient(values)),
                   ops.convert_to_numpy(ops.stop_gradient(amax)), ops.convert_to_numpy(ops.stop_gradient(scale)))


def amax_and_scale(values: Any, max_finite: float) -> tuple[Any, Any]:
    """The amax of ``values`` (non-finite values left out) and the scale ``max_finite / amax`` (1 for amax 0)."""
    magnitude = ops.abs(values)
    amax = ops.max(ops.where(ops.isfinite(magnitude), magnitude, ops.zeros_like(magnitude)))
    safe = ops.where(amax > 0, amax, ops.ones_like(amax))
    return amax, ops.where(amax > 0, ops.cast(max_finite, _dtype(values)) / safe, ops.ones_like(amax))


def _dtype(x: Any) -> str:
    return str(keras.backend.standardize_dtype(x.dtype))


def quantize(values: Any, format_name: str, max_finite: float) -> tuple[Any, Any]:
    """``(q, scale)``: ``values`` scaled by ``max_finite / amax`` (1 when the amax is 0, non-finite values left out
    of it), saturated and cast to the FP8 dtype ``format_name``."""
    _, scale = amax_and_scale(values, max_finite)
    q = ops.cast(ops.clip(values * scale, -max_finite, max_finite), format_name)
    return q, scale


def fake_quantize(values: Any, format_name: str, max_finite: float) -> Any:
    """``values`` through the scaled FP8 cast and back, in ``values``' dtype; the FP8 values are :func:`_held`."""
    q, scale = quantize(values, format_name, max_finite)
    return ops.cast(_held(q), _dtype(values)) / scale


def _held(q: Any) -> Any:
    """``q`` behind an optimization barrier where XLA may compile it (JAX; TensorFlow), so that no compiler pass
    can fold a narrowing cast and the cast back into nothing; ``q`` itself on PyTorch, whose eager layers run as
    written (inductor leaves the FP8 casts alone, but its fused kernels skip bfloat16 roundings unless
    ``emulate_precision_casts`` is on, which a compiled keras@torch fp8 cell turns on in ``set_precision``)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.lax.optimization_barrier(q)
    if backend == "tensorflow":
        from tensorflow.compiler.tf2xla.python import xla  # TF's only name for XLA's barrier

        held = xla.optimization_barrier(q)
        return held[0] if isinstance(held, (list, tuple)) else held
    return q


def _product(a: Any, b: Any) -> Any:
    """``a @ b`` over ``a``'s last axis; float64 through ``einsum`` (see token_layers.project)."""
    return ops.einsum("...i,io->...o", a, b) if _dtype(a) == "float64" else ops.matmul(a, b)


@cache
def _matmul(label: tuple[str, str] | None = None) -> Any:
    """The recipe's matmul; ``label`` (layer, projection) names its casts to a :func:`recording` recorder."""
    e4m3, e5m2 = RECIPE.forward_format, RECIPE.gradient_format
    output = RECIPE.output_format.name

    @ops.custom_gradient
    def matmul(x: Any, w: Any) -> Any:
        x_dtype, w_dtype = _dtype(x), _dtype(w)
        wide = "float64" if x_dtype == "float64" else "float32"
        _observe(label, "input", ops.cast(x, wide), e4m3.name, e4m3.max_finite)
        _observe(label, "weight", ops.cast(w, wide), e4m3.name, e4m3.max_finite)
        x_q = fake_quantize(ops.cast(x, wide), e4m3.name, e4m3.max_finite)
        w_q = fake_quantize(ops.cast(w, wide), e4m3.name, e4m3.max_finite)

        def grad(*args: Any, upstream: Any = None) -> Any:
            if upstream is None:  # TensorFlow and JAX pass the upstream gradient alone, PyTorch as a keyword
                (upstream,) = args
            _observe(label, "gradient", ops.cast(upstream, wide), e5m2.name, e5m2.max_finite)
            g = fake_quantize(ops.cast(upstream, wide), e5m2.name, e5m2.max_finite)
            grad_x = ops.cast(_held(ops.cast(_product(g, ops.transpose(w_q)), output)), x_dtype)
            flat_x = ops.reshape(x_q, (-1, x_q.shape[-1]))
            flat_g = ops.reshape(g, (-1, g.shape[-1]))
            grad_w = ops.cast(_held(ops.cast(_product(ops.transpose(flat_x), flat_g), output)), w_dtype)
            return grad_x, grad_w

        return _held(ops.cast(_product(x_q, w_q), output)), grad

    return matmul


def fp8_dense(x: Any, w: Any, b: Any = None, label: tuple[str, str] | None = None) -> Any:
    """``x @ w + b`` under the recipe (``w`` canonical ``(in, out)``), bfloat16 out; the bias added in bfloat16.
    ``label`` (layer, projection) names the matmul to a :func:`recording` recorder."""
    out = _matmul(label)(x, w)
    return out if b is None else out + ops.cast(b, _dtype(out))


def _value(variable: Any) -> Any:
    """A variable's backend tensor in its own dtype (float32): read under an autocast scope of no dtype, since an
    enclosing model's scope (keras@jax's stateless call) would otherwise hand over a bfloat16 copy."""
    if not isinstance(variable, keras.Variable):
        return variable
    from keras.src.backend.common.variables import AutocastScope  # Keras has no public name for it

    with AutocastScope(None):
        return variable.value


class Fp8Dense(TokenDense):
    """``dense`` under the fp8 precision: Keras's ``Dense`` (same variables) whose matmul is :func:`fp8_dense`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.autocast = False

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self.activation(fp8_dense(inputs, _value(self.kernel),
                                         None if self.bias is None else _value(self.bias), (self.name, "")))


class Fp8TokenAttention(TokenAttention):
    """``multi_head_attention`` under the fp8 precision: the q/k/v and output projections are :func:`fp8_dense`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.autocast = False

    def project(self, x: Any, w: Any, b: Any) -> Any:
        projection = "qkv" if w is self.qkv_w else "out"
        return fp8_dense(x, _value(w), _value(b), (self.name, projection))
