"""MobileNet and EfficientNet-B0 whole, every layer and block, at about a quarter of their width, for the tests.

Importing the module registers ``narrow_mobilenet`` and
``narrow_efficientnet_b0`` in ``amp_suite.workloads.architectures.ARCHITECTURES``;
a probe loads it as a plugin module (``ProbeRequest.plugin_modules``: a module
without hooks is a harmless plugin), found through the tests' ``PYTHONPATH``.

Both are built by the library's own builders (``mobilenet_block``,
``efficientnet_blocks``, ``efficientnet_of_blocks``) with the same layer names,
kinds, nesting, strides, paddings, dropout and stochastic-depth rates as the
full networks; only the filter counts are smaller (MobileNet's alpha 0.25,
EfficientNet's width coefficient 0.3, rounded to multiples of 8 as Keras
rounds them).  The cross-framework comparisons check every layer of the
whole network at a size whose step compiles and runs in seconds; the
full-width comparisons are ``benchmarks/full_size_comparisons.py``, run
before a release.
"""

from __future__ import annotations

from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.backbones import (
    EFFICIENTNET_SCALING,
    MOBILENET_BLOCKS,
    EfficientNetScaling,
    article_head,
    efficientnet_blocks,
    efficientnet_of_blocks,
    keras_bn,
    mobilenet_block,
    same_pads,
    strided_side,
)
from amp_suite.workloads.layers import LayerSpec, conv2d, relu6, zero_pad

# The fraction of every layer's filters the narrow networks keep.  MobileNet: Keras's smallest alpha.  EfficientNet:
# the narrowest width coefficient that keeps every block's shape: at 0.25 block1a has 8 filters in and out, so it
# would gain an identity skip the full network does not have.
MOBILENET_ALPHA = 0.25
EFFICIENTNET_WIDTH = 0.3
# The narrow architecture of each full one.
NARROW = {"mobilenet": "narrow_mobilenet", "efficientnet_b0": "narrow_efficientnet_b0"}


def _narrow(filters: int) -> int:
    """MobileNet's ``int(filters * alpha)``."""
    return int(filters * MOBILENET_ALPHA)


def narrow_mobilenet(num_classes: int, input_size: int = 32) -> tuple[LayerSpec, ...]:
    """MobileNet v1 at alpha 0.25: the stem and all 13 depthwise-separable blocks of ``backbones.mobilenet``."""
    layers: list[LayerSpec] = [zero_pad(*same_pads(input_size, 3, 2)),
                               conv2d("conv1", _narrow(32), 3, stride=2, use_bias=False), keras_bn("conv1_bn"),
                               relu6()]
    for block_id, (filters, stride) in enumerate(MOBILENET_BLOCKS, start=1):
        layers += mobilenet_block(block_id, _narrow(filters), stride)
    return (*layers, *article_head(num_classes))


def narrow_efficientnet_b0(num_classes: int, input_size: int = 32) -> tuple[LayerSpec, ...]:
    """EfficientNet-B0's 16 blocks (depth 1.0) at width 0.3: ``backbones.efficientnet("b0")`` but narrower."""
    full = EFFICIENTNET_SCALING["b0"]
    scaling = EfficientNetScaling(EFFICIENTNET_WIDTH, full.depth, full.resolution)
    blocks = efficientnet_blocks(scaling, strided_side(input_size, 2))
    return efficientnet_of_blocks(scaling, blocks, num_classes, input_size)


ARCHITECTURES.setdefault("narrow_mobilenet", narrow_mobilenet)
ARCHITECTURES.setdefault("narrow_efficientnet_b0", narrow_efficientnet_b0)
