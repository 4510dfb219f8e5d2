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
* pools have no padding: ``out = (in - window) // stride + 1``;
* ``batch_norm`` normalizes each channel with the batch's mean and biased
  variance in training and with the running statistics in evaluation; the
  running statistics move by ``momentum`` towards the batch mean and the
  *unbiased* batch variance (``n / (n - 1)``, PyTorch's convention);
* ``residual`` adds ``body(x)`` and ``shortcut(x)`` (identity when empty).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from amp_suite.errors import UsageError
from amp_suite.records import LayerSpec, VariableSpec

LAYER_KINDS = ("conv2d", "batch_norm", "relu", "residual", "max_pool", "avg_pool", "global_avg_pool",
               "flatten", "dense")
# Layers that own variables.
NAMED_KINDS = ("conv2d", "batch_norm", "dense")


# --- constructors ---------------------------------------------------------


def conv2d(name: str, features: int, kernel_size: int, *, stride: int = 1, padding: int = 0,
           use_bias: bool = True) -> LayerSpec:
    return LayerSpec("conv2d", name, features=features, kernel_size=kernel_size, stride=stride,
                     padding=padding, use_bias=use_bias)


def batch_norm(name: str, *, momentum: float = 0.1, epsilon: float = 1e-5) -> LayerSpec:
    return LayerSpec("batch_norm", name, momentum=momentum, epsilon=epsilon)


def relu() -> LayerSpec:
    return LayerSpec("relu")


def max_pool(window: int, stride: int | None = None) -> LayerSpec:
    return LayerSpec("max_pool", window=window, stride=stride or window)


def avg_pool(window: int, stride: int | None = None) -> LayerSpec:
    return LayerSpec("avg_pool", window=window, stride=stride or window)


def global_avg_pool() -> LayerSpec:
    return LayerSpec("global_avg_pool")


def flatten() -> LayerSpec:
    return LayerSpec("flatten")


def dense(name: str, features: int, *, use_bias: bool = True) -> LayerSpec:
    return LayerSpec("dense", name, features=features, use_bias=use_bias)


def residual(body: tuple[LayerSpec, ...], shortcut: tuple[LayerSpec, ...] = ()) -> LayerSpec:
    return LayerSpec("residual", body=tuple(body), shortcut=tuple(shortcut))


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
    """Every layer in definition order, residual bodies before their shortcuts."""
    for layer in layers:
        yield layer
        if layer.kind == "residual":
            yield from iter_layers(layer.body)
            yield from iter_layers(layer.shortcut)


def walk(layers: tuple[LayerSpec, ...], input_shape: Shape, *, where: str = "model") -> list[LayerShapes]:
    """Shapes of every layer (definition order); a :class:`UsageError` for a graph that does not fit."""
    out: list[LayerShapes] = []
    _walk(layers, tuple(input_shape), out, where)
    return out


def _walk(layers: tuple[LayerSpec, ...], shape: Shape, out: list[LayerShapes], where: str) -> Shape:
    for layer in layers:
        if layer.kind not in LAYER_KINDS:
            raise UsageError(f"{where}: unknown layer kind {layer.kind!r}; known: {', '.join(LAYER_KINDS)}")
        if layer.kind in NAMED_KINDS and not layer.name:
            raise UsageError(f"{where}: a {layer.kind} layer needs a name")
        index = len(out)
        out.append(LayerShapes(layer, shape, shape))  # output filled in below
        new = _output_shape(layer, shape, out, where)
        out[index] = LayerShapes(layer, shape, new)
        shape = new
    return shape


def _spatial(layer: LayerSpec, shape: Shape, where: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise UsageError(f"{where}: {layer.kind} needs an image (h, w, c) input, not features after flatten")
    return shape  # type: ignore[return-value]


def _output_shape(layer: LayerSpec, shape: Shape, out: list[LayerShapes], where: str) -> Shape:
    kind = layer.kind
    if kind == "conv2d":
        h, w, _ = _spatial(layer, shape, where)
        k, s, p = layer.kernel_size, layer.stride, layer.padding
        if k < 1 or s < 1 or p < 0 or layer.features < 1:
            raise UsageError(f"{where}: conv2d {layer.name!r} needs kernel, stride, features >= 1 and padding >= 0")
        new = ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, layer.features)
    elif kind in ("max_pool", "avg_pool"):
        h, w, c = _spatial(layer, shape, where)
        if layer.window < 1 or layer.stride < 1:
            raise UsageError(f"{where}: {kind} needs window and stride >= 1")
        new = ((h - layer.window) // layer.stride + 1, (w - layer.window) // layer.stride + 1, c)
    elif kind == "global_avg_pool":
        new = (_spatial(layer, shape, where)[2],)
    elif kind == "flatten":
        h, w, c = _spatial(layer, shape, where)
        new = (h * w * c,)
    elif kind == "dense":
        if layer.features < 1:
            raise UsageError(f"{where}: dense {layer.name!r} needs features >= 1")
        new = (layer.features,)
    elif kind == "residual":
        body = _walk(layer.body, shape, out, where)
        short = _walk(layer.shortcut, shape, out, where)
        if body != short:
            raise UsageError(f"{where}: residual branches disagree: body gives {body}, shortcut {short}")
        new = body
    else:  # relu, batch_norm keep the shape
        new = shape
    if any(d < 1 for d in new):
        raise UsageError(f"{where}: the input is too small for its layers ({kind} gives {new})")
    return new


def flatten_input(layers: tuple[LayerSpec, ...], input_shape: Shape) -> tuple[int, int, int] | None:
    """(h, w, c) of the activation that reaches the first ``flatten``; None without one."""
    for item in walk(layers, input_shape):
        if item.layer.kind == "flatten":
            return item.input_shape  # type: ignore[return-value]
    return None


def variables(layers: tuple[LayerSpec, ...], input_shape: Shape) -> list[VariableSpec]:
    """Every canonical variable in definition order: parameters, then each BatchNorm's state."""
    specs: list[VariableSpec] = []
    seen: set[str] = set()
    for item in walk(layers, input_shape):
        layer = item.layer
        if layer.kind not in NAMED_KINDS:
            continue
        if layer.name in seen:
            raise UsageError(f"layer name {layer.name!r} is used twice")
        seen.add(layer.name)
        fan_in = item.input_shape[-1]
        if layer.kind == "conv2d":
            k = layer.kernel_size
            specs.append(VariableSpec(f"{layer.name}/w", (k, k, fan_in, layer.features), "he_uniform"))
            if layer.use_bias:
                specs.append(VariableSpec(f"{layer.name}/b", (layer.features,), "zeros"))
        elif layer.kind == "dense":
            specs.append(VariableSpec(f"{layer.name}/w", (fan_in, layer.features), "he_uniform"))
            if layer.use_bias:
                specs.append(VariableSpec(f"{layer.name}/b", (layer.features,), "zeros"))
        else:
            specs += [VariableSpec(f"{layer.name}/scale", (fan_in,), "ones"),
                      VariableSpec(f"{layer.name}/offset", (fan_in,), "zeros"),
                      VariableSpec(f"{layer.name}/mean", (fan_in,), "zeros", trainable=False),
                      VariableSpec(f"{layer.name}/var", (fan_in,), "ones", trainable=False)]
    return specs


def forward_flops(layers: tuple[LayerSpec, ...], input_shape: Shape) -> int:
    """FLOPs of one image's forward pass: 2 per multiply-add of every conv2d and dense layer.

    Elementwise layers (BatchNorm, ReLU, pools, residual adds) are not counted:
    they are memory-bound and below 1% of the arithmetic of these models.
    """
    total = 0
    for item in walk(layers, input_shape):
        layer = item.layer
        if layer.kind == "conv2d":
            h, w, c = item.output_shape
            total += 2 * layer.kernel_size ** 2 * item.input_shape[-1] * c * h * w
        elif layer.kind == "dense":
            total += 2 * item.input_shape[-1] * layer.features
    return total


def dense_after_flatten(layers: tuple[LayerSpec, ...], input_shape: Shape) -> dict[str, tuple[int, int, int]]:
    """Dense layers fed directly by a ``flatten``, with the (h, w, c) that was flattened.

    Frameworks that flatten NCHW activations reorder these kernels' rows.
    """
    items = walk(layers, input_shape)
    return {item.layer.name: prev.input_shape  # type: ignore[misc]
            for prev, item in zip(items, items[1:])
            if prev.layer.kind == "flatten" and item.layer.kind == "dense"}
