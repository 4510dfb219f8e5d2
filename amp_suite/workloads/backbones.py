"""The Keras Applications backbones of the Keras Tensor Core article, in the layer vocabulary.

Each model is built as ``keras.applications`` (Keras 3.15, files
``keras/src/applications/{vgg16,mobilenet,resnet,efficientnet}.py``) builds it
with ``include_top=False``, followed by the article's head: global average
pooling, ``Dropout(0.15)`` and a dense layer of ``num_classes`` logits.
Layer names are Keras's own (``block1_conv1``, ``conv_dw_3_bn``,
``conv4_block2_1_conv``, ``block6c_se_reduce``), so each of our layers can
be found in the Keras model by name.

Where Keras pads asymmetrically (a stride-2 ``padding="same"`` convolution,
``ZeroPadding2D(((0, 1), (0, 1)))``, ``imagenet_utils.correct_pad``), an
explicit ``zero_pad`` comes first and the convolution pads nothing; the pads
depend on whether the activation's side is even, so each builder tracks the
side from the workload's ``input_size``.  BatchNorm takes Keras's momentum
0.99 (the project's convention: 0.01, the weight of the new statistic) and
each model's epsilon.  EfficientNet's own ``Rescaling`` and ``Normalization``
layers are no part of the model: the host normalizes the input
(``input_normalization = "imagenet"``, see ``docs/workloads.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from amp_suite.records import LayerSpec
from amp_suite.workloads.layers import (
    batch_norm,
    conv2d,
    dense,
    depthwise_conv2d,
    dropout,
    global_avg_pool,
    max_pool,
    multiply,
    relu,
    relu6,
    residual,
    sigmoid,
    swish,
    zero_pad,
)

Layers = tuple[LayerSpec, ...]

# Keras's BatchNormalization momentum 0.99, in the project's convention.
KERAS_BN_MOMENTUM = 0.01
# Keras's default BatchNormalization epsilon (MobileNet, EfficientNet) and ResNet's.
KERAS_BN_EPSILON = 1e-3
RESNET_BN_EPSILON = 1.001e-5
# The article's head: global average pooling, Dropout(0.15), dense logits.
HEAD_DROPOUT_RATE = 0.15


def keras_bn(name: str, epsilon: float = KERAS_BN_EPSILON) -> LayerSpec:
    """A BatchNormalization as Keras Applications create it (momentum 0.99)."""
    return batch_norm(name, momentum=KERAS_BN_MOMENTUM, epsilon=epsilon)


def same_pads(side: int, kernel: int, stride: int) -> tuple[int, int, int, int]:
    """TensorFlow's ``padding="same"`` for a square input: (top, bottom, left, right).

    ``out = ceil(side / stride)``; the ``(out - 1) * stride + kernel - side``
    pixels needed are split with the extra one at the bottom and right.  For
    an odd kernel and stride 2 this is also Keras's ``correct_pad``.
    """
    total = max((-(-side // stride) - 1) * stride + kernel - side, 0)
    before = total // 2
    return (before, total - before, before, total - before)


def strided_side(side: int, stride: int) -> int:
    """The side after a "same" convolution: ``ceil(side / stride)``."""
    return -(-side // stride)


def article_head(num_classes: int) -> Layers:
    """GlobalAveragePooling2D, Dropout(0.15) and Dense(num_classes): the Keras article's head."""
    return (global_avg_pool(), dropout("head_dropout", HEAD_DROPOUT_RATE), dense("logits", num_classes))


# --- VGG16 (keras/src/applications/vgg16.py) ---------------------------------

# Convolutions of each of VGG16's five blocks and their width.
VGG16_BLOCKS = ((2, 64), (2, 128), (3, 256), (3, 512), (3, 512))


def vgg16(num_classes: int, input_size: int = 224) -> Layers:
    """VGG16: five blocks of 3x3 "same" convolutions with bias and ReLU, each closed by a 2x2 max-pool.

    14,719,818 trainable parameters with 3 channels and 10 classes.
    """
    layers: list[LayerSpec] = []
    for block, (convs, width) in enumerate(VGG16_BLOCKS, start=1):
        for index in range(1, convs + 1):
            layers += [conv2d(f"block{block}_conv{index}", width, 3, padding=1), relu()]
        layers.append(max_pool(2))
    return (*layers, *article_head(num_classes))


# --- MobileNet v1 (keras/src/applications/mobilenet.py) ---------------------

# (pointwise filters, stride) of blocks conv_dw_1 ... conv_dw_13, alpha 1.
MOBILENET_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1),
                    (512, 1), (512, 1), (1024, 2), (1024, 1))


def mobilenet_block(block_id: int, filters: int, stride: int) -> Layers:
    """``_depthwise_conv_block``: 3x3 depthwise (``ZeroPadding2D(((0, 1), (0, 1)))`` before a stride 2),
    BatchNorm, ReLU6, 1x1 pointwise convolution, BatchNorm, ReLU6; no biases."""
    pad = (zero_pad(0, 1, 0, 1),) if stride == 2 else ()
    return (*pad, depthwise_conv2d(f"conv_dw_{block_id}", 3, stride=stride, padding=1 if stride == 1 else 0),
            keras_bn(f"conv_dw_{block_id}_bn"), relu6(),
            conv2d(f"conv_pw_{block_id}", filters, 1, use_bias=False), keras_bn(f"conv_pw_{block_id}_bn"), relu6())


def mobilenet(num_classes: int, input_size: int = 224) -> Layers:
    """MobileNet v1, alpha 1, depth multiplier 1: a 3x3 stride-2 convolution, then 13 depthwise-separable blocks.

    The stem is Keras's stride-2 ``padding="same"`` convolution, padded as
    TensorFlow pads it (one extra pixel at the bottom and right for an even
    side).  3,217,226 trainable parameters with 3 channels and 10 classes.
    """
    layers: list[LayerSpec] = [zero_pad(*same_pads(input_size, 3, 2)), conv2d("conv1", 32, 3, stride=2, use_bias=False),
                               keras_bn("conv1_bn"), relu6()]
    for block_id, (filters, stride) in enumerate(MOBILENET_BLOCKS, start=1):
        layers += mobilenet_block(block_id, filters, stride)
    return (*layers, *article_head(num_classes))


# --- ResNet50 (keras/src/applications/resnet.py) ------------------------------

# (stage name, bottleneck width, blocks, stride of the first block) of ResNet50's four stages.
RESNET50_STAGES = (("conv2", 64, 3, 1), ("conv3", 128, 4, 2), ("conv4", 256, 6, 2), ("conv5", 512, 3, 2))


def resnet_bn(name: str) -> LayerSpec:
    return keras_bn(name, epsilon=RESNET_BN_EPSILON)


def keras_bottleneck(name: str, width: int, stride: int, projection: bool) -> Layers:
    """``residual_block_v1``: 1x1 (with the stride), 3x3, 1x1 to 4x width, every convolution with bias.

    The first block of a stage has a 1x1 convolution + BatchNorm shortcut
    (``NAME_0_conv``), even where the shape does not change; the others add
    the input itself.  ReLU after the add.
    """
    body = (conv2d(f"{name}_1_conv", width, 1, stride=stride), resnet_bn(f"{name}_1_bn"), relu(),
            conv2d(f"{name}_2_conv", width, 3, padding=1), resnet_bn(f"{name}_2_bn"), relu(),
            conv2d(f"{name}_3_conv", 4 * width, 1), resnet_bn(f"{name}_3_bn"))
    shortcut = (conv2d(f"{name}_0_conv", 4 * width, 1, stride=stride), resnet_bn(f"{name}_0_bn")) if projection else ()
    return (residual(body, shortcut), relu())


def imagenet_resnet50(num_classes: int, input_size: int = 224) -> Layers:
    """The ImageNet ResNet-50 of Keras: 7x7 stride-2 stem with bias, 3x3 stride-2 max-pool, Bottleneck [3, 4, 6, 3].

    ``ZeroPadding2D(3)`` before the stem and ``ZeroPadding2D(1)`` before the
    max-pool (its input is after ReLU, so zeros pad as -inf would); BatchNorm
    epsilon 1.001e-5.  23,555,082 trainable parameters with 3 channels and
    10 classes (the CIFAR ``resnet50`` has no bias and a 3x3 stem).
    """
    layers: list[LayerSpec] = [zero_pad(3, 3, 3, 3), conv2d("conv1_conv", 64, 7, stride=2), resnet_bn("conv1_bn"),
                               relu(), zero_pad(1, 1, 1, 1), max_pool(3, 2)]
    for stage, width, blocks, stride in RESNET50_STAGES:
        for index in range(1, blocks + 1):
            layers += keras_bottleneck(f"{stage}_block{index}", width, stride if index == 1 else 1, index == 1)
    return (*layers, *article_head(num_classes))


# --- EfficientNet B0-B5 (keras/src/applications/efficientnet.py) -------------


@dataclass(frozen=True)
class EfficientNetStage:
    """One entry of Keras's ``DEFAULT_BLOCKS_ARGS`` (every stage has id_skip and SE ratio 0.25)."""

    kernel_size: int
    repeats: int
    filters_in: int
    filters_out: int
    expand_ratio: int
    stride: int


EFFICIENTNET_STAGES = (
    EfficientNetStage(3, 1, 32, 16, 1, 1),
    EfficientNetStage(3, 2, 16, 24, 6, 2),
    EfficientNetStage(5, 2, 24, 40, 6, 2),
    EfficientNetStage(3, 3, 40, 80, 6, 2),
    EfficientNetStage(5, 3, 80, 112, 6, 1),
    EfficientNetStage(5, 4, 112, 192, 6, 2),
    EfficientNetStage(3, 1, 192, 320, 6, 1),
)
SE_RATIO = 0.25
DROP_CONNECT_RATE = 0.2
DEPTH_DIVISOR = 8


@dataclass(frozen=True)
class EfficientNetScaling:
    """Compound scaling of one EfficientNet: width and depth coefficients, default resolution."""

    width: float
    depth: float
    resolution: int

    def filters(self, filters: int) -> int:
        """Keras's ``round_filters``: scaled, rounded to a multiple of 8, never more than 10% down."""
        scaled = filters * self.width
        rounded = max(DEPTH_DIVISOR, int(scaled + DEPTH_DIVISOR / 2) // DEPTH_DIVISOR * DEPTH_DIVISOR)
        if rounded < 0.9 * scaled:
            rounded += DEPTH_DIVISOR
        return int(rounded)

    def repeats(self, repeats: int) -> int:
        """Keras's ``round_repeats``: ``ceil(depth * repeats)``."""
        return int(math.ceil(self.depth * repeats))


EFFICIENTNET_SCALING = {
    "b0": EfficientNetScaling(1.0, 1.0, 224),
    "b1": EfficientNetScaling(1.0, 1.1, 240),
    "b2": EfficientNetScaling(1.1, 1.2, 260),
    "b3": EfficientNetScaling(1.2, 1.4, 300),
    "b4": EfficientNetScaling(1.4, 1.8, 380),
    "b5": EfficientNetScaling(1.6, 2.2, 456),
}


@dataclass(frozen=True)
class MBConv:
    """One inverted-residual block of EfficientNet (Keras's ``block``) and the side of its input."""

    name: str
    filters_in: int
    filters_out: int
    kernel_size: int
    stride: int
    expand_ratio: int
    drop_rate: float
    side: int


def squeeze_excite(prefix: str, filters_in: int, filters: int) -> LayerSpec:
    """Global average pool, 1x1 reduce to ``filters_in / 4`` + swish, 1x1 expand + sigmoid, multiplied in."""
    reduced = max(1, int(filters_in * SE_RATIO))
    return multiply((global_avg_pool(keepdims=True), conv2d(f"{prefix}se_reduce", reduced, 1), swish(),
                     conv2d(f"{prefix}se_expand", filters, 1), sigmoid()))


def mbconv(block: MBConv) -> Layers:
    """Expand 1x1 (unless the ratio is 1), depthwise (``correct_pad`` before a stride 2), SE, project 1x1.

    With a stride of 1 and as many filters out as in, the block adds its
    input, after the stochastic depth of ``drop_rate`` (a per-sample dropout,
    Keras's ``Dropout(noise_shape=(None, 1, 1, 1))``) where that rate is not 0.
    """
    name, k = block.name, block.kernel_size
    filters = block.filters_in * block.expand_ratio
    layers: list[LayerSpec] = []
    if block.expand_ratio != 1:
        layers += [conv2d(f"{name}expand_conv", filters, 1, use_bias=False), keras_bn(f"{name}expand_bn"), swish()]
    if block.stride == 2:
        layers += [zero_pad(*same_pads(block.side, k, 2)), depthwise_conv2d(f"{name}dwconv", k, stride=2)]
    else:
        layers.append(depthwise_conv2d(f"{name}dwconv", k, stride=block.stride, padding=k // 2))
    layers += [keras_bn(f"{name}bn"), swish(), squeeze_excite(name, block.filters_in, filters),
               conv2d(f"{name}project_conv", block.filters_out, 1, use_bias=False), keras_bn(f"{name}project_bn")]
    if block.stride != 1 or block.filters_in != block.filters_out:
        return tuple(layers)
    if block.drop_rate > 0:
        layers.append(dropout(f"{name}drop", block.drop_rate, per_sample=True))
    return (residual(tuple(layers)),)


def efficientnet_blocks(scaling: EfficientNetScaling, side: int) -> list[MBConv]:
    """Every block of the scaled network, named ``block{stage}{a, b, ...}_`` as Keras names them.

    Block ``b`` of ``n`` drops its residual branch at ``0.2 * b / n``.
    """
    total = float(sum(scaling.repeats(stage.repeats) for stage in EFFICIENTNET_STAGES))
    blocks: list[MBConv] = []
    for number, stage in enumerate(EFFICIENTNET_STAGES, start=1):
        filters_in, filters_out = scaling.filters(stage.filters_in), scaling.filters(stage.filters_out)
        for index in range(scaling.repeats(stage.repeats)):
            stride = stage.stride if index == 0 else 1
            blocks.append(MBConv(f"block{number}{chr(index + 97)}_", filters_in if index == 0 else filters_out,
                                 filters_out, stage.kernel_size, stride, stage.expand_ratio,
                                 DROP_CONNECT_RATE * len(blocks) / total, side))
            side = strided_side(side, stride)
    return blocks


def efficientnet(variant: str, num_classes: int, input_size: int | None = None) -> Layers:
    """EfficientNet-``variant``: stem 3x3 stride 2, the scaled MBConv blocks, 1x1 top convolution, head.

    Swish activations, BatchNorm epsilon 1e-3, no biases but the SE
    convolutions'.  ``input_size`` defaults to the variant's resolution.
    """
    scaling = EFFICIENTNET_SCALING[variant]
    side = input_size or scaling.resolution
    return efficientnet_of_blocks(scaling, efficientnet_blocks(scaling, strided_side(side, 2)), num_classes, side)


def efficientnet_of_blocks(scaling: EfficientNetScaling, blocks: list[MBConv], num_classes: int,
                           input_size: int) -> Layers:
    """The stem, ``blocks``, the top convolution and the head: the whole network given all of a variant's
    blocks, a cut of it given some."""
    layers: list[LayerSpec] = [zero_pad(*same_pads(input_size, 3, 2)),
                               conv2d("stem_conv", scaling.filters(32), 3, stride=2, use_bias=False),
                               keras_bn("stem_bn"), swish()]
    for block in blocks:
        layers += mbconv(block)
    layers += [conv2d("top_conv", scaling.filters(1280), 1, use_bias=False), keras_bn("top_bn"), swish()]
    return (*layers, *article_head(num_classes))


def efficientnet_b0(num_classes: int, input_size: int = 224) -> Layers:
    """EfficientNet-B0 (width 1.0, depth 1.0, 224²): 4,020,358 trainable parameters with 10 classes."""
    return efficientnet("b0", num_classes, input_size)


def efficientnet_b1(num_classes: int, input_size: int = 240) -> Layers:
    """EfficientNet-B1 (width 1.0, depth 1.1, 240²): 6,525,994 trainable parameters with 10 classes."""
    return efficientnet("b1", num_classes, input_size)


def efficientnet_b2(num_classes: int, input_size: int = 260) -> Layers:
    """EfficientNet-B2 (width 1.1, depth 1.2, 260²): 7,715,084 trainable parameters with 10 classes."""
    return efficientnet("b2", num_classes, input_size)


def efficientnet_b3(num_classes: int, input_size: int = 300) -> Layers:
    """EfficientNet-B3 (width 1.2, depth 1.4, 300²): 10,711,602 trainable parameters with 10 classes."""
    return efficientnet("b3", num_classes, input_size)


def efficientnet_b4(num_classes: int, input_size: int = 380) -> Layers:
    """EfficientNet-B4 (width 1.4, depth 1.8, 380²): 17,566,546 trainable parameters with 10 classes."""
    return efficientnet("b4", num_classes, input_size)


def efficientnet_b5(num_classes: int, input_size: int = 456) -> Layers:
    """EfficientNet-B5 (width 1.6, depth 2.2, 456²): 28,361,274 trainable parameters with 10 classes."""
    return efficientnet("b5", num_classes, input_size)
