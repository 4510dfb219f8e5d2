"""Keras layers for the token kinds of ``docs/layers.md``, the same on every Keras backend.

Imported by the Keras plugins inside their hooks only (this module imports
Keras).  Each layer follows Keras's mixed-precision rules: its variables are
created in the policy's variable dtype (float32, float64 under fp64) and read
in its compute dtype inside ``call`` (Keras's ``autocast``), so a projection
or a lookup computes in float16 / bfloat16 under ``mixed_float16`` /
``mixed_bfloat16``.  The float32 islands of the suite's AMP policy are forced
here, with ``autocast=False`` as Keras's own ``LayerNormalization`` does:
the statistics and normalization of ``layer_norm`` and ``rms_norm`` and the
softmax of the reference attention.  Float64
inputs stay float64 everywhere (fp64, the reference of the tests).

``token_embedding`` is Keras's
``Embedding`` and ``patch_embed`` Keras's ``Conv2D`` then ``Reshape``: see
:mod:`amp_suite_plugins.keras.model`.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

# The attention implementations of the framework option ``attention``.
ATTENTION_IMPLEMENTATIONS = ("fused", "reference")
# Added to the logits a causal mask hides: exp() of it is 0 in float32 and float64.
MASKED_LOGIT = -1e30


def project(x: Any, w: Any, b: Any = None) -> Any:
    """``x @ w + b`` on the last axis.  A float64 ``x`` goes through ``ops.einsum``: Keras's ``ops.matmul``
    computes float64 in float32 on its PyTorch backend (Keras's type promotion maps 64-bit results to 32-bit
    outside TensorFlow, ``keras/src/backend/common/dtypes.py``), its ``einsum`` keeps float64."""
    y = ops.einsum("...i,io->...o", x, w) if keras.backend.standardize_dtype(x.dtype) == "float64" else ops.matmul(x, w)
    return y if b is None else y + b


class ExactGelu(keras.layers.Layer):
    """The exact GELU, ``x * (1 + erf(x / sqrt(2))) / 2``: Keras's ``gelu(approximate=False)``, except for
    float64 inputs, which it computes from ``ops.erf`` with a float64 constant (TensorFlow's float64
    ``tf.nn.gelu`` is 1.3e-9 off, a float32 constant inside)."""

    def call(self, inputs: Any) -> Any:
        if keras.backend.standardize_dtype(inputs.dtype) != "float64":
            return keras.activations.gelu(inputs, approximate=False)
        return 0.5 * inputs * (1.0 + ops.erf(inputs * (1.0 / math.sqrt(2.0))))


class TokenDense(keras.layers.Dense):
    """Keras's ``Dense`` (same variables, same call) whose float64 matmul stays float64 on every backend
    (see :func:`project`)."""

    def call(self, inputs: Any, training: Any = None) -> Any:
        if keras.backend.standardize_dtype(inputs.dtype) != "float64":
            return super().call(inputs, training=training)
        return self.activation(project(inputs, self.kernel, self.bias))


def _island_dtype(x: Any) -> str:
    """float32, or float64 for float64 inputs: where the suite keeps normalization statistics and softmax."""
    return "float64" if keras.backend.standardize_dtype(x.dtype) == "float64" else "float32"


class ClassToken(keras.layers.Layer):
    """A learned vector (``token``, ``(features,)``) prepended as token 0: ``(n, t, f)`` -> ``(n, t + 1, f)``."""

    def build(self, input_shape: Any) -> None:
        self.token = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="token")

    def call(self, inputs: Any) -> Any:
        token = ops.cast(self.token, inputs.dtype)
        rows = ops.broadcast_to(ops.reshape(token, (1, 1, -1)), (ops.shape(inputs)[0], 1, inputs.shape[-1]))
        return ops.concatenate([rows, inputs], axis=1)

    def compute_output_shape(self, input_shape: Any) -> Any:
        tokens = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], tokens, input_shape[2])


class PositionEmbedding(keras.layers.Layer):
    """A learned ``(tokens, features)`` table added to every example's tokens."""

    def build(self, input_shape: Any) -> None:
        self.table = self.add_weight(shape=tuple(input_shape[1:]), initializer="zeros", name="table")

    def call(self, inputs: Any) -> Any:
        return inputs + ops.cast(self.table, inputs.dtype)[None]


class TokenLayerNormalization(keras.layers.Layer):
    """``(x - mean) / sqrt(biased variance + epsilon) * scale + offset`` over the last axis, in float32
    (float64 for float64 inputs).

    Keras's own ``LayerNormalization`` keeps the same float32 island under
    mixed policies (``autocast = False``, and ``ops.layer_normalization``
    computes in ``result_type(x.dtype, "float32")``), but on the JAX backend
    it computes a float64 input in float32 (relative error ~1e-7 under fp64),
    so the suite states the computation once, here, for every dtype.
    """

    def __init__(self, epsilon: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.autocast = False

    def build(self, input_shape: Any) -> None:
        f = input_shape[-1]
        self.scale = self.add_weight(shape=(f,), initializer="ones", name="scale", autocast=False)
        self.offset = self.add_weight(shape=(f,), initializer="zeros", name="offset", autocast=False)

    def call(self, inputs: Any) -> Any:
        dtype = _island_dtype(inputs)
        x = ops.cast(inputs, dtype)
        count = float(x.shape[-1])
        mean = ops.sum(x, axis=-1, keepdims=True) / count
        centered = x - mean
        variance = ops.sum(ops.square(centered), axis=-1, keepdims=True) / count
        out = centered * ops.rsqrt(variance + self.epsilon) * ops.cast(self.scale, dtype) + ops.cast(self.offset, dtype)
        return ops.cast(out, self.compute_dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "epsilon": self.epsilon}


class TokenRMSNormalization(keras.layers.Layer):
    """``x / sqrt(mean(x^2) + epsilon) * scale`` over the last axis, in float32 (float64 for float64 inputs).

    ``autocast=False`` as in Keras's ``LayerNormalization``: the input arrives in
    the compute dtype, ``scale`` stays float32, the statistics and the
    normalization run in float32 and the output is cast to the compute dtype.
    """

    def __init__(self, epsilon: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.autocast = False

    def build(self, input_shape: Any) -> None:
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale", autocast=False)

    def call(self, inputs: Any) -> Any:
        dtype = _island_dtype(inputs)
        x = ops.cast(inputs, dtype)
        mean_square = ops.sum(ops.square(x), axis=-1, keepdims=True) / float(x.shape[-1])
        out = x * ops.rsqrt(mean_square + self.epsilon) * ops.cast(self.scale, dtype)
        return ops.cast(out, self.compute_dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "epsilon": self.epsilon}


class TokenAttention(keras.layers.Layer):
    """Multi-head self-attention with one fused q/k/v projection (``docs/layers.md``).

    Variables ``qkv_w`` ``(f, 3f)``, ``qkv_b``, ``out_w`` ``(f, f)``, ``out_b``;
    ``[q | k | v]`` along the last axis of the projection, each split into
    ``heads`` contiguous slices.  ``implementation``: ``fused`` calls
    ``keras.ops.dot_product_attention`` (``is_causal``), which each backend
    runs its own way (see ``docs/layers.md``); ``reference`` is the explicit
    ``q kᵀ`` -> softmax -> ``@ v`` with the logits upcast to float32 (float64
    for float64 inputs) for the softmax and the probabilities cast back to the
    compute dtype for the weighted sum.  Projections and both matmuls run in
    the compute dtype.
    """

    def __init__(self, heads: int, causal: bool, implementation: str = "fused", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(f"attention implementation {implementation!r} is not one of "
                             f"{', '.join(ATTENTION_IMPLEMENTATIONS)}")
        self.heads, self.causal, self.implementation = heads, causal, implementation

    def build(self, input_shape: Any) -> None:
        f = input_shape[-1]
        self.qkv_w = self.add_weight(shape=(f, 3 * f), initializer="zeros", name="qkv_w")
        self.qkv_b = self.add_weight(shape=(3 * f,), initializer="zeros", name="qkv_b")
        self.out_w = self.add_weight(shape=(f, f), initializer="zeros", name="out_w")
        self.out_b = self.add_weight(shape=(f,), initializer="zeros", name="out_b")

    def call(self, inputs: Any) -> Any:
        tokens, f = inputs.shape[1], inputs.shape[2]
        width = f // self.heads
        qkv = self.project(inputs, self.qkv_w, self.qkv_b)
        q, k, v = (ops.reshape(qkv[..., i * f:(i + 1) * f], (-1, tokens, self.heads, width)) for i in range(3))
        scale = 1.0 / math.sqrt(width)
        if self.implementation == "fused":
            fused_scale: Any = scale
            if keras.backend.backend() == "tensorflow" and _island_dtype(q) == "float64":
                # Keras's TensorFlow path does tf.cast(scale, logits.dtype): a Python float becomes a float32
                # constant first (1e-8 off under fp64); a float64 tensor is cast exactly.
                fused_scale = ops.convert_to_tensor(scale, dtype="float64")
            joined = ops.dot_product_attention(q, k, v, scale=fused_scale, is_causal=self.causal)
        else:
            joined = self._reference(q, k, v, scale)
        return self.project(ops.reshape(joined, (-1, tokens, f)), self.out_w, self.out_b)

    def project(self, x: Any, w: Any, b: Any) -> Any:
        """A q/k/v or output projection (:func:`project`; the fp8 precision's subclass puts it in FP8)."""
        return project(x, w, b)

    def _reference(self, q: Any, k: Any, v: Any, scale: float) -> Any:
        """softmax(q kᵀ · scale) v per head: matmuls in the compute dtype, the softmax in float32 (or float64)."""
        logits = ops.einsum("btnh,bsnh->bnts", q, k)
        logits = ops.cast(logits, _island_dtype(logits)) * scale
        if self.causal:
            tokens = q.shape[1]
            seen = ops.tril(ops.ones((tokens, tokens), dtype="bool"))
            logits = ops.where(seen[None, None], logits, ops.cast(MASKED_LOGIT, logits.dtype))
        probabilities = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
        return ops.einsum("bnts,bsnh->btnh", probabilities, v)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "heads": self.heads, "causal": self.causal,
                "implementation": self.implementation}


class TokenMeanPool(keras.layers.Layer):
    """The mean over tokens, ``(n, t, f)`` -> ``(n, f)``: a sum over the tokens divided by their count.

    ``ops.mean`` would compute a float64 input in float32 on the JAX and PyTorch backends (see
    ``parts.GlobalAveragePooling``); the sum keeps the input's dtype on every backend.
    """

    def call(self, inputs: Any) -> Any:
        return ops.sum(inputs, axis=1) / float(inputs.shape[1])

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (input_shape[0], input_shape[2])


class ClassTokenPool(keras.layers.Layer):
    """Token 0 (the class token), ``(n, t, f)`` -> ``(n, f)``."""

    def call(self, inputs: Any) -> Any:
        return inputs[:, 0]

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (input_shape[0], input_shape[2])
