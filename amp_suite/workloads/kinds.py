"""The layer kinds of the neutral vocabulary: one declaration each.

A :class:`LayerKind` holds everything the host knows of a kind: the shape it
gives, the variables it owns, its FLOPs and its precision under AMP.  Adding a
kind is one entry in :data:`KINDS` (plus its constructor in
:mod:`amp_suite.workloads.layers`) and one entry in each framework plugin's
table of translations; ``docs/layers.md`` gives each kind's exact meaning.

Shapes are per example: ``(h, w, c)`` images, ``(tokens, features)`` token
activations, ``(features,)`` after ``flatten`` or a pool, ``(context,)`` token
ids before ``token_embedding``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from amp_suite.errors import UsageError
from amp_suite.records import LayerSpec, VariableSpec

Shape = tuple[int, ...]
# Walks a nested layer sequence (residual and multiply bodies) from a shape, returning its output shape.
BodyWalker = Callable[[tuple[LayerSpec, ...], Shape], Shape]

# Under amp_fp16 / amp_bf16 a kind computes in the AMP compute dtype ("compute"), keeps its arithmetic in
# float32 ("float32": normalization statistics), or has no arithmetic of its own ("none").
AMP_POLICIES = ("compute", "float32", "none")


@dataclass(frozen=True)
class LayerKind:
    """One kind of the vocabulary.

    ``shape(layer, input_shape, walk_body, where)`` gives the output shape or
    raises a one-line :class:`UsageError`; ``variables(layer, input_shape)``
    the kind's canonical variables; ``flops(layer, input_shape, output_shape)``
    the FLOPs of one example's forward pass (2 per multiply-add; elementwise
    arithmetic is not counted).  ``named`` kinds need a name (they own
    variables, or a dropout mask); ``bodies`` kinds hold nested sequences.
    ``amp`` is the kind's precision under AMP (:data:`AMP_POLICIES`) and
    ``amp_note`` says what is kept in float32 inside a ``compute`` kind.
    """

    name: str
    shape: Callable[[LayerSpec, Shape, BodyWalker, str], Shape]
    meaning: str
    variables: Callable[[LayerSpec, Shape], list[VariableSpec]] = field(default=lambda layer, shape: [])
    flops: Callable[[LayerSpec, Shape, Shape], int] = field(default=lambda layer, shape, out: 0)
    named: bool = False
    bodies: bool = False
    amp: str = "none"
    amp_note: str = ""


# --- shape rules --------------------------------------------------------------------------------------


def _image(layer: LayerSpec, shape: Shape, where: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise UsageError(f"{where}: {layer.kind} needs an image (h, w, c) input, not {shape}")
    return shape


def _token_activation(layer: LayerSpec, shape: Shape, where: str) -> tuple[int, int]:
    if len(shape) != 2:
        raise UsageError(f"{where}: {layer.kind} {layer.name!r} needs token activations (tokens, features), "
                         f"not {shape}")
    return shape


def _same(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    return shape


def _conv_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    h, w, c = _image(layer, shape, where)
    k, s, p = layer.kernel_size, layer.stride, layer.padding
    features = layer.features if layer.kind == "conv2d" else c
    if k < 1 or s < 1 or p < 0 or features < 1:
        raise UsageError(f"{where}: {layer.kind} {layer.name!r} needs kernel, stride, features >= 1 and padding >= 0")
    return ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, features)


def _zero_pad_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    h, w, c = _image(layer, shape, where)
    if len(layer.pads) != 4 or min(layer.pads) < 0:
        raise UsageError(f"{where}: zero_pad needs four pads >= 0 (top, bottom, left, right), got {layer.pads}")
    top, bottom, left, right = layer.pads
    return (h + top + bottom, w + left + right, c)


def _pool_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    h, w, c = _image(layer, shape, where)
    if layer.window < 1 or layer.stride < 1:
        raise UsageError(f"{where}: {layer.kind} needs window and stride >= 1")
    return ((h - layer.window) // layer.stride + 1, (w - layer.window) // layer.stride + 1, c)


def _global_pool_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    c = _image(layer, shape, where)[2]
    return (1, 1, c) if layer.keepdims else (c,)


def _flatten_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    h, w, c = _image(layer, shape, where)
    return (h * w * c,)


def _dense_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    if layer.features < 1:
        raise UsageError(f"{where}: dense {layer.name!r} needs features >= 1")
    if len(shape) not in (1, 2):
        raise UsageError(f"{where}: dense {layer.name!r} needs features (flatten or global_avg_pool first) "
                         f"or token activations (tokens, features), not {shape}")
    return (*shape[:-1], layer.features)


def _residual_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    body = walk_body(layer.body, shape)
    short = walk_body(layer.shortcut, shape)
    if body != short:
        raise UsageError(f"{where}: residual branches disagree: body gives {body}, shortcut {short}")
    return body


def _multiply_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    h, w, c = _image(layer, shape, where)
    gate = walk_body(layer.body, shape)
    if gate != (1, 1, c):
        raise UsageError(f"{where}: multiply's body must give (1, 1, {c}) for an input {shape}, not {gate}")
    return shape


def _dropout_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    if not 0 <= layer.rate < 1:
        raise UsageError(f"{where}: dropout {layer.name!r} needs 0 <= rate < 1, got {layer.rate}")
    return shape


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _patch_embed_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    h, w, _ = _image(layer, shape, where)
    patch = layer.kernel_size
    if patch < 1 or layer.features < 1:
        raise UsageError(f"{where}: patch_embed {layer.name!r} needs a patch >= 1 and features >= 1")
    if h % patch or w % patch:
        raise UsageError(f"{where}: patch_embed {layer.name!r}: a patch of {patch} does not divide the "
                         f"{h}x{w} image; allowed: {_divisors(h) if h == w else 'a common divisor of both sides'}")
    return ((h // patch) * (w // patch), layer.features)


def _class_token_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    tokens, features = _token_activation(layer, shape, where)
    return (tokens + 1, features)


def _token_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    _token_activation(layer, shape, where)
    return shape


def _token_embedding_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    if len(shape) != 1:
        raise UsageError(f"{where}: token_embedding {layer.name!r} needs token ids (context,), not {shape}")
    if layer.vocab_size < 1 or layer.features < 1:
        raise UsageError(f"{where}: token_embedding {layer.name!r} needs vocab_size >= 1 and features >= 1")
    return (shape[0], layer.features)


def _norm_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    if layer.epsilon <= 0:
        raise UsageError(f"{where}: {layer.kind} {layer.name!r} needs epsilon > 0, got {layer.epsilon}")
    return shape


def _attention_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    _, features = _token_activation(layer, shape, where)
    if layer.heads < 1 or features % layer.heads:
        raise UsageError(f"{where}: multi_head_attention {layer.name!r}: a width of {features} does not split "
                         f"into {layer.heads} heads; allowed heads: {_divisors(features)}")
    return shape


def _token_pool_shape(layer: LayerSpec, shape: Shape, walk_body: BodyWalker, where: str) -> Shape:
    return (_token_activation(layer, shape, where)[1],)


# --- variables ----------------------------------------------------------------------------------------


def _kernel_and_bias(layer: LayerSpec, kernel: tuple[int, ...], bias: int, fan_in: int = 0) -> list[VariableSpec]:
    specs = [VariableSpec(f"{layer.name}/w", kernel, "he_uniform", fan_in=fan_in, decay=True)]
    if layer.use_bias:
        specs.append(VariableSpec(f"{layer.name}/b", (bias,), "zeros"))
    return specs


def _conv_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    k = layer.kernel_size
    return _kernel_and_bias(layer, (k, k, shape[-1], layer.features), layer.features)


def _depthwise_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    k, c = layer.kernel_size, shape[-1]
    return _kernel_and_bias(layer, (k, k, c, 1), c, fan_in=k * k)


def _dense_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    return _kernel_and_bias(layer, (shape[-1], layer.features), layer.features)


def _batch_norm_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    c = shape[-1]
    return [VariableSpec(f"{layer.name}/scale", (c,), "ones"), VariableSpec(f"{layer.name}/offset", (c,), "zeros"),
            VariableSpec(f"{layer.name}/mean", (c,), "zeros", trainable=False),
            VariableSpec(f"{layer.name}/var", (c,), "ones", trainable=False)]


def _patch_embed_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    p = layer.kernel_size
    return _kernel_and_bias(layer, (p, p, shape[-1], layer.features), layer.features)


def _class_token_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    return [VariableSpec(f"{layer.name}/token", (shape[-1],), "normal")]


def _position_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    return [VariableSpec(f"{layer.name}/table", tuple(shape), "normal")]


def _token_embedding_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    return [VariableSpec(f"{layer.name}/table", (layer.vocab_size, layer.features), "normal")]


def _layer_norm_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    f = shape[-1]
    return [VariableSpec(f"{layer.name}/scale", (f,), "ones"), VariableSpec(f"{layer.name}/offset", (f,), "zeros")]


def _rms_norm_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    return [VariableSpec(f"{layer.name}/scale", (shape[-1],), "ones")]


def _attention_variables(layer: LayerSpec, shape: Shape) -> list[VariableSpec]:
    f = shape[-1]
    return [VariableSpec(f"{layer.name}/qkv_w", (f, 3 * f), "he_uniform", decay=True),
            VariableSpec(f"{layer.name}/qkv_b", (3 * f,), "zeros"),
            VariableSpec(f"{layer.name}/out_w", (f, f), "he_uniform", decay=True),
            VariableSpec(f"{layer.name}/out_b", (f,), "zeros")]


# --- FLOPs --------------------------------------------------------------------------------------------


def _conv_flops(layer: LayerSpec, shape: Shape, out: Shape) -> int:
    h, w, c = out
    return 2 * layer.kernel_size ** 2 * shape[-1] * c * h * w


def _depthwise_flops(layer: LayerSpec, shape: Shape, out: Shape) -> int:
    h, w, c = out
    return 2 * layer.kernel_size ** 2 * c * h * w


def _dense_flops(layer: LayerSpec, shape: Shape, out: Shape) -> int:
    rows = shape[0] if len(shape) == 2 else 1
    return 2 * rows * shape[-1] * layer.features


def _patch_embed_flops(layer: LayerSpec, shape: Shape, out: Shape) -> int:
    tokens, features = out
    return 2 * tokens * layer.kernel_size ** 2 * shape[-1] * features


def _attention_flops(layer: LayerSpec, shape: Shape, out: Shape) -> int:
    """q/k/v and output projections, scores and the weighted sum (a causal mask is counted whole)."""
    t, f = shape
    return 2 * t * f * 3 * f + 2 * t * t * f + 2 * t * t * f + 2 * t * f * f


KINDS: dict[str, LayerKind] = {kind.name: kind for kind in (
    LayerKind("conv2d", _conv_shape, "zero padding on every side, then a strided 2-D convolution (HWIO kernel)",
              _conv_variables, _conv_flops, named=True, amp="compute"),
    LayerKind("depthwise_conv2d", _conv_shape, "one kernel per channel (depth multiplier 1), padded like conv2d",
              _depthwise_variables, _depthwise_flops, named=True, amp="compute"),
    LayerKind("zero_pad", _zero_pad_shape, "zero pixels added (top, bottom, left, right)"),
    LayerKind("batch_norm", _same, "batch statistics in training, running statistics in evaluation",
              _batch_norm_variables, named=True, amp="float32"),
    LayerKind("relu", _same, "max(x, 0)", amp="compute"),
    LayerKind("relu6", _same, "min(max(x, 0), 6)", amp="compute"),
    LayerKind("swish", _same, "x * sigmoid(x)", amp="compute"),
    LayerKind("sigmoid", _same, "1 / (1 + exp(-x))", amp="compute"),
    LayerKind("gelu", _same, "the exact GELU, x * (1 + erf(x / sqrt(2))) / 2", amp="compute"),
    LayerKind("residual", _residual_shape, "body(x) + shortcut(x) (shortcut empty: x)", bodies=True),
    LayerKind("multiply", _multiply_shape, "x * body(x), body(x) of shape (1, 1, c)", bodies=True, amp="compute"),
    LayerKind("max_pool", _pool_shape, "window maximum, no padding"),
    LayerKind("avg_pool", _pool_shape, "window mean, no padding", amp="compute"),
    LayerKind("global_avg_pool", _global_pool_shape, "mean over height and width", amp="compute"),
    LayerKind("flatten", _flatten_shape, "(h, w, c) to h * w * c features in row-major order"),
    LayerKind("dense", _dense_shape, "x @ w + b on the last axis (features, or every token)",
              _dense_variables, _dense_flops, named=True, amp="compute"),
    LayerKind("dropout", _dropout_shape, "times the host's mask in training; identity in evaluation",
              named=True, amp="compute"),
    LayerKind("patch_embed", _patch_embed_shape,
              "a convolution with kernel = stride = patch, its output flattened to tokens in row-major order",
              _patch_embed_variables, _patch_embed_flops, named=True, amp="compute"),
    LayerKind("class_token", _class_token_shape, "a learned vector prepended as token 0",
              _class_token_variables, named=True, amp="compute", amp_note="the token is cast to the compute dtype"),
    LayerKind("position_embedding", _token_shape, "a learned (tokens, features) table added (class token included)",
              _position_variables, named=True, amp="compute", amp_note="the table is cast to the compute dtype"),
    LayerKind("token_embedding", _token_embedding_shape, "row token_id of a (vocab_size, features) table",
              _token_embedding_variables, named=True, amp="compute",
              amp_note="the looked-up rows are cast to the compute dtype"),
    LayerKind("layer_norm", _norm_shape,
              "(x - mean) / sqrt(biased variance + epsilon) * scale + offset over the last axis",
              _layer_norm_variables, named=True, amp="float32",
              amp_note="mean, variance and normalization in float32; the output cast to the compute dtype"),
    LayerKind("rms_norm", _norm_shape, "x / sqrt(mean(x^2) + epsilon) * scale over the last axis",
              _rms_norm_variables, named=True, amp="float32",
              amp_note="mean square and normalization in float32; the output cast to the compute dtype"),
    LayerKind("multi_head_attention", _attention_shape,
              "fused q/k/v projection, softmax(q k^T / sqrt(head width)) v per head (optionally causal), "
              "output projection", _attention_variables, _attention_flops, named=True, amp="compute",
              amp_note="projections and both attention matmuls in the compute dtype; the softmax in float32"),
    LayerKind("token_mean_pool", _token_pool_shape, "mean over tokens", amp="compute"),
    LayerKind("class_token_pool", _token_pool_shape, "token 0 (the class token)"),
)}
LAYER_KINDS = tuple(KINDS)
# Kinds that do not apply to image activations and the reverse, for a plugin's declaration of what it builds.
TOKEN_KINDS = ("patch_embed", "class_token", "position_embedding", "token_embedding", "layer_norm", "rms_norm",
               "gelu", "multi_head_attention", "token_mean_pool", "class_token_pool")
# Kinds whose arithmetic stays in float32 under amp_fp16 / amp_bf16, in every framework.
FLOAT32_KINDS = tuple(name for name, kind in KINDS.items() if kind.amp == "float32")


def kind(name: str, where: str = "model") -> LayerKind:
    """The declaration of kind ``name``; a one-line :class:`UsageError` for an unknown one."""
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError(f"{where}: unknown layer kind {name!r}; known: {', '.join(KINDS)}") from None


def missing_kinds(built: tuple[str, ...] | list[str] | set[str]) -> list[str]:
    """The vocabulary's kinds that a backend declaring ``built`` lacks, in vocabulary order."""
    return [name for name in KINDS if name not in set(built)]
