"""The Keras model of a workload, the same on every Keras backend (TensorFlow, JAX, PyTorch).

The framework-neutral layer vocabulary (``amp_suite.workloads.layers``)
translated to Keras 3 layers, once: the Keras plugins of each backend
(``plugin`` on TensorFlow, ``on_jax``, ``on_torch``) build their model here
and read its variables back here.  Keras is passed in (imported by the hooks,
after ``KERAS_BACKEND`` is set); nothing in this module imports a backend.

Each layer kind is one entry of :data:`BUILDERS` (kind -> builder of its
Keras layers) and, where it owns variables, one of :data:`LEAVES` (the
canonical leaf of each Keras weight, in Keras's order); ``LAYER_KINDS`` is
what the plugins declare in ``FrameworkInfo.layer_kinds``.  The token kinds'
layers live in :mod:`amp_suite_plugins.keras.token_layers`.  A token workload
takes int32 ids, ``(batch, context)``, and gives ``(batch, context, vocab)``
logits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from amp_suite.errors import UnsupportedError
from amp_suite.records import LayerSpec, Workload
from amp_suite.workloads.fp8_layers import fp8_layer_names
from amp_suite.workloads.kept import keeps
from amp_suite.workloads.layers import iter_layers, walk
from amp_suite_plugins.keras.float32_layers import in_float32

# The dtype policy of each precision: a global policy set before the model is built.
POLICIES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "mixed_float16", "amp_bf16": "mixed_bfloat16",
            "fp8": "mixed_bfloat16", "fp64": "float64"}  # fp8: amp_bf16's policy, its FP8 layers from keras.fp8


# Every variable gets its canonical value right after the model is built (``set_weights`` refuses a layer whose list
# is short), so Keras's layers start from zeros instead of drawing random values only to throw them away: on the JAX
# backend each draw compiled an XLA program of its own shape (resnet8: 9 programs, 5 s of a 15 s probe).
PLACEHOLDER = "zeros"


def model_inputs(mask_names: tuple[str, ...], images: Any, masks: dict[str, Any] | None) -> Any:
    """The model's inputs: ``images`` alone without dropout, else ``[images, *masks]`` (None: no dropout)."""
    if not mask_names:
        return images
    return [images, *((masks or {}).get(name) for name in mask_names)]


def _conv(keras: Any, spec: LayerSpec, x: Any) -> Any:
    """conv2d or depthwise_conv2d with symmetric zero padding: 'same' where Keras's own padding is the same thing."""
    padding = "valid"
    if spec.padding and spec.stride == 1 and spec.kernel_size % 2 == 1 and spec.padding == spec.kernel_size // 2:
        padding = "same"
    elif spec.padding:
        x = keras.layers.ZeroPadding2D(spec.padding, name=f"{spec.name}_pad")(x)
    if spec.kind == "depthwise_conv2d":  # kernel (k, k, c, 1): the canonical layout
        return keras.layers.DepthwiseConv2D(spec.kernel_size, strides=spec.stride, padding=padding,
                                            depth_multiplier=1, use_bias=spec.use_bias, name=spec.name,
                                            depthwise_initializer=PLACEHOLDER)(x)
    return keras.layers.Conv2D(spec.features, spec.kernel_size, strides=spec.stride, padding=padding,
                               use_bias=spec.use_bias, name=spec.name, kernel_initializer=PLACEHOLDER)(x)


def _mask_input(keras: Any, item: Any, dtype: str) -> Any:
    """The optional model input carrying a dropout layer's host mask: (n,) per sample, else (n, *activation)."""
    shape = () if item.layer.per_sample else tuple(item.input_shape)
    return keras.Input(shape=shape, name=f"{item.layer.name}_mask", optional=True, dtype=dtype)


@dataclass(frozen=True)
class Translation:
    """What every kind's builder needs besides its spec and input: Keras, the build's switches, the mask inputs."""

    keras: Any
    synchronized: bool = False  # BatchNormalization(synchronized=True) (TensorFlow's data parallel)
    masks: dict[str, Any] = field(default_factory=dict)  # dropout layer name -> its mask input
    attention: str = "fused"  # the framework option: "fused" (keras.ops.dot_product_attention) or "reference"
    kept: tuple[str, ...] = ()  # option keep_fp32: layer names and kinds built in float32 (float32_layers)
    fp8: frozenset[str] = frozenset()  # the layers whose matmuls run the FP8 recipe (precision fp8, keras.fp8)


Builder = Callable[[Translation, LayerSpec, Any], Any]


def _batch_norm(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.parts import UnbiasedBatchNormalization

    # PyTorch's momentum 0.1 is Keras's 0.9 (the weight of the old value).
    return UnbiasedBatchNormalization(momentum=1.0 - spec.momentum, epsilon=spec.epsilon, name=spec.name,
                                      synchronized=t.synchronized)(x)


def _residual(t: Translation, spec: LayerSpec, x: Any) -> Any:
    return t.keras.layers.Add()([apply_layers(t, spec.body, x), apply_layers(t, spec.shortcut, x)])


def _multiply(t: Translation, spec: LayerSpec, x: Any) -> Any:  # squeeze-and-excitation: body(x) is (1, 1, c)
    return t.keras.layers.Multiply()([x, apply_layers(t, spec.body, x)])


def _dropout(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.parts import HostDropout

    return HostDropout(per_sample=spec.per_sample, name=spec.name)(x, t.masks[spec.name])


def _zero_pad(t: Translation, spec: LayerSpec, x: Any) -> Any:
    top, bottom, left, right = spec.pads
    return t.keras.layers.ZeroPadding2D(((top, bottom), (left, right)))(x)


def _global_avg_pool(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.parts import GlobalAveragePooling

    return GlobalAveragePooling(keepdims=spec.keepdims)(x)


def _dense(t: Translation, spec: LayerSpec, x: Any) -> Any:
    """Keras's Dense, on the last axis: features, or every token of a (n, t, f) tensor (float64 kept, see
    token_layers.TokenDense)."""
    from amp_suite_plugins.keras.token_layers import TokenDense

    if spec.name in t.fp8:
        from amp_suite_plugins.keras.fp8 import Fp8Dense

        return Fp8Dense(spec.features, use_bias=spec.use_bias, name=spec.name, kernel_initializer=PLACEHOLDER)(x)
    return TokenDense(spec.features, use_bias=spec.use_bias, name=spec.name, kernel_initializer=PLACEHOLDER)(x)


def _patch_embed(t: Translation, spec: LayerSpec, x: Any) -> Any:
    """A Conv2D with kernel = stride = patch (HWIO kernel: the canonical layout), its NHWC output
    reshaped to tokens in row-major order."""
    p = spec.kernel_size
    x = t.keras.layers.Conv2D(spec.features, p, strides=p, padding="valid", use_bias=spec.use_bias, name=spec.name,
                              kernel_initializer=PLACEHOLDER)(x)
    return t.keras.layers.Reshape((x.shape[1] * x.shape[2], spec.features), name=f"{spec.name}_tokens")(x)


def _token_layer(name: str) -> Callable[[Translation, LayerSpec, Any], Any]:
    """A builder of the parameterless-constructor layer ``name`` of :mod:`token_layers` (named by the spec)."""
    def build(t: Translation, spec: LayerSpec, x: Any) -> Any:
        from amp_suite_plugins.keras import token_layers

        return getattr(token_layers, name)(name=spec.name or None)(x)
    return build


def _layer_norm(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.token_layers import TokenLayerNormalization

    return TokenLayerNormalization(spec.epsilon, name=spec.name)(x)


def _rms_norm(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.token_layers import TokenRMSNormalization

    return TokenRMSNormalization(spec.epsilon, name=spec.name)(x)


def _attention(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.token_layers import TokenAttention

    if spec.name in t.fp8:
        from amp_suite_plugins.keras.fp8 import Fp8TokenAttention

        return Fp8TokenAttention(spec.heads, spec.causal, t.attention, name=spec.name)(x)
    return TokenAttention(spec.heads, spec.causal, t.attention, name=spec.name)(x)


def _token_pool(t: Translation, spec: LayerSpec, x: Any) -> Any:
    from amp_suite_plugins.keras.token_layers import ClassTokenPool, TokenMeanPool

    return (TokenMeanPool() if spec.kind == "token_mean_pool" else ClassTokenPool())(x)


# One entry per layer kind of the vocabulary (amp_suite.workloads.kinds): adding a kind is one entry here.
BUILDERS: dict[str, Builder] = {
    "conv2d": lambda t, spec, x: _conv(t.keras, spec, x),
    "depthwise_conv2d": lambda t, spec, x: _conv(t.keras, spec, x),
    "zero_pad": _zero_pad,
    "batch_norm": _batch_norm,
    "relu": lambda t, spec, x: t.keras.layers.ReLU()(x),
    "relu6": lambda t, spec, x: t.keras.layers.ReLU(max_value=6.0)(x),
    "swish": lambda t, spec, x: t.keras.layers.Activation("swish")(x),  # Keras's swish is x * sigmoid(x)
    "sigmoid": lambda t, spec, x: t.keras.layers.Activation("sigmoid")(x),
    "gelu": _token_layer("ExactGelu"),
    "residual": _residual,
    "multiply": _multiply,
    "max_pool": lambda t, spec, x: t.keras.layers.MaxPooling2D(spec.window, strides=spec.stride)(x),
    "avg_pool": lambda t, spec, x: t.keras.layers.AveragePooling2D(spec.window, strides=spec.stride)(x),
    "global_avg_pool": _global_avg_pool,
    "flatten": lambda t, spec, x: t.keras.layers.Flatten()(x),
    "dense": _dense,
    "dropout": _dropout,
    "patch_embed": _patch_embed,
    "class_token": _token_layer("ClassToken"),
    "position_embedding": _token_layer("PositionEmbedding"),
    # Keras's Embedding: the rows are looked up in the variable dtype and cast to the compute dtype.
    "token_embedding": lambda t, spec, x: t.keras.layers.Embedding(spec.vocab_size, spec.features, name=spec.name,
                                                                   embeddings_initializer=PLACEHOLDER)(x),
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "multi_head_attention": _attention,
    "token_mean_pool": _token_pool,
    "class_token_pool": _token_pool,
}
LAYER_KINDS = tuple(BUILDERS)


def apply_layers(t: Translation, specs: tuple[LayerSpec, ...], x: Any) -> Any:
    """Translate the layer vocabulary into Keras functional calls on ``x``, one table entry per kind."""
    for spec in specs:
        builder = BUILDERS.get(spec.kind)
        if builder is None:
            raise UnsupportedError(f"the Keras plugins cannot build layer kind {spec.kind!r}; they build: "
                                   f"{', '.join(LAYER_KINDS)}")
        if t.kept and keeps(spec, t.kept):
            x = in_float32(t.keras, partial(builder, t, spec, x), spec.name)
        else:
            x = builder(t, spec, x)
    return x


# canonical leaf -> Keras weight position, per layer kind (Keras orders a layer's weights so)
LEAVES = {"conv2d": ("w", "b"), "depthwise_conv2d": ("w", "b"), "dense": ("w", "b"),
          "batch_norm": ("scale", "offset", "mean", "var"), "patch_embed": ("w", "b"), "class_token": ("token",),
          "position_embedding": ("table",), "token_embedding": ("table",), "layer_norm": ("scale", "offset"),
          "rms_norm": ("scale",), "multi_head_attention": ("qkv_w", "qkv_b", "out_w", "out_b")}


def named_layers(workload: Workload) -> dict[str, LayerSpec]:
    return {spec.name: spec for spec in iter_layers(workload.layers) if spec.kind in LEAVES}


def dropouts(workload: Workload) -> list[Any]:
    """The dropout layers with the activation shapes they see, in definition order."""
    return [item for item in walk(workload.layers, workload.input_shape) if item.layer.kind == "dropout"]


def input_dtype(workload: Workload, stored_dtype: str) -> str:
    """The model input's dtype: int32 token ids for a token workload, else images in ``stored_dtype``."""
    return "int32" if workload.tokens else stored_dtype


def input_array(images: np.ndarray, stored_dtype: str) -> np.ndarray:
    """A batch's model input as the model takes it: token ids stay integers, images become ``stored_dtype``."""
    array = np.asarray(images)
    return array if np.issubdtype(array.dtype, np.integer) else np.asarray(array, dtype=stored_dtype)


def build_keras_model(keras: Any, workload: Workload, variables: dict[str, np.ndarray],
                       synchronized: bool = False, stored_dtype: str = "float32", attention: str = "fused",
                       kept: tuple[str, ...] = (), fp8: bool = False) -> Any:
    """The functional model: inputs ``images`` alone, or ``[images, *masks]`` with dropout (see :func:`model_inputs`).

    ``stored_dtype`` is the dtype of image inputs and of the logits (float64
    under fp64); a token workload takes int32 ids.  ``attention`` picks the
    implementation of ``multi_head_attention`` (the framework option);
    ``kept`` the layers and kinds option ``keep_fp32`` keeps in float32;
    ``fp8`` puts the FP8 layers of the workload (all dense and attention
    layers but the head) in FP8 (:mod:`amp_suite_plugins.keras.fp8`).
    """
    inputs = keras.Input(shape=workload.input_shape, dtype=input_dtype(workload, stored_dtype))
    masks = {item.layer.name: _mask_input(keras, item, stored_dtype) for item in dropouts(workload)}
    translation = Translation(keras, synchronized, masks, attention, kept,
                              frozenset(fp8_layer_names(workload.layers)) if fp8 else frozenset())
    # Logits leave the mixed-precision region in float32 (float64 under fp64).
    outputs = keras.layers.Activation("linear", dtype=stored_dtype, name="logits_float32")(
        apply_layers(translation, workload.layers, inputs))
    model = keras.Model([inputs, *masks.values()] if masks else inputs, outputs, name=workload.name)
    # Canonical layouts are Keras's own: HWIO kernels, (in, out) dense, NHWC flatten.
    for name, spec in named_layers(workload).items():
        leaves = [leaf for leaf in LEAVES[spec.kind] if f"{name}/{leaf}" in variables]
        layer = model.get_layer(name)
        layer.set_weights([np.asarray(variables[f"{name}/{leaf}"], layer.variable_dtype) for leaf in leaves])
    return model


def keras_variables(keras_model: Any, named: dict[str, LayerSpec]) -> dict[str, Any]:
    """The Keras variable of every canonical variable name (``layer/leaf``)."""
    return {f"{name}/{leaf}": variable for name, spec in named.items()
            for leaf, variable in zip(LEAVES[spec.kind], keras_model.get_layer(name).weights, strict=False)}


def read_variables(keras_model: Any, named: dict[str, LayerSpec], stored_dtype: str) -> dict[str, np.ndarray]:
    """The canonical variables (``layer/leaf``) of a built Keras model, in ``stored_dtype``."""
    out = {}
    for name, spec in named.items():
        values = keras_model.get_layer(name).get_weights()
        for leaf, value in zip(LEAVES[spec.kind], values, strict=False):
            out[f"{name}/{leaf}"] = np.asarray(value, dtype=stored_dtype)
    return out


def undecayed_variables(keras_model: Any, workload: Workload) -> list[Any]:
    """The Keras variables AdamW must not decay: those whose ``VariableSpec.decay`` is false."""
    from amp_suite.workloads.workload import variable_specs

    decayed = {spec.name for spec in variable_specs(workload) if spec.decay}
    return [variable for name, variable in keras_variables(keras_model, named_layers(workload)).items()
            if name not in decayed]


@contextlib.contextmanager
def statistics_kept(model: Any) -> Iterator[None]:
    """Put ``model``'s non-trainable variables (BatchNorm's moving statistics) back as they were on leaving:
    a training-mode call moves them, and ``predict`` must move nothing."""
    saved = [v.numpy() for v in model.non_trainable_variables]
    try:
        yield
    finally:
        for variable, value in zip(model.non_trainable_variables, saved, strict=True):
            variable.assign(value)

