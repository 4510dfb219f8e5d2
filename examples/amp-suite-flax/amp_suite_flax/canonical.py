"""The Flax backend's variables in the suite's canonical names and layouts, both ways, and AdamW's decay mask.

The layouts are the canonical ones (HWIO kernels, ``(in, out)`` dense
weights) but for a depthwise kernel: canonical ``(k, k, c, 1)``, the grouped
``nnx.Conv``'s ``(k, k, 1, c)``, the same memory order reshaped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from amp_suite.plugin_api import LayerSpec, Workload
from amp_suite_flax.net import Stats

# Canonical leaf name -> the nnx attribute holding it, per layer kind.
LEAVES = {"conv2d": {"w": "kernel", "b": "bias"}, "depthwise_conv2d": {"w": "kernel", "b": "bias"},
          "dense": {"w": "kernel", "b": "bias"}, "batch_norm": {"scale": "scale", "offset": "offset"}}


def kinds_by_name(layers: tuple[LayerSpec, ...]) -> dict[str, str]:
    """Layer name -> kind, for every named layer."""
    from amp_suite.plugin_api import iter_layers

    return {spec.name: spec.kind for spec in iter_layers(layers) if spec.name}


def _to_flax_layout(kind: str, value: np.ndarray) -> np.ndarray:
    """A canonical depthwise kernel (k, k, c, 1) as nnx.Conv's grouped kernel (k, k, 1, c) (same memory order)."""
    return value.reshape(*value.shape[:2], 1, value.shape[2]) if kind == "depthwise_conv2d" and value.ndim == 4 \
        else value


def _from_flax_layout(kind: str, value: np.ndarray) -> np.ndarray:
    return value.reshape(*value.shape[:2], value.shape[3], 1) if kind == "depthwise_conv2d" and value.ndim == 4 \
        else value


def canonical_name(kinds: dict[str, str], path: str) -> str:
    """``layer/attribute[/value]`` of an nnx parameter as its canonical name ``layer/leaf`` (``conv1/bias``:
    ``conv1/b``)."""
    layer, attribute = path.removesuffix("/value").split("/")[:2]
    return f"{layer}/{next(leaf for leaf, name in LEAVES[kinds[layer]].items() if name == attribute)}"


def load_canonical(net: Any, layers: tuple[LayerSpec, ...], weights: dict[str, np.ndarray],
                   state: dict[str, np.ndarray]) -> Stats:
    """Give ``net``'s parameters the canonical values.

    ``net`` may be abstract (:func:`flax.nnx.eval_shape` of :func:`build_net`):
    every parameter must then get a value here, or this raises ``ValueError``.
    The layouts are the same (HWIO, (in, out), NHWC) but a depthwise kernel's:
    canonical ``(k, k, c, 1)``, nnx's ``(k, k, 1, c)`` (:func:`_to_flax_layout`).

    Returns the BatchNorm statistics of ``state`` as ``{layer: {"mean", "var"}}``.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    kinds = kinds_by_name(layers)
    for key, value in weights.items():
        layer, _, leaf = key.rpartition("/")
        variable = getattr(getattr(net, layer), LEAVES[kinds[layer]][leaf])
        value = _to_flax_layout(kinds[layer], value)
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"{key}: canonical shape {value.shape} != flax {tuple(variable.shape)}")
        variable.set_value(jnp.asarray(value, jnp.float32))
    # A parameter the canonical weights do not name would keep its traced placeholder, and fail far from here.
    unset = [canonical_name(kinds, jax.tree_util.keystr(path, simple=True, separator="/"))
             for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(net, nnx.Param))
             if not isinstance(leaf, jax.Array)]
    if unset:
        raise ValueError(f"no canonical value for {', '.join(sorted(unset))}")
    stats: Stats = {}
    for key, value in state.items():
        layer, _, leaf = key.rpartition("/")
        stats.setdefault(layer, {})[leaf] = jnp.asarray(value, jnp.float32)
    return stats


def canonical_variables(layers: tuple[LayerSpec, ...], params: Any, stats: Stats) -> dict[str, np.ndarray]:
    """The inverse of :func:`load_canonical`: canonical names, float32 numpy copies."""
    from flax import nnx

    kinds = kinds_by_name(layers)
    out = {}
    for path, variable in nnx.to_flat_state(params):
        layer, attr = str(path[0]), str(path[-1])
        leaf = next(k for k, v in LEAVES[kinds[layer]].items() if v == attr)
        out[f"{layer}/{leaf}"] = _from_flax_layout(kinds[layer], np.array(variable[...], dtype=np.float32))
    for layer, leaves in stats.items():
        for leaf, value in leaves.items():
            out[f"{layer}/{leaf}"] = np.array(value, dtype=np.float32)
    return out


def decay_mask(workload: Workload) -> Callable[[Any], Any]:
    """``params -> tree of bools``: AdamW's decoupled decay applies to the variables declared ``decay`` only."""
    import jax

    from amp_suite.plugin_api import variable_specs

    decayed = {spec.name for spec in variable_specs(workload) if spec.decay}
    kinds = kinds_by_name(workload.layers)

    def mask(params: Any) -> Any:
        return jax.tree_util.tree_map_with_path(
            lambda path, _: canonical_name(kinds, jax.tree_util.keystr(path, simple=True, separator="/"))
            in decayed, params)

    return mask
