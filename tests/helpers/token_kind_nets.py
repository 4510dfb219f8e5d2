"""Tiny models that each isolate one token kind: patches in, the kind, a token pool, a dense head.

Importing the module registers every model of :data:`NETS` in
``amp_suite.workloads.architectures.ARCHITECTURES``; a probe loads it as a
plugin module (``ProbeRequest.plugin_modules``), found through the tests'
``PYTHONPATH``.  The input is a 4x4 image of ``CHANNELS`` channels cut into
four 2x2 patches of ``WIDTH`` features.
"""

from __future__ import annotations

from collections.abc import Callable

from amp_suite.records import LayerSpec
from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.layers import (
    class_token,
    class_token_pool,
    dense,
    gelu,
    layer_norm,
    multi_head_attention,
    patch_embed,
    position_embedding,
    residual,
    rms_norm,
    token_mean_pool,
)

WIDTH = 8
Layers = tuple[LayerSpec, ...]


def _isolating(*kind: LayerSpec, pool: LayerSpec | None = None) -> Callable[..., Layers]:
    """patch_embed -> ``kind`` -> a pool (token_mean_pool unless given) -> dense head."""

    def build(num_classes: int, input_size: int = 4) -> Layers:
        return (patch_embed("patch", WIDTH, 2), *kind, pool or token_mean_pool(), dense("head", num_classes))

    return build


NETS: dict[str, Callable[..., Layers]] = {
    "tokens_patch_embed": _isolating(),
    "tokens_class_token": _isolating(class_token("cls")),
    "tokens_position_embedding": _isolating(position_embedding("pos")),
    "tokens_layer_norm": _isolating(layer_norm("norm", epsilon=1e-5)),
    "tokens_rms_norm": _isolating(rms_norm("norm", epsilon=1e-5)),
    "tokens_gelu": _isolating(gelu()),
    "tokens_dense": _isolating(dense("mix", 6)),
    "tokens_residual": _isolating(residual((layer_norm("norm", epsilon=1e-5), dense("mix", WIDTH)))),
    "tokens_attention": _isolating(multi_head_attention("attn", 2)),
    "tokens_causal_attention": _isolating(multi_head_attention("attn", 2, causal=True)),
    # the class token mixes with the patches in attention, then is the one token kept
    "tokens_class_token_pool": _isolating(class_token("cls"), multi_head_attention("attn", 2),
                                          pool=class_token_pool()),
    # one pre-norm block on the patches and a final LayerNorm: a ViT without class token and positions
    "tokens_block": _isolating(residual((layer_norm("ln1", epsilon=1e-5), multi_head_attention("attn", 2))),
                               residual((layer_norm("ln2", epsilon=1e-5), dense("mlp1", 16), gelu(),
                                         dense("mlp2", WIDTH))),
                               layer_norm("final_ln", epsilon=1e-5)),
}
for _name, _build in NETS.items():
    ARCHITECTURES.setdefault(_name, _build)
