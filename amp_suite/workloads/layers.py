"""The framework-neutral layer vocabulary: constructors, shapes, variables and FLOPs.

An architecture is a tuple of :class:`~amp_suite.records.LayerSpec` built from
the constructors below.  The host walks it once over the input shape to
declare every variable (parameters and BatchNorm state) with its canonical
shape, and to count FLOPs; each framework plugin translates the same tuple
into its own layers.  Semantics, identical in every framework:

* activations are NHWC; conv kernels are ``(kh, kw, in, out)``, dense kernels
  ``(in, out)``, and ``flatten`` orders features as ``(h, w, c)``;
* ``conv2d`` pads ``padding`` zero pixels on every side, then slides with
  ``stride``: ``out = (in + 2 * padding - kernel) // stride + 1``;
  ``depthwise_conv2d`` does the same per channel (depth multiplier 1, kernel
  ``(k, k, channels, 1)``);
* ``zero_pad`` adds ``pads`` = (top, bottom, left, right) zero pixels, the
  exact form of TensorFlow's asymmetric "same" padding and of Keras's
  ``ZeroPadding2D`` (a max_pool after it sees those zeros);
* pools have no padding: ``out = (in - window) // stride + 1``;
* ``batch_norm`` normalizes each channel with the batch's mean and biased
  variance in training and with the running statistics in evaluation; the
  running statistics move by ``momentum`` towards the batch mean and the
  *unbiased* batch variance (``n / (n - 1)``, PyTorch's convention);
* ``relu6`` is ``min(max(x, 0), 6)``, ``swish`` is ``x * sigmoid(x)``;
* ``residual`` adds ``body(x)`` and ``shortcut(x)`` (identity when empty);
  ``multiply`` multiplies ``x`` by ``body(x)``, a ``(1, 1, c)`` activation
  broadcast over height and width (squeeze-and-excitation);
* ``dropout`` multiplies its input by the mask the host drew for the step
  (:func:`draw_masks`, handed over in ``Batch.masks``) in training, and is the
  identity in evaluation and ``predict``;
* token activations are ``(tokens, features)`` per example; the token kinds
  (``patch_embed``, ``class_token``, ``position_embedding``,
  ``token_embedding``, ``layer_norm``, ``rms_norm``, ``gelu``,
  ``multi_head_attention``, ``token_mean_pool``, ``class_token_pool``) and
  ``dense`` on the last axis of a token tensor are defined exactly in
  ``docs/layers.md``; :mod:`amp_suite.workloads.reference` computes them with
  NumPy in float64.

Each kind's shape rule, variables, FLOPs and precision under AMP are one
declaration in :mod:`amp_suite.workloads.kinds`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from amp_suite.errors import UsageError
from amp_suite.records import LayerSpec, VariableSpec
from amp_suite.workloads.kinds import KINDS as KINDS
from amp_suite.workloads.kinds import LAYER_KINDS as LAYER_KINDS
from amp_suite.workloads.kinds import TOKEN_KINDS as TOKEN_KINDS
from amp_suite.workloads.kinds import kind

# Layers that need a name: those with variables, and dropout (its mask's key).
NAMED_KINDS = tuple(name for name, entry in KINDS.items() if entry.named)


# --- constructors ---------------------------------------------------------


def conv2d(name: str, features: int, kernel_size: int, *, stride: int = 1, padding: int = 0,
           use_bias: bool = True) -> LayerSpec:
    return LayerSpec("conv2d", name, features=features, kernel_size=kernel_size, stride=stride,
                     padding=padding, use_bias=use_bias)


def depthwise_conv2d(name: str, kernel_size: int, *, stride: int = 1, padding: int = 0,
                     use_bias: bool = False) -> LayerSpec:
    """One ``kernel_size`` filter per channel (depth multiplier 1), Keras's ``DepthwiseConv2D``."""
    return LayerSpec("depthwise_conv2d", name, kernel_size=kernel_size, stride=stride, padding=padding,
                     use_bias=use_bias)


def zero_pad(top: int, bottom: int, left: int, right: int) -> LayerSpec:
    """Zero pixels added on each side, Keras's ``ZeroPadding2D(((top, bottom), (left, right)))``."""
    return LayerSpec("zero_pad", pads=(top, bottom, left, right))


def batch_norm(name: str, *, momentum: float = 0.1, epsilon: float = 1e-5) -> LayerSpec:
    return LayerSpec("batch_norm", name, momentum=momentum, epsilon=epsilon)


def relu() -> LayerSpec:
    return LayerSpec("relu")


def relu6() -> LayerSpec:
    return LayerSpec("relu6")


def swish() -> LayerSpec:
    return LayerSpec("swish")


def sigmoid() -> LayerSpec:
    return LayerSpec("sigmoid")


def max_pool(window: int, stride: int | None = None) -> LayerSpec:
    return LayerSpec("max_pool", window=window, stride=stride or window)


def avg_pool(window: int, stride: int | None = None) -> LayerSpec:
    return LayerSpec("avg_pool", window=window, stride=stride or window)


def global_avg_pool(keepdims: bool = False) -> LayerSpec:
    """Mean over height and width: ``(c,)``, or ``(1, 1, c)`` with ``keepdims``."""
    return LayerSpec("global_avg_pool", keepdims=keepdims)


def flatten() -> LayerSpec:
    return LayerSpec("flatten")


def dense(name: str, features: int, *, use_bias: bool = True) -> LayerSpec:
    return LayerSpec("dense", name, features=features, use_bias=use_bias)


def dropout(name: str, rate: float, *, per_sample: bool = False) -> LayerSpec:
    """Drops a ``rate`` fraction of its input in training (whole examples with ``per_sample``)."""
    return LayerSpec("dropout", name, rate=rate, per_sample=per_sample)


def residual(body: tuple[LayerSpec, ...], shortcut: tuple[LayerSpec, ...] = ()) -> LayerSpec:
    return LayerSpec("residual", body=tuple(body), shortcut=tuple(shortcut))


def multiply(body: tuple[LayerSpec, ...]) -> LayerSpec:
    """``x * body(x)``, ``body(x)`` being ``(1, 1, c)`` (squeeze-and-excitation)."""
    return LayerSpec("multiply", body=tuple(body))


def patch_embed(name: str, features: int, patch: int) -> LayerSpec:
    """A ``patch`` x ``patch`` convolution of stride ``patch`` to ``features``, flattened to row-major tokens."""
    return LayerSpec("patch_embed", name, features=features, kernel_size=patch, stride=patch)


def class_token(name: str) -> LayerSpec:
    """A learned vector prepended to the tokens (token 0)."""
    return LayerSpec("class_token", name)


def position_embedding(name: str) -> LayerSpec:
    """A learned ``(tokens, features)`` table added to the tokens (covering the class token where there is one)."""
    return LayerSpec("position_embedding", name)


def token_embedding(name: str, vocab_size: int, features: int) -> LayerSpec:
    """Token ids ``(context,)`` to rows of a ``(vocab_size, features)`` table."""
    return LayerSpec("token_embedding", name, features=features, vocab_size=vocab_size)


def layer_norm(name: str, *, epsilon: float = 1e-5) -> LayerSpec:
    return LayerSpec("layer_norm", name, epsilon=epsilon)


def rms_norm(name: str, *, epsilon: float = 1e-6) -> LayerSpec:
    return LayerSpec("rms_norm", name, epsilon=epsilon)


def gelu() -> LayerSpec:
    """The exact (erf) GELU."""
    return LayerSpec("gelu")


def multi_head_attention(name: str, heads: int, *, causal: bool = False) -> LayerSpec:
    """Self-attention over token activations: fused q/k/v projection, ``heads`` heads, output projection."""
    return LayerSpec("multi_head_attention", name, heads=heads, causal=causal)


def token_mean_pool() -> LayerSpec:
    return LayerSpec("token_mean_pool")


def class_token_pool() -> LayerSpec:
    return LayerSpec("class_token_pool")


# --- walking the graph ------------------------------------------------------

# An activation shape: (h, w, c) before flatten, (features,) after.
Shape = tuple[int, ...]


@dataclass(frozen=True)
class LayerShapes:
    """A layer with the activation shapes it sees and produces."""

    layer: LayerSpec
    input_shape: Shape
    output_shape: Shape


def iter_layers(layers: tuple[LayerSpec, ...]) -> Iterator[LayerSpec]:
    """Every layer in definition order, residual bodies before their shortcuts, multiply bodies too."""
    for layer in layers:
        yield layer
        if KINDS[layer.kind].bodies:
            yield from iter_layers(layer.body)
            yield from iter_layers(layer.shortcut)


def walk(layers: tuple[LayerSpec, ...], input_shape: Shape, *, where: str = "model") -> list[LayerShapes]:
    """Shapes of every layer (definition order); a :class:`UsageError` for a graph that does not fit."""
    out: list[LayerShapes] = []
    _walk(layers, tuple(input_shape), out, where)
    return out


def _walk(layers: tuple[LayerSpec, ...], shape: Shape, out: list[LayerShapes], where: str) -> Shape:
    for layer in layers:
        entry = kind(layer.kind, where)
        if entry.named and not layer.name:
            raise UsageError(f"{where}: a {layer.kind} layer needs a name")
        index = len(out)
        out.append(LayerShapes(layer, shape, shape))  # output filled in below

        def walk_body(body: tuple[LayerSpec, ...], start: Shape) -> Shape:
            return _walk(body, start, out, where)

        new = entry.shape(layer, shape, walk_body, where)
        if any(d < 1 for d in new):
            raise UsageError(f"{where}: the input is too small for its layers ({layer.kind} gives {new})")
        out[index] = LayerShapes(layer, shape, new)
        shape = new
    return shape


def flatten_input(layers: tuple[LayerSpec, ...], input_shape: Shape) -> tuple[int, int, int] | None:
    """(h, w, c) of the activation that reaches the first ``flatten``; None without one."""
    for item in walk(layers, input_shape):
        if item.layer.kind == "flatten":
            return item.input_shape  # type: ignore[return-value]
    return None


def variables(layers: tuple[LayerSpec, ...], input_shape: Shape) -> list[VariableSpec]:
    """Every canonical variable in definition order: parameters, then each BatchNorm's state.

    A depthwise kernel is ``(k, k, channels, 1)``, Keras's layout, drawn with a
    fan-in of ``k * k`` (the inputs of one output).  A layer name used twice
    (dropout names included) is a :class:`UsageError`.
    """
    specs: list[VariableSpec] = []
    seen: set[str] = set()
    for item in walk(layers, input_shape):
        layer = item.layer
        if not KINDS[layer.kind].named:
            continue
        if layer.name in seen:
            raise UsageError(f"layer name {layer.name!r} is used twice")
        seen.add(layer.name)
        specs += KINDS[layer.kind].variables(layer, item.input_shape)
    return specs


def forward_flops(layers: tuple[LayerSpec, ...], input_shape: Shape) -> int:
    """FLOPs of one example's forward pass: 2 per multiply-add of every conv, dense, patch and attention matmul.

    Elementwise layers (BatchNorm, activations, pools, residual adds, the SE
    multiply, dropout) are not counted: they are memory-bound and, at one
    operation per output, below 1% of these models' arithmetic (about 2% of
    EfficientNet-B0's).
    """
    return sum(KINDS[item.layer.kind].flops(item.layer, item.input_shape, item.output_shape)
               for item in walk(layers, input_shape))


def dense_after_flatten(layers: tuple[LayerSpec, ...], input_shape: Shape) -> dict[str, tuple[int, int, int]]:
    """Dense layers fed directly by a ``flatten``, with the (h, w, c) that was flattened.

    Frameworks that flatten NCHW activations reorder these kernels' rows.
    """
    items = walk(layers, input_shape)
    return {item.layer.name: prev.input_shape  # type: ignore[misc]
            for prev, item in zip(items, items[1:], strict=False)
            if prev.layer.kind == "flatten" and item.layer.kind == "dense"}


# --- dropout masks, drawn by the host ----------------------------------------

# Tags the seed of dropout masks, apart from the seeds of batch order and augmentation.
MASK_SEED_TAG = 0xD209


def dropout_layers(layers: tuple[LayerSpec, ...]) -> list[LayerSpec]:
    """Every ``dropout`` layer, in definition order (residual and multiply bodies included)."""
    return [layer for layer in iter_layers(layers) if layer.kind == "dropout"]


def mask_rng(seed: int, epoch: int, step: int, name: str) -> np.random.Generator:
    """The generator of one dropout layer's mask at one step: any slice of an epoch draws the same masks."""
    return np.random.Generator(np.random.PCG64([seed, epoch, step, MASK_SEED_TAG, *name.encode("utf-8")]))


def draw_masks(layers: tuple[LayerSpec, ...], input_shape: Shape, batch_size: int, seed: int, epoch: int,
               step: int) -> dict[str, np.ndarray]:
    """The scaled float32 dropout masks of one training step, keyed by layer name.

    An example's unit is kept when a uniform draw in [0, 1) is at least
    ``rate``, and then weighs ``1 / (1 - rate)`` (inverted dropout, as Keras and
    PyTorch scale).  Shapes: ``(batch_size, *activation_shape)``, or
    ``(batch_size,)`` for ``per_sample``.  A model without dropout gets ``{}``
    without being walked.
    """
    if not dropout_layers(layers):
        return {}
    masks: dict[str, np.ndarray] = {}
    for item in walk(layers, input_shape):
        layer = item.layer
        if layer.kind != "dropout":
            continue
        shape = (batch_size,) if layer.per_sample else (batch_size, *item.input_shape)
        keep = mask_rng(seed, epoch, step, layer.name).random(shape, dtype=np.float32) >= layer.rate
        masks[layer.name] = keep.astype(np.float32) * np.float32(1.0 / (1.0 - layer.rate))
    return masks
