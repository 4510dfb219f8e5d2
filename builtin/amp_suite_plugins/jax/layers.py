"""The JAX plugin's translation of the layer vocabulary: one table entry per kind.

:data:`TRANSLATIONS` maps each kind of :data:`amp_suite.workloads.kinds.KINDS`
to a function ``translate(spec, x, call) -> y`` that applies it with haiku
modules and ``jax.nn``; adding a kind is one entry here.  A kind missing
from the table is an :class:`~amp_suite.errors.UnsupportedError` naming it.
JAX and haiku are imported inside the functions (the plugin module imports
this one at ``amp-suite list`` time, which must import no framework).

Variables are haiku parameters named after the layer, so the last part of a
module path plus the leaf is the canonical name (``block1_attn/qkv_w``).

Precision (``docs/layers.md``): the model's jmp policy casts parameters and
the input to the compute dtype, so ``dense``, ``patch_embed``, the attention
projections and both attention matmuls compute in it.  The float32 islands
are module classes of their own with a float32 policy (as haiku's ImageNet
example does for BatchNorm): ``batch_norm``, ``layer_norm`` and ``rms_norm``
compute their statistics and normalization in float32 and hand back the
compute dtype.  The reference attention upcasts its logits to float32 for
the softmax and casts the probabilities back; ``jax.nn.dot_product_attention``
does the same by itself (its XLA implementation accumulates ``q kᵀ`` in
float32 and always takes the softmax in float32).
"""

from __future__ import annotations

from typing import Any

from amp_suite.errors import UnsupportedError
from amp_suite.records import LayerSpec
from amp_suite.workloads.kept import keeps
from amp_suite_plugins.jax.layer_call import (  # noqa: F401 - re-exported
    ATTENTION_IMPLEMENTATIONS,
    Call,
    ModuleClasses,
    Translation,
    attention_implementation,
)
from amp_suite_plugins.jax.token_translations import (
    _class_token,
    _class_token_pool,
    _layer_norm,
    _multi_head_attention,
    _position_embedding,
    _rms_norm,
    _token_embedding,
    _token_mean_pool,
)

# The model's haiku module name: the first part of every module path.
MODULE_NAME = "sequential_cnn"


def run_layers(specs: tuple[LayerSpec, ...], x: Any, call: Call) -> Any:
    """The layer sequence on ``x`` (in the compute dtype, or int32 token ids).

    A plain function, not a method of the model's module: haiku applies a
    class's jmp policy to every method call, so a method would hand each
    residual branch back in float32 (the policy's output dtype).
    """
    for spec in specs:
        if call.kept and call.classes.float32_layer is not None and keeps(spec, call.kept):
            x = call.classes.float32_layer(spec)(x, call)
        else:
            x = translation(spec.kind, spec.name)(spec, x, call)
    return x


def translation(kind: str, name: str = "") -> Translation:
    """The table entry of ``kind``; an :class:`UnsupportedError` naming a kind the plugin does not build."""
    try:
        return TRANSLATIONS[kind]
    except KeyError:
        where = f" (layer {name!r})" if name else ""
        raise UnsupportedError(f"the jax plugin does not build layer kind {kind!r}{where}; it builds: "
                               f"{', '.join(TRANSLATIONS)}") from None


def module_classes(layers: tuple[LayerSpec, ...], sync_axis: str | None = None, replicas: int = 1,
                   statistics_dtype: str = "float32", kept: tuple[str, ...] = (),
                   fp8: tuple[str, ...] = ()) -> ModuleClasses:
    """Fresh haiku module classes for a model of ``layers``.

    ``sync_axis``: the mesh axis BatchNorm averages its batch moments over
    when called with ``sync``; ``statistics_dtype``: the running statistics'
    dtype (float64 under fp64; jmp policies cover parameters, not state).
    The attention implementation is chosen per call (:class:`Call`); ``kept``
    (option ``keep_fp32``) names the layers and kinds wrapped in ``float32_layer``;
    ``fp8`` names the layers whose matmuls run the FP8 recipe.
    """
    import haiku as hk
    import jax
    import jax.numpy as jnp

    class BatchNorm(hk.Module):
        """The suite's BatchNorm: batch statistics in training, running ones in evaluation.

        haiku's own ``hk.BatchNorm`` keeps its averages with zero-debiasing and
        the biased variance; the suite's running statistics start at 0 and 1 and
        track the unbiased variance, as PyTorch's do.
        """

        def __init__(self, spec: LayerSpec) -> None:
            super().__init__(name=spec.name)
            self.momentum, self.epsilon = spec.momentum, spec.epsilon

        def __call__(self, x: Any, is_training: bool, sync: bool = False) -> Any:
            channels = x.shape[-1]
            scale = hk.get_parameter("scale", (channels,), x.dtype, init=jnp.ones)
            offset = hk.get_parameter("offset", (channels,), x.dtype, init=jnp.zeros)
            running_mean = hk.get_state("mean", (channels,), statistics_dtype, init=jnp.zeros)
            running_var = hk.get_state("var", (channels,), statistics_dtype, init=jnp.ones)
            if is_training:
                mean = jnp.mean(x, axis=(0, 1, 2))
                count = x.size // channels
                if sync and sync_axis is not None:  # moments of the global batch: equal shards, means of means
                    mean = jax.lax.pmean(mean, sync_axis)
                    count *= replicas
                var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
                if sync and sync_axis is not None:
                    var = jax.lax.pmean(var, sync_axis)
                hk.set_state("mean", (1 - self.momentum) * running_mean + self.momentum * mean)
                hk.set_state("var", (1 - self.momentum) * running_var
                             + self.momentum * var * (count / (count - 1)))
            else:
                mean, var = running_mean.astype(x.dtype), running_var.astype(x.dtype)
            return (x - mean) * (scale * jax.lax.rsqrt(var + self.epsilon)) + offset

    class LayerNorm(hk.LayerNorm):
        """haiku's LayerNorm over the last axis (biased variance); a class of its own for its float32 policy."""

    class RMSNorm(hk.RMSNorm):
        """haiku's RMSNorm over the last axis; a class of its own for its float32 policy."""

    class Float32Layer(hk.Module):
        """One layer kept in float32 (its own class for its float32 policy: input cast up, output cast back).

        Its variables keep their canonical names: the plugin names a variable by
        the last part of its haiku path, the layer's own module or scope.
        """

        def __init__(self, spec: LayerSpec) -> None:
            super().__init__(name=f"{spec.name or spec.kind}_float32")
            self.spec = spec

        def __call__(self, x: Any, call: Call) -> Any:
            return translation(self.spec.kind, self.spec.name)(self.spec, x, call)

    class SpecNet(hk.Module):
        """The layer graph; ``masks`` (dropout name -> host mask) only in a training step, else no dropout."""

        def __init__(self) -> None:
            super().__init__(name=MODULE_NAME)

        def __call__(self, x: Any, is_training: bool, sync: bool = False,
                     masks: dict[str, Any] | None = None, attention: str = "fused") -> Any:
            return run_layers(layers, x, Call(is_training, sync, masks, classes, attention, kept, frozenset(fp8)))

    classes = ModuleClasses(SpecNet, BatchNorm, LayerNorm, RMSNorm, Float32Layer if kept else None)
    return classes


# --- the translations ---------------------------------------------------------------------------------


def _conv2d(spec: LayerSpec, x: Any, call: Call) -> Any:
    import haiku as hk

    pad = ((spec.padding, spec.padding),) * 2
    return hk.Conv2D(spec.features, spec.kernel_size, stride=spec.stride, padding=pad, with_bias=spec.use_bias,
                     name=spec.name)(x)


def _depthwise_conv2d(spec: LayerSpec, x: Any, call: Call) -> Any:
    """haiku's kernel is (k, k, 1, c), the canonical one (k, k, c, 1): the plugin reshapes on load and read."""
    import haiku as hk

    pad = ((spec.padding, spec.padding),) * 2
    return hk.DepthwiseConv2D(1, spec.kernel_size, stride=spec.stride, padding=pad, with_bias=spec.use_bias,
                              name=spec.name)(x)


def _batch_norm(spec: LayerSpec, x: Any, call: Call) -> Any:
    return call.classes.batch_norm(spec)(x, call.is_training, call.sync)


def _activation(name: str) -> Translation:
    def apply(spec: LayerSpec, x: Any, call: Call) -> Any:
        import jax

        return getattr(jax.nn, name)(x)

    return apply


def _gelu(spec: LayerSpec, x: Any, call: Call) -> Any:
    import jax

    return jax.nn.gelu(x, approximate=False)  # the exact erf form


def _residual(spec: LayerSpec, x: Any, call: Call) -> Any:
    return run_layers(spec.body, x, call) + run_layers(spec.shortcut, x, call)


def _multiply(spec: LayerSpec, x: Any, call: Call) -> Any:
    """Squeeze-and-excitation: body(x) is (n, 1, 1, c), broadcast over height and width."""
    return x * run_layers(spec.body, x, call)


def _dropout(spec: LayerSpec, x: Any, call: Call) -> Any:
    if call.masks is None:
        return x
    keep = call.masks[spec.name].astype(x.dtype)
    return x * (keep.reshape((-1,) + (1,) * (x.ndim - 1)) if keep.ndim == 1 else keep)


def _zero_pad(spec: LayerSpec, x: Any, call: Call) -> Any:
    import jax.numpy as jnp

    top, bottom, left, right = spec.pads
    return jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))


def _pool(name: str) -> Translation:
    def apply(spec: LayerSpec, x: Any, call: Call) -> Any:
        import haiku as hk

        return getattr(hk, name)(x, window_shape=(1, spec.window, spec.window, 1),
                                 strides=(1, spec.stride, spec.stride, 1), padding="VALID")

    return apply


def _global_avg_pool(spec: LayerSpec, x: Any, call: Call) -> Any:
    import jax.numpy as jnp

    return jnp.mean(x, axis=(1, 2), keepdims=spec.keepdims)


def _flatten(spec: LayerSpec, x: Any, call: Call) -> Any:
    import haiku as hk

    return hk.Flatten()(x)


def _dense(spec: LayerSpec, x: Any, call: Call) -> Any:
    """``x @ w + b`` on the last axis: features, or every token of a token tensor."""
    import haiku as hk

    if spec.name in call.fp8:
        from amp_suite_plugins.jax.fp8 import projection_class

        return projection_class()(name=spec.name)(x, "w", "b" if spec.use_bias else "", spec.features)
    return hk.Linear(spec.features, with_bias=spec.use_bias, name=spec.name)(x)


def _patch_embed(spec: LayerSpec, x: Any, call: Call) -> Any:
    """A convolution with kernel = stride = patch, its (h/p, w/p, f) output flattened row-major to tokens."""
    import haiku as hk

    patch = spec.kernel_size
    y = hk.Conv2D(spec.features, patch, stride=patch, padding="VALID", with_bias=spec.use_bias, name=spec.name)(x)
    return y.reshape(y.shape[0], y.shape[1] * y.shape[2], y.shape[3])


TRANSLATIONS: dict[str, Translation] = {
    "conv2d": _conv2d,
    "depthwise_conv2d": _depthwise_conv2d,
    "zero_pad": _zero_pad,
    "batch_norm": _batch_norm,
    "relu": _activation("relu"),
    "relu6": _activation("relu6"),
    "swish": _activation("swish"),
    "sigmoid": _activation("sigmoid"),
    "gelu": _gelu,
    "residual": _residual,
    "multiply": _multiply,
    "max_pool": _pool("max_pool"),
    "avg_pool": _pool("avg_pool"),
    "global_avg_pool": _global_avg_pool,
    "flatten": _flatten,
    "dense": _dense,
    "dropout": _dropout,
    "patch_embed": _patch_embed,
    "class_token": _class_token,
    "position_embedding": _position_embedding,
    "token_embedding": _token_embedding,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "multi_head_attention": _multi_head_attention,
    "token_mean_pool": _token_mean_pool,
    "class_token_pool": _class_token_pool,
}
# The kinds this plugin builds (FrameworkInfo.layer_kinds).
LAYER_KINDS = tuple(TRANSLATIONS)
