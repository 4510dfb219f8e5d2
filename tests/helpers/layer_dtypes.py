"""Looks inside the built-in plugins' models: the dtypes their layers compute and keep.

Each function is an ``inspect`` of :class:`amp_suite.testing.ProbeRequest`:
called in the probe process with the plugin's model handle and one batch.
"""

from __future__ import annotations

import numpy as np


def layer_dtypes(framework: str, model, images: np.ndarray) -> dict[str, list[str]]:
    """Which dtypes the layers compute (convolutions, dense layers) and keep (BatchNorm variables)."""
    out: dict[str, set[str]] = {"conv_output": set(), "bn_variable": set(), "dense_output": set()}
    if framework == "torch":
        import torch

        handles = []
        for module in model.module.named.values():
            kind = "conv_output" if isinstance(module, torch.nn.Conv2d) else (
                "dense_output" if isinstance(module, torch.nn.Linear) else None)
            if kind:
                handles.append(module.register_forward_hook(
                    lambda m, args, result, kind=kind: out[kind].add(str(result.dtype).replace("torch.", ""))))
            else:
                for tensor in (module.weight, module.bias, module.running_mean, module.running_var):
                    out["bn_variable"].add(str(tensor.dtype).replace("torch.", ""))
        model.module.eval()  # a training-mode forward would move the running statistics
        with torch.no_grad(), torch.autocast("cpu", dtype=model.autocast_dtype or torch.float32,
                                             enabled=model.autocast_dtype is not None):
            model.module(torch.from_numpy(images).permute(0, 3, 1, 2))
        for handle in handles:
            handle.remove()
        model.module.train()
    elif framework == "keras":
        import keras

        convs = [l for l in model.model.layers if isinstance(l, keras.layers.Conv2D)]
        denses = [l for l in model.model.layers if isinstance(l, keras.layers.Dense)]
        probe = keras.Model(model.model.inputs, [l.output for l in convs + denses])
        outputs = probe(images, training=False)
        for layer, value in zip(convs + denses, outputs):
            out["conv_output" if layer in convs else "dense_output"].add(str(value.dtype.name))
        for layer in model.model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                out["bn_variable"].update(v.dtype for v in layer.weights)
    elif framework == "jax":
        import haiku as hk
        import jax

        def record(next_f, args, kwargs, context):
            result = next_f(*args, **kwargs)
            kind = {"Conv2D": "conv_output", "Linear": "dense_output"}.get(type(context.module).__name__)
            if kind and context.method_name == "__call__":
                out[kind].add(str(result.dtype))
            return result

        def forward(x):
            with hk.intercept_methods(record):
                return model.net_class()(x, False)

        params, state = model.params, model.state
        jax.eval_shape(lambda p, s, x: hk.transform_with_state(forward).apply(p, s, None, x), params, state,
                       images)
        for tree in (params, state):
            for module_path, leaves in tree.items():
                if "bn" in module_path.split("/")[-1]:
                    out["bn_variable"].update(str(v.dtype) for v in leaves.values())
    return {k: sorted(v) for k, v in out.items()}


def of_torch(model, images: np.ndarray) -> dict[str, list[str]]:
    return layer_dtypes("torch", model, images)


def of_keras(model, images: np.ndarray) -> dict[str, list[str]]:
    return layer_dtypes("keras", model, images)


def of_jax(model, images: np.ndarray) -> dict[str, list[str]]:
    return layer_dtypes("jax", model, images)
