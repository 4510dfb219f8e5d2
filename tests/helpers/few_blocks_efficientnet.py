"""EfficientNet-B0 cut to three of its blocks: every layer kind and every nesting of the whole network, in seconds.

Importing the module registers the architecture ``few_blocks_efficientnet``
in ``amp_suite.workloads.architectures.ARCHITECTURES``; a probe loads it as a
plugin module (``ProbeRequest.plugin_modules``: a module without hooks is a
harmless plugin), found through the tests' ``PYTHONPATH``.

It is made by the same builder as ``efficientnet_b0`` (``efficientnet_of_blocks``): its stem (``zero_pad``,
stride-2 convolution, BatchNorm, swish), block1a (no expansion), block2a
(expansion, ``zero_pad`` before a stride-2 depthwise convolution, no skip) and
block2b (a residual whose body ends in stochastic depth), each with its
squeeze-and-excitation ``multiply`` and ``sigmoid``, then the top convolution
and the article's head (global pool, dropout, dense).  The dtype checks of
the new layer kinds need every kind and nesting, not the other 13 blocks,
whose 4 million parameters take Keras and XLA about a minute to compile.
"""

from __future__ import annotations

from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.backbones import (
    EFFICIENTNET_SCALING,
    efficientnet_blocks,
    efficientnet_of_blocks,
    strided_side,
)
from amp_suite.workloads.layers import LayerSpec

NAME = "few_blocks_efficientnet"
# block1a, block2a and block2b of EfficientNet-B0, named and sized as there.
BLOCKS = ("block1a_", "block2a_", "block2b_")


def few_blocks_efficientnet(num_classes: int, input_size: int = 32) -> tuple[LayerSpec, ...]:
    scaling = EFFICIENTNET_SCALING["b0"]
    blocks = [block for block in efficientnet_blocks(scaling, strided_side(input_size, 2)) if block.name in BLOCKS]
    return efficientnet_of_blocks(scaling, blocks, num_classes, input_size)


ARCHITECTURES.setdefault(NAME, few_blocks_efficientnet)
