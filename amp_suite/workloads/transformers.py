"""The transformer architectures, written in the layer vocabulary: a ViT and a character GPT.

Both are pre-norm: every block is ``x + attention(layer_norm(x))`` then
``x + mlp(layer_norm(x))``, the MLP being dense ``mlp`` -> exact GELU ->
dense ``width``, and a final LayerNorm precedes the head.  Layer names are
the same in every framework (``block1_attn``, ``block1_mlp1``, ...), so the
numerics report and the canonical variables name the same layer everywhere.
An entry of :data:`TRANSFORMERS` takes the workload's
:class:`~amp_suite.records.TransformerShape`, its number of classes and its
input channels.
"""

from __future__ import annotations

from collections.abc import Callable

from amp_suite.records import LayerSpec, TransformerShape
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
    token_embedding,
)

Layers = tuple[LayerSpec, ...]
# LayerNorm's epsilon in both models: PyTorch's nn.LayerNorm default, declared (Keras's default is 1e-3).
LAYER_NORM_EPSILON = 1e-5


def pre_norm_block(index: int, shape: TransformerShape, *, causal: bool) -> Layers:
    """One pre-norm transformer block: attention and MLP sub-blocks, each added to its input."""
    prefix = f"block{index}"
    attention = (layer_norm(f"{prefix}_ln1", epsilon=LAYER_NORM_EPSILON),
                 multi_head_attention(f"{prefix}_attn", shape.heads, causal=causal))
    mlp = (layer_norm(f"{prefix}_ln2", epsilon=LAYER_NORM_EPSILON), dense(f"{prefix}_mlp1", shape.mlp), gelu(),
           dense(f"{prefix}_mlp2", shape.width))
    return (residual(attention), residual(mlp))


def vit(shape: TransformerShape, num_classes: int, channels: int) -> Layers:
    """A ViT classifier: patches, a class token, learned positions, blocks, LayerNorm, a dense head on the class token."""
    blocks = [layer for i in range(1, shape.depth + 1) for layer in pre_norm_block(i, shape, causal=False)]
    return (patch_embed("patch", shape.width, shape.patch), class_token("cls"), position_embedding("pos"),
            *blocks, layer_norm("final_ln", epsilon=LAYER_NORM_EPSILON), class_token_pool(),
            dense("head", num_classes))


def gpt(shape: TransformerShape, num_classes: int, channels: int) -> Layers:
    """A decoder-only language model: token embedding, learned positions, causal blocks, LayerNorm, an untied head.

    The head gives one logit per vocabulary entry at every position
    (``num_classes`` is not used: the classes are the vocabulary).
    """
    blocks = [layer for i in range(1, shape.depth + 1) for layer in pre_norm_block(i, shape, causal=True)]
    return (token_embedding("embed", shape.vocab_size, shape.width), position_embedding("pos"), *blocks,
            layer_norm("final_ln", epsilon=LAYER_NORM_EPSILON), dense("head", shape.vocab_size))


TRANSFORMERS: dict[str, Callable[[TransformerShape, int, int], Layers]] = {"vit": vit, "gpt": gpt}
