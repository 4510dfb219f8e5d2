"""The Flax backend's network: the layer vocabulary as NNX modules, and the forward pass over them.

Mixed precision follows Flax's own convention: ``param_dtype=float32`` and
``dtype=<compute dtype>`` on every ``nnx.Conv`` and ``nnx.Linear``, and a
BatchNorm of our own whose parameters, statistics and arithmetic stay float32
(PyTorch's running statistics: momentum 0.1, unbiased variance).  Every kind of
the layer vocabulary (``amp_suite.plugin_api.LAYER_KINDS``) is translated as the
built-in haiku plugin translates it: ``depthwise_conv2d`` is an ``nnx.Conv``
with ``feature_group_count`` = channels, ``zero_pad`` a ``jnp.pad``,
``relu6``/``swish``/``sigmoid`` the ``jax.nn`` functions in the compute dtype,
``multiply`` the squeeze-and-excitation product ``x * body(x)``; a ``dropout``
layer multiplies its activation by the host's mask.  The running statistics are
a plain ``{layer: {"mean", "var"}}`` dict that the forward pass takes and
returns (an NNX ``BatchStat`` cannot be assigned under ``jax.grad`` inside
``jit``: flax raises ``TraceContextError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_suite.plugin_api import LayerSpec, UnsupportedError, Workload, keeps, walk
from amp_suite_flax.data_parallel import mean_over_replicas

# The layer kinds this backend builds (the whole vocabulary of amp_suite.plugin_api.LAYER_KINDS);
# build_model refuses a model with any other (UnsupportedError), as a backend does for a kind it lacks.
KINDS = ("conv2d", "depthwise_conv2d", "zero_pad", "batch_norm", "relu", "relu6", "swish", "sigmoid", "residual",
         "multiply", "max_pool", "avg_pool", "global_avg_pool", "flatten", "dense", "dropout")
# BatchNorm statistics: {layer: {"mean": array, "var": array}}, float32.
Stats = dict[str, dict[str, Any]]


def _batch_norm_class() -> type:
    """The suite's BatchNorm as an NNX module (defined lazily: flax is imported inside the hooks)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class BatchNorm(nnx.Module):
        """Batch statistics in training, running ones in evaluation; float32 throughout.

        ``nnx.BatchNorm`` updates its running variance with the biased batch
        variance and takes momentum the other way round; the suite's running
        statistics track the *unbiased* variance with PyTorch's momentum.
        """

        def __init__(self, channels: int, spec: LayerSpec, compute_dtype: str) -> None:
            self.scale = nnx.Param(jnp.ones((channels,), jnp.float32))
            self.offset = nnx.Param(jnp.zeros((channels,), jnp.float32))
            self.momentum, self.epsilon, self.compute_dtype = spec.momentum, spec.epsilon, compute_dtype

        def __call__(self, x: Any, training: bool, stats: dict[str, Any],
                     sync_axis: str | None = None) -> tuple[Any, dict[str, Any]]:
            """``(y, new_stats)``: the statistics are passed in and returned, never assigned.

            Inside the data-parallel step, ``sync_axis`` (the mesh axis) makes the
            batch moments those of the global batch: every replica's shard has the
            same size, so the mean of the replicas' means is the global mean, and the
            mean of their squared deviations from it the global (biased) variance.
            """
            x = x.astype(jnp.float32)
            if training:
                mean = mean_over_replicas(jnp.mean(x, axis=(0, 1, 2)), sync_axis)
                var = mean_over_replicas(jnp.mean(jnp.square(x - mean), axis=(0, 1, 2)), sync_axis)
                count = x.size // x.shape[-1] * (jax.lax.axis_size(sync_axis) if sync_axis else 1)
                stats = {"mean": (1 - self.momentum) * stats["mean"] + self.momentum * mean,
                         "var": (1 - self.momentum) * stats["var"] + self.momentum * var * (count / (count - 1))}
            else:
                mean, var = stats["mean"], stats["var"]
            y = (x - mean) * (self.scale[...] * jax.lax.rsqrt(var + self.epsilon)) + self.offset[...]
            return y.astype(self.compute_dtype), stats

    return BatchNorm


def build_net(workload: Workload, compute_dtype: str, seed: int = 0, kept: tuple[str, ...] = ()) -> Any:
    """An ``nnx.Module`` with one attribute per named layer of ``workload.layers`` (random initial values).

    ``kept`` (option ``keep_fp32``, ``applied.keep_fp32``) names the layers and
    kinds that compute in float32: their modules get ``dtype=float32`` and
    :func:`run_layers` casts their input up and their output back.
    """
    import jax.numpy as jnp
    from flax import nnx

    rngs = nnx.Rngs(seed)
    batch_norm = _batch_norm_class()
    net: Any = nnx.Module()
    net.kept = tuple(kept)
    for item in walk(workload.layers, workload.input_shape):
        spec, channels = item.layer, item.input_shape[-1]
        dtype = "float32" if keeps(spec, kept) else compute_dtype
        if spec.kind in ("conv2d", "depthwise_conv2d"):
            pad = ((spec.padding, spec.padding),) * 2  # symmetric: spec.padding zero pixels on every side
            # depthwise: one filter per channel, kernel (k, k, 1, c) (the canonical one is (k, k, c, 1))
            features, groups = (spec.features, 1) if spec.kind == "conv2d" else (channels, channels)
            layer: Any = nnx.Conv(channels, features, (spec.kernel_size,) * 2, strides=spec.stride, padding=pad,
                             feature_group_count=groups, use_bias=spec.use_bias, dtype=dtype,
                             param_dtype=jnp.float32, rngs=rngs)
        elif spec.kind == "dense":
            layer = nnx.Linear(channels, spec.features, use_bias=spec.use_bias, dtype=dtype,
                               param_dtype=jnp.float32, rngs=rngs)
        elif spec.kind == "batch_norm":
            layer = batch_norm(channels, spec, compute_dtype)
        else:
            continue
        setattr(net, spec.name, layer)
    return net


def run_layers(net: Any, layers: tuple[LayerSpec, ...], x: Any, training: bool, stats: Stats,
               record: Callable[[str, Any], None] | None = None,
               sync_axis: str | None = None, masks: dict[str, Any] | None = None) -> tuple[Any, Stats]:
    """The forward pass of the layer vocabulary over ``net``'s modules (NHWC): ``(output, new_stats)``.

    ``x`` is in the compute dtype and every layer keeps it there (BatchNorm
    computes in float32 and hands back the compute dtype).  ``sync_axis`` (a
    mesh axis, inside ``shard_map`` only) synchronizes BatchNorm's batch
    moments over it.  ``masks`` (dropout layer name -> the host's scaled
    mask) is given by the train step only: without it ``dropout`` is the
    identity (evaluation, ``predict``).  ``record(kind, output)`` sees the
    output of every conv2d, depthwise_conv2d, dense and sigmoid layer.
    """
    import jax
    import jax.numpy as jnp

    def run(body: tuple[LayerSpec, ...], x: Any, stats: Stats) -> tuple[Any, Stats]:
        return run_layers(net, body, x, training, stats, record, sync_axis, masks)

    stats = dict(stats)
    kept = getattr(net, "kept", ())
    for spec in layers:
        kind = spec.kind
        narrow = x.dtype if keeps(spec, kept) else None  # keep_fp32: in float32, the output cast back below
        if narrow is not None:
            x = x.astype(jnp.float32)
        if kind in ("conv2d", "depthwise_conv2d", "dense"):
            x = getattr(net, spec.name)(x)
        elif kind == "batch_norm":
            x, stats[spec.name] = getattr(net, spec.name)(x, training, stats[spec.name], sync_axis)
        elif kind == "relu":
            x = jax.nn.relu(x)
        elif kind == "relu6":
            x = jax.nn.relu6(x)
        elif kind == "swish":
            x = jax.nn.swish(x)
        elif kind == "sigmoid":
            x = jax.nn.sigmoid(x)
        elif kind == "residual":
            body, stats = run(spec.body, x, stats)
            shortcut, stats = run(spec.shortcut, x, stats)
            x = body + shortcut
        elif kind == "multiply":  # squeeze-and-excitation: body(x) is (n, 1, 1, c), broadcast over h and w
            gate, stats = run(spec.body, x, stats)
            x = x * gate
        elif kind == "dropout":
            if masks is not None:  # training steps only; the mask is (n, *activation) or (n,) per sample
                keep = masks[spec.name].astype(x.dtype)
                x = x * (keep.reshape((-1,) + (1,) * (x.ndim - 1)) if keep.ndim == 1 else keep)
        elif kind == "zero_pad":
            top, bottom, left, right = spec.pads
            x = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
        elif kind in ("max_pool", "avg_pool"):
            window, strides = (1, spec.window, spec.window, 1), (1, spec.stride, spec.stride, 1)
            if kind == "max_pool":
                x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, "VALID")
            else:
                x = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, "VALID") / (spec.window ** 2)
        elif kind == "global_avg_pool":
            x = jnp.mean(x, axis=(1, 2), keepdims=spec.keepdims)
        elif kind == "flatten":
            x = x.reshape(x.shape[0], -1)
        else:
            raise ValueError(f"flax plugin cannot build layer kind {kind!r}")
        if record and kind in ("conv2d", "depthwise_conv2d", "dense", "sigmoid"):
            record(kind, x)
        if narrow is not None:
            x = x.astype(narrow)
    return x, stats


def check_kinds(layers: tuple[LayerSpec, ...]) -> None:
    """A one-line :class:`UnsupportedError` naming the first layer of a kind this backend does not build."""
    from amp_suite.plugin_api import iter_layers

    for spec in iter_layers(layers):
        if spec.kind not in KINDS:
            where = f" (layer {spec.name!r})" if spec.name else ""
            raise UnsupportedError(f"the flax backend does not build layer kind {spec.kind!r}{where}; "
                                   f"it builds {', '.join(KINDS)}")
