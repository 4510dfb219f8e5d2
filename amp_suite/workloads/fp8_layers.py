"""Which layers of a workload the ``fp8`` precision puts in FP8, decided once for every framework.

The recipe (:mod:`amp_suite.numerics.fp8`) covers the matmuls of ``dense``
layers and the q/k/v and output projections of ``multi_head_attention``;
everything else runs as under ``amp_bf16``.  The **head** stays out: the
last ``dense`` layer of the model (``head`` in the transformers, ``logits``
in the CNNs, ``linear`` in the ResNets), whose logits feed the loss, as
torchao's and Transformer Engine's recipes leave the output layer in higher
precision.  A workload with no layer left is no FP8 workload: its ``fp8``
cells are ``unsupported`` with the reason (:func:`require_fp8_layers`).
"""

from __future__ import annotations

from amp_suite.errors import UnsupportedError
from amp_suite.records import LayerSpec, Workload
from amp_suite.workloads.layers import iter_layers

# The layer kinds whose matmuls the recipe applies to.
FP8_KINDS = ("dense", "multi_head_attention")


def head_name(layers: tuple[LayerSpec, ...]) -> str:
    """The model's head: its last ``dense`` layer in definition order ("" when it has none)."""
    dense = [layer.name for layer in iter_layers(layers) if layer.kind == "dense"]
    return dense[-1] if dense else ""


def fp8_layer_names(layers: tuple[LayerSpec, ...]) -> tuple[str, ...]:
    """The names of the layers ``fp8`` computes in FP8: every dense and attention layer except the head."""
    head = head_name(layers)
    return tuple(layer.name for layer in iter_layers(layers) if layer.kind in FP8_KINDS and layer.name != head)


def require_fp8_layers(workload: Workload) -> tuple[str, ...]:
    """:func:`fp8_layer_names` of ``workload``; :class:`UnsupportedError` with the reason when there are none."""
    names = fp8_layer_names(workload.layers)
    if not names:
        head = head_name(workload.layers)
        raise UnsupportedError(
            f"precision 'fp8' needs a dense or multi_head_attention layer besides the head, and workload "
            f"{workload.name!r} has none" + (f" (its only dense layer, {head!r}, is the head, which stays as under "
                                              "amp_bf16)" if head else "") + ": run it with amp_bf16")
    return names
