"""The Keras model of a workload, the same on every Keras backend (TensorFlow, JAX, PyTorch).

The framework-neutral layer vocabulary (``amp_suite.workloads.layers``)
translated to Keras 3 layers, once: the Keras plugins of each backend
(``plugin`` on TensorFlow, ``on_jax``, ``on_torch``) build their model here
and read its variables back here.  Keras is passed in (imported by the hooks,
after ``KERAS_BACKEND`` is set); nothing in this module imports a backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.records import LayerSpec, Workload
from amp_suite.workloads.layers import iter_layers, walk

# The dtype policy of each precision: a global policy set before the model is built.
POLICIES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "mixed_float16", "amp_bf16": "mixed_bfloat16",
            "fp64": "float64"}


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
                                            depth_multiplier=1, use_bias=spec.use_bias, name=spec.name)(x)
    return keras.layers.Conv2D(spec.features, spec.kernel_size, strides=spec.stride, padding=padding,
                               use_bias=spec.use_bias, name=spec.name)(x)


def _mask_input(keras: Any, item: Any, dtype: str) -> Any:
    """The optional model input carrying a dropout layer's host mask: (n,) per sample, else (n, *activation)."""
    shape = () if item.layer.per_sample else tuple(item.input_shape)
    return keras.Input(shape=shape, name=f"{item.layer.name}_mask", optional=True, dtype=dtype)


def apply_layers(keras: Any, specs: tuple[LayerSpec, ...], x: Any, synchronized: bool = False,
           masks: dict[str, Any] | None = None) -> Any:
    """Translate the layer vocabulary into Keras functional calls on ``x``; ``masks``: dropout name -> mask input."""
    from amp_suite_plugins.keras.parts import GlobalAveragePooling, HostDropout, UnbiasedBatchNormalization

    layers = keras.layers
    masks = masks or {}
    for spec in specs:
        kind = spec.kind
        if kind in ("conv2d", "depthwise_conv2d"):
            x = _conv(keras, spec, x)
        elif kind == "batch_norm":
            # PyTorch's momentum 0.1 is Keras's 0.9 (the weight of the old value).
            x = UnbiasedBatchNormalization(momentum=1.0 - spec.momentum, epsilon=spec.epsilon, name=spec.name,
                                           synchronized=synchronized)(x)
        elif kind == "relu":
            x = layers.ReLU()(x)
        elif kind == "relu6":
            x = layers.ReLU(max_value=6.0)(x)
        elif kind in ("swish", "sigmoid"):  # Keras's swish is x * sigmoid(x)
            x = layers.Activation(kind)(x)
        elif kind == "residual":
            body = apply_layers(keras, spec.body, x, synchronized, masks)
            x = layers.Add()([body, apply_layers(keras, spec.shortcut, x, synchronized, masks)])
        elif kind == "multiply":  # squeeze-and-excitation: body(x) is (1, 1, c), broadcast
            x = layers.Multiply()([x, apply_layers(keras, spec.body, x, synchronized, masks)])
        elif kind == "dropout":
            x = HostDropout(per_sample=spec.per_sample, name=spec.name)(x, masks[spec.name])
        elif kind == "zero_pad":
            top, bottom, left, right = spec.pads
            x = layers.ZeroPadding2D(((top, bottom), (left, right)))(x)
        elif kind == "max_pool":
            x = layers.MaxPooling2D(spec.window, strides=spec.stride)(x)
        elif kind == "avg_pool":
            x = layers.AveragePooling2D(spec.window, strides=spec.stride)(x)
        elif kind == "global_avg_pool":
            x = GlobalAveragePooling(keepdims=spec.keepdims)(x)
        elif kind == "flatten":
            x = layers.Flatten()(x)
        elif kind == "dense":
            x = layers.Dense(spec.features, use_bias=spec.use_bias, name=spec.name)(x)
        else:
            raise ValueError(f"keras plugin cannot build layer kind {kind!r}")
    return x


# canonical leaf -> Keras weight position, per layer kind (Keras orders a layer's weights so)
LEAVES = {"conv2d": ("w", "b"), "depthwise_conv2d": ("w", "b"), "dense": ("w", "b"),
           "batch_norm": ("scale", "offset", "mean", "var")}


def named_layers(workload: Workload) -> dict[str, LayerSpec]:
    return {spec.name: spec for spec in iter_layers(workload.layers) if spec.kind in LEAVES}


def dropouts(workload: Workload) -> list[Any]:
    """The dropout layers with the activation shapes they see, in definition order."""
    return [item for item in walk(workload.layers, workload.input_shape) if item.layer.kind == "dropout"]


def build_keras_model(keras: Any, workload: Workload, variables: dict[str, np.ndarray],
                       synchronized: bool = False, stored_dtype: str = "float32") -> Any:
    """The functional model: inputs ``images`` alone, or ``[images, *masks]`` with dropout (see :func:`_inputs`).

    ``stored_dtype`` is the dtype of the inputs and the logits (float64 under fp64).
    """
    inputs = keras.Input(shape=workload.input_shape, dtype=stored_dtype)
    masks = {item.layer.name: _mask_input(keras, item, stored_dtype) for item in dropouts(workload)}
    # Logits leave the mixed-precision region in float32 (float64 under fp64).
    outputs = keras.layers.Activation("linear", dtype=stored_dtype, name="logits_float32")(
        apply_layers(keras, workload.layers, inputs, synchronized, masks))
    model = keras.Model([inputs, *masks.values()] if masks else inputs, outputs, name=workload.name)
    # Canonical layouts are Keras's own: HWIO kernels, (in, out) dense, NHWC flatten.
    for name, spec in named_layers(workload).items():
        leaves = [leaf for leaf in LEAVES[spec.kind] if f"{name}/{leaf}" in variables]
        layer = model.get_layer(name)
        layer.set_weights([np.asarray(variables[f"{name}/{leaf}"], layer.variable_dtype) for leaf in leaves])
    return model


def read_variables(keras_model: Any, named: dict[str, LayerSpec], stored_dtype: str) -> dict[str, np.ndarray]:
    """The canonical variables (``layer/leaf``) of a built Keras model, in ``stored_dtype``."""
    out = {}
    for name, spec in named.items():
        values = keras_model.get_layer(name).get_weights()
        for leaf, value in zip(LEAVES[spec.kind], values, strict=False):
            out[f"{name}/{leaf}"] = np.asarray(value, dtype=stored_dtype)
    return out
