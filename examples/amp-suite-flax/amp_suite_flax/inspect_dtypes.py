"""The dtypes inside a Flax model, for amp_suite.testing's precision check (``inspect``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def layer_dtypes(model: Any, images: np.ndarray) -> dict[str, list[str]]:
    """Dtypes convolutions, depthwise convolutions, dense layers and sigmoids compute in, and BatchNorm
    variables are kept in (a key of a kind the model lacks holds ``[]``)."""
    import jax
    from flax import nnx

    from amp_suite_flax.net import run_layers

    keys = {"conv2d": "conv_output", "depthwise_conv2d": "depthwise_output", "dense": "dense_output",
            "sigmoid": "sigmoid_output"}
    out: dict[str, set[str]] = {key: set() for key in (*keys.values(), "bn_variable")}

    def record(kind: str, value: Any) -> None:
        out[keys[kind]].add(str(value.dtype))

    def forward(p: Any, s: Any, x: Any) -> Any:
        return run_layers(nnx.merge(model.graphdef, p), model.layers, x.astype(model.compute_dtype), False, s,
                          record)[0]

    jax.eval_shape(forward, model.params, model.stats, images)
    bn_layers = {spec.name for spec in _named(model.layers) if spec.kind == "batch_norm"}
    for path, variable in nnx.to_flat_state(model.params):
        if str(path[0]) in bn_layers:
            out["bn_variable"].add(str(variable.dtype))
    for leaves in model.stats.values():
        out["bn_variable"].update(str(value.dtype) for value in leaves.values())
    return {k: sorted(v) for k, v in out.items()}


def _named(layers: Any) -> Any:
    from amp_suite.plugin_api import iter_layers

    return [spec for spec in iter_layers(layers) if spec.name]
