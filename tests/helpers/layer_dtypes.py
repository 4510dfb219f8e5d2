"""Looks inside the built-in plugins' models: the dtypes their layers compute and keep.

Each function is an ``inspect`` of :class:`amp_suite.testing.ProbeRequest`:
called in the probe process with the plugin's model handle and one batch.
"""

from __future__ import annotations

import numpy as np


def layer_dtypes(framework: str, model, images: np.ndarray) -> dict[str, list[str]]:
    """Which dtypes the layers compute and keep.

    ``conv_output``, ``depthwise_output`` and ``dense_output``: what convolutions,
    depthwise convolutions and dense layers return; ``sigmoid_output``: what the
    ``sigmoid`` layer kind returns (the squeeze-and-excitation gate; ``swish``
    is not counted); ``bn_variable``: BatchNorm's parameters and statistics.
    A kind the model does not have stays empty.
    """
    out: dict[str, set[str]] = {"conv_output": set(), "depthwise_output": set(), "bn_variable": set(),
                                "dense_output": set(), "sigmoid_output": set()}
    if framework == "torch":
        import torch
        from torch.overrides import TorchFunctionMode

        class SigmoidDtypes(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                if func in (torch.sigmoid, torch.Tensor.sigmoid):
                    out["sigmoid_output"].add(str(result.dtype).replace("torch.", ""))
                return result

        handles = []
        for module in model.module.named.values():
            kind = None
            if isinstance(module, torch.nn.Conv2d):
                kind = "depthwise_output" if module.groups > 1 else "conv_output"
            elif isinstance(module, torch.nn.Linear):
                kind = "dense_output"
            if kind:
                handles.append(module.register_forward_hook(
                    lambda m, args, result, kind=kind: out[kind].add(str(result.dtype).replace("torch.", ""))))
            else:
                for tensor in (module.weight, module.bias, module.running_mean, module.running_var):
                    out["bn_variable"].add(str(tensor.dtype).replace("torch.", ""))
        model.module.eval()  # a training-mode forward would move the running statistics
        with torch.no_grad(), torch.autocast("cpu", dtype=model.autocast_dtype or torch.float32,
                                             enabled=model.autocast_dtype is not None), SigmoidDtypes():
            model.module(torch.from_numpy(images).permute(0, 3, 1, 2))
        for handle in handles:
            handle.remove()
        model.module.train()
    elif framework == "keras":
        import keras

        kinds = {}
        for layer in model.model.layers:
            if isinstance(layer, keras.layers.DepthwiseConv2D):
                kinds[layer.name] = "depthwise_output"
            elif isinstance(layer, keras.layers.Conv2D):
                kinds[layer.name] = "conv_output"
            elif isinstance(layer, keras.layers.Dense):
                kinds[layer.name] = "dense_output"
            elif isinstance(layer, keras.layers.Activation) and \
                    getattr(layer.activation, "__name__", "") == "sigmoid":
                kinds[layer.name] = "sigmoid_output"
        layers = [model.model.get_layer(name) for name in kinds]
        probe = keras.Model(model.model.inputs, [l.output for l in layers])
        # a model with dropout takes [images, *masks]; no mask (None) is an evaluation call
        inputs = [images] + [None] * (len(model.model.inputs) - 1) if len(model.model.inputs) > 1 else images
        outputs = probe(inputs, training=False)
        for layer, value in zip(layers, outputs, strict=True):
            out[kinds[layer.name]].add(keras.backend.standardize_dtype(value.dtype))  # any backend
        for layer in model.model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                out["bn_variable"].update(keras.backend.standardize_dtype(v.dtype) for v in layer.weights)
    elif framework == "jax":
        import haiku as hk
        import jax
        import jax.numpy as jnp

        def record(next_f, args, kwargs, context):
            result = next_f(*args, **kwargs)
            kind = {"Conv2D": "conv_output", "DepthwiseConv2D": "depthwise_output",
                    "Linear": "dense_output"}.get(type(context.module).__name__)
            if kind and context.method_name == "__call__":
                out[kind].add(str(result.dtype))
            return result

        plain_sigmoid = jax.nn.sigmoid

        def sigmoid(x):  # the plugin's sigmoid kind calls jax.nn.sigmoid (jax.nn.swish does not)
            result = plain_sigmoid(x)
            out["sigmoid_output"].add(str(jnp.dtype(result.dtype)))
            return result

        def forward(x):
            with hk.intercept_methods(record):
                return model.net_class()(x, False)

        params, state = model.params, model.state
        jax.nn.sigmoid = sigmoid
        try:
            jax.eval_shape(lambda p, s, x: hk.transform_with_state(forward).apply(p, s, None, x), params, state,
                           images)
        finally:
            jax.nn.sigmoid = plain_sigmoid
        for module_path, leaves in state.items():  # BatchNorm is the module with running statistics
            if {"mean", "var"} <= set(leaves):
                out["bn_variable"].update(str(v.dtype) for v in leaves.values())
                out["bn_variable"].update(str(v.dtype) for v in params[module_path].values())
    return {k: sorted(v) for k, v in out.items()}


def of_torch(model, images: np.ndarray) -> dict[str, list[str]]:
    return layer_dtypes("torch", model, images)


def of_keras(model, images: np.ndarray) -> dict[str, list[str]]:
    return layer_dtypes("keras", model, images)


def of_jax(model, images: np.ndarray) -> dict[str, list[str]]:
    return layer_dtypes("jax", model, images)
