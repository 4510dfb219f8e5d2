"""PyTorch's translation of the layer vocabulary: one :data:`TORCH_KINDS` entry per kind.

An entry says how a kind runs (``apply``), which ``nn.Module`` holds its
variables (``build``; none for a kind without variables) and where each
canonical variable lives in that module and in which layout (``leaves``).
:func:`spec_net` builds the model of a workload from the table,
:func:`load_variables` and :func:`read_variables` move canonical variables in
and out, :func:`named_parameters` names each parameter canonically (for
AdamW's decay groups).  A kind missing from the table is an
:class:`~amp_suite.errors.UnsupportedError` naming it.

torch is never imported here: every function takes it as its first argument,
as the plugin's hooks do, so importing this module (for
``FrameworkInfo.layer_kinds``) costs nothing.

Precision (``docs/layers.md``, "Precision under AMP"): autocast casts the
inputs of convolutions, ``linear`` and matmuls to the compute dtype, and the
token kinds keep their activations in it (tables and the class token are cast
when used).  On the CPU autocast leaves ``layer_norm`` and ``softmax`` to their
reduced-precision input (its CUDA op list runs them in float32), so both are
upcast here explicitly to give the same float32 islands on every device: the
normalizations compute in float32 and cast their output back, the reference
attention's softmax runs in float32 and its probabilities are cast back for
the weighted sum.  Under ``fp64`` nothing is cast.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import numpy as np

from amp_suite.errors import UnsupportedError
from amp_suite.records import LayerSpec, Workload
from amp_suite.workloads.kept import keeps
from amp_suite.workloads.layers import walk
from amp_suite_plugins.torch.float32_layers import in_float32
from amp_suite_plugins.torch.variable_layouts import (  # noqa: F401 - re-exported
    ATTENTION_LEAVES,
    BATCH_NORM_LEAVES,
    CONV_LEAVES,
    DENSE_LEAVES,
    NORM_LEAVES,
    FlatHwc,
    Layout,
    Leaf,
    _depthwise_layout,
)

Shape = tuple[int, ...]
Masks = dict[str, Any]
ATTENTION_IMPLEMENTATIONS = ("fused", "reference")


@dataclass(frozen=True)
class TorchKind:
    """One kind in PyTorch.

    ``apply(torch, net, spec, x, masks)`` runs the layer on ``x`` inside
    :func:`spec_net`'s module ``net`` (whose ``named[spec.name]`` is the
    layer's module, ``run(body, x, masks)`` a nested sequence);
    ``build(torch, spec, input_shape)`` makes the module that owns the layer's
    variables (None: the kind has none).
    """

    apply: Callable[[Any, Any, LayerSpec, Any, Masks | None], Any]
    build: Callable[[Any, LayerSpec, Shape], Any] | None = None
    leaves: dict[str, Leaf] = field(default_factory=dict)


# --- precision helpers ----------------------------------------------------------------------------------


def _float32_at_least(torch: Any, x: Any) -> Any:
    """``x`` upcast to float32 when it is float16 or bfloat16 (float32 and float64 stay as they are)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _compute(net: Any, x: Any) -> Any:
    """``x`` in the net's compute dtype (autocast's under AMP; unchanged in fp32, tf32 and fp64)."""
    return x if net.compute_dtype is None else x.to(net.compute_dtype)


# --- builders -------------------------------------------------------------------------------------------


def _conv(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.Conv2d(shape[-1], spec.features, spec.kernel_size, stride=spec.stride, padding=spec.padding,
                           bias=spec.use_bias)


def _depthwise(torch: Any, spec: LayerSpec, shape: Shape) -> Any:  # depth multiplier 1: one group per channel
    c = shape[-1]
    return torch.nn.Conv2d(c, c, spec.kernel_size, stride=spec.stride, padding=spec.padding, groups=c,
                           bias=spec.use_bias)


def _batch_norm(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.BatchNorm2d(shape[-1], eps=spec.epsilon, momentum=spec.momentum)


def _dense(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.Linear(shape[-1], spec.features, bias=spec.use_bias)


def _patch(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.Conv2d(shape[-1], spec.features, spec.kernel_size, stride=spec.kernel_size, bias=spec.use_bias)


def _parameters(torch: Any, **shapes: tuple[int, ...]) -> Any:
    """A module holding one float32 parameter per keyword (loaded from the canonical variables afterwards)."""
    return torch.nn.ParameterDict({name: torch.nn.Parameter(torch.zeros(shape)) for name, shape in shapes.items()})


def _class_token(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return _parameters(torch, token=(shape[-1],))


def _position_table(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return _parameters(torch, table=tuple(shape))


def _token_table(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.Embedding(spec.vocab_size, spec.features)


def _layer_norm(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.LayerNorm(shape[-1], eps=spec.epsilon)


def _rms_norm(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    return torch.nn.RMSNorm(shape[-1], eps=spec.epsilon)


def _attention(torch: Any, spec: LayerSpec, shape: Shape) -> Any:
    f = shape[-1]
    return torch.nn.ModuleDict({"qkv": torch.nn.Linear(f, 3 * f), "out": torch.nn.Linear(f, f)})


# --- apply ----------------------------------------------------------------------------------------------


def _own_module(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    return net.named[spec.name](x)


def _dropout(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    if masks is None:
        return x
    mask = masks[spec.name]
    # per sample: (n,) broadcast over the rest; elementwise: staged in x's layout
    return x * (mask.view(-1, *(1,) * (x.dim() - 1)) if mask.dim() == 1 else mask)


def _zero_pad(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    top, bottom, left, right = spec.pads
    return torch.nn.functional.pad(x, (left, right, top, bottom))  # NCHW: last dim (width) first


def _global_avg_pool(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    pooled = torch.nn.functional.adaptive_avg_pool2d(x, 1)
    return pooled if spec.keepdims else torch.flatten(pooled, 1)


def _flatten(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    # channels-last: NHWC order, a view (the canonical HWC rows of the next dense layer); else NCHW order
    return torch.flatten(x.permute(0, 2, 3, 1) if net.flatten_channels_last else x, 1)


def _patch_embed(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    # (n, f, h/p, w/p) -> (n, h/p * w/p, f): token i * (w/p) + j is the patch at row i, column j
    # (a view when the convolution's output is channels-last)
    return net.named[spec.name](x).permute(0, 2, 3, 1).flatten(1, 2)


def _prepend_class_token(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    token = net.named[spec.name].token.to(x.dtype)
    return torch.cat([token.expand(x.shape[0], 1, -1), x], dim=1)


def _add_positions(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    return x + net.named[spec.name].table.to(x.dtype)


def _look_up_tokens(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    return _compute(net, net.named[spec.name](x))  # autocast leaves the lookup in the table's float32


def _apply_layer_norm(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    norm = net.named[spec.name]
    out = torch.nn.functional.layer_norm(_float32_at_least(torch, x), norm.normalized_shape, norm.weight, norm.bias,
                                         norm.eps)
    return out.to(x.dtype)


def _apply_rms_norm(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    norm = net.named[spec.name]
    return torch.nn.functional.rms_norm(_float32_at_least(torch, x), norm.normalized_shape, norm.weight,
                                        norm.eps).to(x.dtype)


def _apply_attention(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    layer = net.named[spec.name]
    n, t, f = x.shape
    heads = spec.heads
    # [q | k | v] along the last axis, each split into `heads` contiguous slices: (3, n, heads, t, f / heads)
    q, k, v = layer.qkv(x).view(n, t, 3, heads, f // heads).permute(2, 0, 3, 1, 4).unbind(0)
    if net.attention == "fused":
        mixed = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=spec.causal)
    else:
        mixed = reference_attention(torch, q, k, v, spec.causal)
    return layer.out(mixed.transpose(1, 2).reshape(n, t, f))


def reference_attention(torch: Any, q: Any, k: Any, v: Any, causal: bool) -> Any:
    """``softmax(q kᵀ / √d) v`` as three explicit ops, the softmax in float32 (float64 stays float64)."""
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        seen = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~seen, float("-inf"))
    weights = torch.softmax(_float32_at_least(torch, scores), dim=-1)
    return weights.to(v.dtype) @ v


def _residual(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    return net.run(spec.body, x, masks) + net.run(spec.shortcut, x, masks)


def _multiply(torch: Any, net: Any, spec: LayerSpec, x: Any, masks: Masks | None) -> Any:
    return x * net.run(spec.body, x, masks)  # squeeze-and-excitation: body(x) is (n, c, 1, 1), broadcast


TORCH_KINDS: dict[str, TorchKind] = {
    "conv2d": TorchKind(_own_module, _conv, CONV_LEAVES),
    "depthwise_conv2d": TorchKind(_own_module, _depthwise,
                                  {"w": Leaf("weight", _depthwise_layout, _depthwise_layout), "b": Leaf("bias")}),
    "zero_pad": TorchKind(_zero_pad),
    "batch_norm": TorchKind(_own_module, _batch_norm, BATCH_NORM_LEAVES),
    "relu": TorchKind(lambda torch, net, spec, x, masks: torch.nn.functional.relu(x)),
    "relu6": TorchKind(lambda torch, net, spec, x, masks: torch.nn.functional.relu6(x)),
    "swish": TorchKind(lambda torch, net, spec, x, masks: torch.nn.functional.silu(x)),
    "sigmoid": TorchKind(lambda torch, net, spec, x, masks: torch.sigmoid(x)),
    # approximate="none", the default: the exact erf form
    "gelu": TorchKind(lambda torch, net, spec, x, masks: torch.nn.functional.gelu(x)),
    "residual": TorchKind(_residual),
    "multiply": TorchKind(_multiply),
    "max_pool": TorchKind(lambda torch, net, spec, x, masks: torch.nn.functional.max_pool2d(x, spec.window,
                                                                                             spec.stride)),
    "avg_pool": TorchKind(lambda torch, net, spec, x, masks: torch.nn.functional.avg_pool2d(x, spec.window,
                                                                                             spec.stride)),
    "global_avg_pool": TorchKind(_global_avg_pool),
    "flatten": TorchKind(_flatten),
    "dense": TorchKind(_own_module, _dense, DENSE_LEAVES),
    "dropout": TorchKind(_dropout),
    "patch_embed": TorchKind(_patch_embed, _patch, CONV_LEAVES),
    "class_token": TorchKind(_prepend_class_token, _class_token, {"token": Leaf("token")}),
    "position_embedding": TorchKind(_add_positions, _position_table, {"table": Leaf("table")}),
    "token_embedding": TorchKind(_look_up_tokens, _token_table, {"table": Leaf("weight")}),
    "layer_norm": TorchKind(_apply_layer_norm, _layer_norm, NORM_LEAVES),
    "rms_norm": TorchKind(_apply_rms_norm, _rms_norm, {"scale": Leaf("weight")}),
    "multi_head_attention": TorchKind(_apply_attention, _attention, ATTENTION_LEAVES),
    "token_mean_pool": TorchKind(lambda torch, net, spec, x, masks: x.mean(dim=1)),
    "class_token_pool": TorchKind(lambda torch, net, spec, x, masks: x[:, 0]),
}


def torch_kind(kind: str) -> TorchKind:
    """The table entry of ``kind``; :class:`UnsupportedError` naming it when the plugin has none."""
    try:
        return TORCH_KINDS[kind]
    except KeyError:
        raise UnsupportedError(f"the torch plugin cannot build layer kind {kind!r}; it builds: "
                               f"{', '.join(TORCH_KINDS)}") from None


# --- the model ------------------------------------------------------------------------------------------


def spec_net(torch: Any, workload: Workload, *, flatten_channels_last: bool = False, compute_dtype: Any = None,
             attention: str = "fused", kept: tuple[str, ...] = ()) -> Any:
    """An ``nn.Module`` that owns one module per layer with variables and runs the spec graph from the table.

    ``flatten_channels_last`` flattens activations in their channels-last
    memory order (NHWC, a view: the canonical HWC row order of the dense
    weights); otherwise in PyTorch's logical NCHW order, which copies a
    channels-last tensor in the forward and the backward pass.
    ``compute_dtype`` is autocast's dtype under AMP (None otherwise): the
    token lookup's rows are cast to it.  ``attention`` picks
    ``scaled_dot_product_attention`` (``fused``) or :func:`reference_attention`.
    ``kept`` (option ``keep_fp32``) names the layers and kinds that compute in
    float32 under autocast (:func:`~amp_suite_plugins.torch.float32_layers.in_float32`).

    ``forward(x, masks)`` multiplies each ``dropout`` layer's activation by
    its host-drawn mask; ``masks=None`` (evaluation, ``predict``) applies none.
    """
    if attention not in ATTENTION_IMPLEMENTATIONS:
        raise UnsupportedError(f"option attention: {attention!r} is not an implementation; allowed: "
                               f"{', '.join(ATTENTION_IMPLEMENTATIONS)}")
    entries = {item.layer.kind: torch_kind(item.layer.kind) for item in walk(workload.layers, workload.input_shape)}
    kept_names = frozenset(kept)  # looked up at every layer of every eager step: a set, made once
    Module: Any = torch.nn.Module  # torch is imported by the caller: an Any base class to the type checker

    class SpecNet(Module):
        def __init__(self) -> None:
            super().__init__()
            self.specs = workload.layers
            self.flatten_channels_last = flatten_channels_last
            self.compute_dtype = compute_dtype
            self.attention = attention
            named, self.kinds = {}, {}
            for item in walk(workload.layers, workload.input_shape):
                build = entries[item.layer.kind].build
                if build is not None:
                    named[item.layer.name] = build(torch, item.layer, item.input_shape)
                    self.kinds[item.layer.name] = item.layer.kind
            self.named = torch.nn.ModuleDict(named)

        def forward(self, x: Any, masks: Masks | None = None) -> Any:
            return self.run(self.specs, x, masks)

        def run(self, specs: tuple[LayerSpec, ...], x: Any, masks: Masks | None) -> Any:
            for spec in specs:
                if kept_names and keeps(spec, kept_names):
                    x = in_float32(torch, self, entries[spec.kind].apply, spec, x, masks)
                else:
                    x = entries[spec.kind].apply(torch, self, spec, x, masks)
            return x

    return SpecNet()


def _tensor(module: Any, attribute: str) -> Any:
    """The tensor at a dotted path inside ``module`` (None where the layer has no such variable: a dense w/o bias)."""
    return reduce(lambda owner, part: getattr(owner, part, None), attribute.split("."), module)


def load_variables(torch: Any, net: Any, variables: dict[str, np.ndarray], flattened: dict[str, tuple[int, int, int]]
                   ) -> None:
    """Copy canonical variables (``NAME/leaf``) into ``net``'s modules, in torch's layouts."""
    with torch.no_grad():
        for key, value in variables.items():
            layer, leaf = key.rsplit("/", 1)
            place = TORCH_KINDS[net.kinds[layer]].leaves[leaf]
            converted = place.to_torch(value, flattened.get(layer))
            _tensor(net.named[layer], place.attribute).copy_(torch.from_numpy(np.ascontiguousarray(converted)))


def read_variables(net: Any, dtype: Any, flattened: dict[str, tuple[int, int, int]]) -> dict[str, np.ndarray]:
    """Every canonical variable of ``net`` as a numpy copy in ``dtype``, in the canonical layouts."""
    out = {}
    for layer, module in net.named.items():
        for leaf, place in TORCH_KINDS[net.kinds[layer]].leaves.items():
            tensor = _tensor(module, place.attribute)
            if tensor is None:
                continue
            value = tensor.detach().to(dtype).cpu().numpy()
            # a copy: on the CPU the numpy array would share the tensor's memory
            out[f"{layer}/{leaf}"] = np.array(place.from_torch(value, flattened.get(layer)))
    return out


def named_parameters(net: Any) -> dict[str, Any]:
    """Every trainable parameter of ``net`` under its canonical name (``NAME/leaf``)."""
    out = {}
    for layer, module in net.named.items():
        for leaf, place in TORCH_KINDS[net.kinds[layer]].leaves.items():
            tensor = _tensor(module, place.attribute)
            if tensor is not None and tensor.requires_grad:
                out[f"{layer}/{leaf}"] = tensor
    return out
