"""The JAX translations of the token kinds: token tables, layer and RMS norms, pooling, multi-head attention."""

from __future__ import annotations

import math
from typing import Any

from amp_suite.records import LayerSpec
from amp_suite_plugins.jax.layer_call import (
    Call,
)


def _variables(name: str, shapes: dict[str, tuple[int, ...]]) -> list[Any]:
    """The haiku parameters of layer ``name`` (canonical names ``name/leaf``), in the compute dtype.

    One name scope per layer (a second scope of the same name would be
    ``name_1``).  The jmp policy in force decides both dtypes: each parameter
    is made in its ``param_dtype`` and read in its compute dtype.
    """
    import haiku as hk
    import jax.numpy as jnp

    with hk.name_scope(name):
        return [hk.get_parameter(leaf, shape, jnp.float32, init=jnp.zeros) for leaf, shape in shapes.items()]


def _class_token(spec: LayerSpec, x: Any, call: Call) -> Any:
    import jax.numpy as jnp

    (token,) = _variables(spec.name, {"token": (x.shape[-1],)})
    return jnp.concatenate([jnp.broadcast_to(token, (x.shape[0], 1, x.shape[-1])), x], axis=1)


def _position_embedding(spec: LayerSpec, x: Any, call: Call) -> Any:
    (table,) = _variables(spec.name, {"table": tuple(x.shape[1:])})
    return x + table


def _token_embedding(spec: LayerSpec, x: Any, call: Call) -> Any:
    """Row ``id`` of the table for each int32 token id: ``(n, context)`` -> ``(n, context, features)``.

    The ids are integers, which no jmp policy casts; the looked-up rows come
    in the compute dtype (the policy casts the table as it is read).
    """
    import jax.numpy as jnp

    (table,) = _variables(spec.name, {"table": (spec.vocab_size, spec.features)})
    return jnp.take(table, x, axis=0)


def _layer_norm(spec: LayerSpec, x: Any, call: Call) -> Any:
    return call.classes.layer_norm(axis=-1, create_scale=True, create_offset=True, eps=spec.epsilon,
                                   name=spec.name)(x)


def _rms_norm(spec: LayerSpec, x: Any, call: Call) -> Any:
    return call.classes.rms_norm(axis=-1, eps=spec.epsilon, name=spec.name)(x)


def _token_mean_pool(spec: LayerSpec, x: Any, call: Call) -> Any:
    import jax.numpy as jnp

    return jnp.mean(x, axis=1)


def _class_token_pool(spec: LayerSpec, x: Any, call: Call) -> Any:
    return x[:, 0]


def _multi_head_attention(spec: LayerSpec, x: Any, call: Call) -> Any:
    """``[q | k | v] = x @ qkv_w + qkv_b``, heads contiguous, scaled dot product per head, output projection."""
    n, t, f = x.shape
    heads = spec.heads
    if spec.name in call.fp8:  # both projections through the FP8 recipe, one module (one name scope)
        from amp_suite_plugins.jax.fp8 import projection_class

        projection = projection_class()(name=spec.name)
        qkv = projection(x, "qkv_w", "qkv_b", 3 * f)
    else:
        qkv_w, qkv_b, out_w, out_b = _variables(spec.name, {"qkv_w": (f, 3 * f), "qkv_b": (3 * f,),
                                                            "out_w": (f, f), "out_b": (f,)})
        qkv = x @ qkv_w + qkv_b
    q, k, v = (qkv[..., i * f:(i + 1) * f].reshape(n, t, heads, f // heads) for i in range(3))
    attend = _fused_attention if call.attention == "fused" else _reference_attention
    mixed = attend(q, k, v, spec.causal).reshape(n, t, f)
    return projection(mixed, "out_w", "out_b", f) if spec.name in call.fp8 else mixed @ out_w + out_b


def _fused_attention(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """``jax.nn.dot_product_attention`` on ``(n, t, heads, d)``: logits and softmax in float32 (at least).

    Its XLA implementation (the one a CPU runs) computes ``q kᵀ`` with a
    float32 result, takes the softmax in float32 and casts the probabilities
    to ``v``'s dtype for the weighted sum; under fp64 that float32 softmax
    makes it agree with the float64 reference to float32 round-off only.
    """
    import jax

    return jax.nn.dot_product_attention(q, k, v, is_causal=causal)


def _reference_attention(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """Matmul, softmax, matmul written out: both matmuls in the compute dtype, the softmax in float32 (or float64)."""
    import jax
    import jax.numpy as jnp

    t, d = q.shape[1], q.shape[-1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    scores = scores.astype(jnp.promote_types(scores.dtype, jnp.float32)) / math.sqrt(d)
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), scores, -jnp.inf)
    probabilities = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probabilities, v)
