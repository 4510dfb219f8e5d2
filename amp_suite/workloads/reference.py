"""The layer vocabulary computed with NumPy in float64: the reference every framework is checked against.

:func:`forward` runs a layer sequence on a batch in evaluation mode (or with
the host's dropout masks) from canonical variables, one function per kind,
each the literal formula of ``docs/layers.md``.  It covers the token kinds,
``dense``, the activations, pools over tokens, ``residual`` and ``dropout``,
and ``flatten``/``global_avg_pool``; the convolution and BatchNorm kinds are
checked between frameworks instead (a NumPy convolution adds nothing over
three frameworks agreeing), and ask for them here raises ``NotImplementedError``
naming the kind.  :func:`mean_cross_entropy` is the loss of every workload,
one label per example or per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from amp_suite.records import LayerSpec

Variables = dict[str, np.ndarray]
Masks = dict[str, np.ndarray]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def dense(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``x @ w + b`` on the last axis."""
    y = x @ w
    return y if b is None else y + b


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU: ``x * (1 + erf(x / sqrt(2))) / 2``."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def patch_embed(images: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``(n, h, w, c)`` images to ``(n, tokens, features)``: patches in row-major order, each ``patch @ w``.

    A patch is flattened in the kernel's ``(kh, kw, c)`` order, so the product
    is the stride-``patch`` convolution with the HWIO kernel ``w``.
    """
    n, h, width, c = images.shape
    p = w.shape[0]
    patches = images.reshape(n, h // p, p, width // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return dense(patches.reshape(n, (h // p) * (width // p), p * p * c), w.reshape(p * p * c, -1), b)


def class_token(x: np.ndarray, token: np.ndarray) -> np.ndarray:
    """The learned ``token`` prepended to every example's tokens."""
    return np.concatenate([np.broadcast_to(token, (x.shape[0], 1, token.shape[-1])), x], axis=1)


def layer_norm(x: np.ndarray, scale: np.ndarray, offset: np.ndarray, epsilon: float) -> np.ndarray:
    """``(x - mean) / sqrt(biased variance + epsilon) * scale + offset`` over the last axis."""
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * scale + offset


def rms_norm(x: np.ndarray, scale: np.ndarray, epsilon: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + epsilon) * scale`` over the last axis."""
    return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + epsilon) * scale


def softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def attention(x: np.ndarray, qkv_w: np.ndarray, qkv_b: np.ndarray, out_w: np.ndarray, out_b: np.ndarray,
              heads: int, causal: bool) -> np.ndarray:
    """Multi-head self-attention of ``(n, tokens, features)``.

    ``x @ qkv_w + qkv_b`` gives ``[q | k | v]`` along the last axis; each is
    split into ``heads`` contiguous slices of ``features / heads``; per head
    ``softmax(q k^T / sqrt(features / heads)) v``, position ``i`` seeing only
    ``j <= i`` when ``causal``; the heads are joined in order and projected by
    ``out_w``, ``out_b``.
    """
    n, t, f = x.shape
    head = f // heads
    q, k, v = np.split(dense(x, qkv_w, qkv_b), 3, axis=-1)

    def split(a: np.ndarray) -> np.ndarray:
        return a.reshape(n, t, heads, head).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / math.sqrt(head)
    if causal:
        scores = np.where(np.tril(np.ones((t, t), dtype=bool)), scores, -np.inf)
    mixed = softmax(scores) @ split(v)
    return dense(mixed.transpose(0, 2, 1, 3).reshape(n, t, f), out_w, out_b)


def _bias(variables: Variables, name: str) -> np.ndarray | None:
    return variables.get(f"{name}/b")


def _apply(layer: LayerSpec, x: np.ndarray, variables: Variables, masks: Masks | None) -> np.ndarray:
    kind, name = layer.kind, layer.name
    if kind in ("residual",):
        return forward(layer.body, x, variables, masks) + forward(layer.shortcut, x, variables, masks)
    if kind == "dropout":
        if masks is None:
            return x
        mask = masks[name]
        return x * mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    if kind in _SIMPLE:
        return _SIMPLE[kind](x)
    if kind == "dense":
        return dense(x, variables[f"{name}/w"], _bias(variables, name))
    if kind == "patch_embed":
        return patch_embed(x, variables[f"{name}/w"], _bias(variables, name))
    if kind == "class_token":
        return class_token(x, variables[f"{name}/token"])
    if kind == "position_embedding":
        return x + variables[f"{name}/table"]
    if kind == "token_embedding":
        return variables[f"{name}/table"][x.astype(np.int64)]
    if kind == "layer_norm":
        return layer_norm(x, variables[f"{name}/scale"], variables[f"{name}/offset"], layer.epsilon)
    if kind == "rms_norm":
        return rms_norm(x, variables[f"{name}/scale"], layer.epsilon)
    if kind == "multi_head_attention":
        return attention(x, variables[f"{name}/qkv_w"], variables[f"{name}/qkv_b"], variables[f"{name}/out_w"],
                         variables[f"{name}/out_b"], layer.heads, layer.causal)
    raise NotImplementedError(f"the NumPy reference has no {kind} (convolutions and BatchNorm are checked "
                              "between frameworks)")


_SIMPLE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.minimum(np.maximum(x, 0.0), 6.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": gelu,
    "flatten": lambda x: x.reshape(x.shape[0], -1),
    "global_avg_pool": lambda x: x.mean(axis=(1, 2)),
    "token_mean_pool": lambda x: x.mean(axis=1),
    "class_token_pool": lambda x: x[:, 0],
}


def forward(layers: tuple[LayerSpec, ...], inputs: np.ndarray, variables: Variables,
            masks: Masks | None = None) -> np.ndarray:
    """The float64 output of ``layers`` on a batch (images or token ids), from canonical ``variables``.

    ``masks`` (the host's dropout masks, :func:`amp_suite.workloads.layers.draw_masks`)
    turn on dropout as in training; ``None`` is evaluation.
    """
    x: Any = inputs if np.issubdtype(inputs.dtype, np.integer) else np.asarray(inputs, np.float64)
    params = {k: np.asarray(v, np.float64) for k, v in variables.items()}
    for layer in layers:
        x = _apply(layer, x, params, masks)
    return np.asarray(x, np.float64)


def mean_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The mean softmax cross-entropy of integer ``labels``: one per example, or one per token of a sequence."""
    flat = np.asarray(logits, np.float64).reshape(-1, logits.shape[-1])
    shifted = flat - flat.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-log_probs[np.arange(flat.shape[0]), labels.reshape(-1)].mean())
