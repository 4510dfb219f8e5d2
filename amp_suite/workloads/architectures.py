"""The architectures amp-suite measures, written in the layer vocabulary.

Each entry of :data:`ARCHITECTURES` takes the number of classes and the
workload's input size and returns the model's layers; input channels come
from the workload.  Most architectures ignore the input size; the Keras
Applications backbones (:mod:`amp_suite.workloads.backbones`) need it, because
TensorFlow's stride-2 "same" padding and Keras's ``correct_pad`` depend on
whether the activation's side is even or odd.  A new architecture made of
known layer kinds is one entry here and needs no plugin change.  Blocks (a
ResNet BasicBlock or Bottleneck with its projection shortcut) are built here
from the vocabulary too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from amp_suite.records import LayerSpec
from amp_suite.workloads.backbones import (
    efficientnet_b0,
    efficientnet_b1,
    efficientnet_b2,
    efficientnet_b3,
    efficientnet_b4,
    efficientnet_b5,
    imagenet_resnet50,
    mobilenet,
    vgg16,
)
from amp_suite.workloads.layers import (
    avg_pool,
    batch_norm,
    conv2d,
    dense,
    flatten,
    global_avg_pool,
    max_pool,
    relu,
    residual,
)

Layers = tuple[LayerSpec, ...]


class Architecture(Protocol):
    """An entry of :data:`ARCHITECTURES`: the model's layers for a number of classes and an input side."""

    def __call__(self, num_classes: int, input_size: int) -> Layers: ...


def mnist_cnn(num_classes: int, input_size: int = 28) -> Layers:
    """The CNN of the dm-haiku/jmp mixed-precision MNIST example.

    conv 3x3x32 (same) -> ReLU -> avg-pool 2 -> conv 3x3x64 (same) -> ReLU ->
    avg-pool 2 -> flatten -> dense 256 -> ReLU -> dense ``num_classes``.
    """
    return (
        conv2d("conv1", 32, 3, padding=1), relu(), avg_pool(2),
        conv2d("conv2", 64, 3, padding=1), relu(), avg_pool(2),
        flatten(), dense("dense1", 256), relu(), dense("logits", num_classes),
    )


def deep_cnn(num_classes: int, input_size: int = 28) -> Layers:
    """``create_cnn`` of the multi-GPU Keras article: five 3x3x128 VALID convolutions.

    conv, ReLU, conv, ReLU, max-pool 2, then three conv + ReLU, flatten,
    dense 128 + ReLU, dense ``num_classes`` (1,182,858 parameters on MNIST).
    """
    convs = [conv2d(f"conv{i}", 128, 3) for i in range(1, 6)]
    return (
        convs[0], relu(), convs[1], relu(), max_pool(2),
        convs[2], relu(), convs[3], relu(), convs[4], relu(),
        flatten(), dense("dense1", 128), relu(), dense("logits", num_classes),
    )


def _conv_bn(name: str, bn: str, features: int, kernel: int, stride: int = 1) -> Layers:
    """A bias-free convolution followed by its BatchNorm (the ResNet unit)."""
    return (conv2d(name, features, kernel, stride=stride, padding=kernel // 2, use_bias=False), batch_norm(bn))


def _projection(prefix: str, in_width: int, out_width: int, stride: int) -> Layers:
    """The 1x1 conv + BatchNorm shortcut where the shape changes; identity otherwise."""
    if stride == 1 and in_width == out_width:
        return ()
    return _conv_bn(f"{prefix}_shortcut_conv", f"{prefix}_shortcut_bn", out_width, 1, stride)


def basic_block(prefix: str, in_width: int, width: int, stride: int) -> tuple[Layers, int]:
    """Two 3x3 convolutions with BatchNorm and a residual add, then ReLU (expansion 1)."""
    body = (*_conv_bn(f"{prefix}_conv1", f"{prefix}_bn1", width, 3, stride), relu(),
            *_conv_bn(f"{prefix}_conv2", f"{prefix}_bn2", width, 3))
    return (residual(body, _projection(prefix, in_width, width, stride)), relu()), width


def bottleneck_block(prefix: str, in_width: int, width: int, stride: int) -> tuple[Layers, int]:
    """1x1 reduce, 3x3 (with the stride), 1x1 expand to 4x width, residual add, ReLU."""
    out_width = 4 * width
    body = (*_conv_bn(f"{prefix}_conv1", f"{prefix}_bn1", width, 1), relu(),
            *_conv_bn(f"{prefix}_conv2", f"{prefix}_bn2", width, 3, stride), relu(),
            *_conv_bn(f"{prefix}_conv3", f"{prefix}_bn3", out_width, 1))
    return (residual(body, _projection(prefix, in_width, out_width, stride)), relu()), out_width


Block = Callable[[str, int, int, int], tuple[Layers, int]]


def cifar_resnet(block: Block, blocks: tuple[int, ...], widths: tuple[int, ...], strides: tuple[int, ...],
                 num_classes: int) -> Layers:
    """A CIFAR-style ResNet: 3x3 stride-1 stem with BatchNorm, no max-pool, stages, global pool, dense."""
    layers: list[LayerSpec] = [*_conv_bn("conv1", "bn1", widths[0], 3), relu()]
    in_width = widths[0]
    for stage, (count, width, stride) in enumerate(zip(blocks, widths, strides, strict=True), start=1):
        for index in range(count):
            unit, in_width = block(f"layer{stage}_{index}", in_width, width, stride if index == 0 else 1)
            layers += unit
    return (*layers, global_avg_pool(), dense("linear", num_classes))


def resnet8(num_classes: int, input_size: int = 32) -> Layers:
    """He et al.'s smallest CIFAR ResNet (n = 1): widths 16/32/64, one BasicBlock per stage."""
    return cifar_resnet(basic_block, (1, 1, 1), (16, 32, 64), (1, 2, 2), num_classes)


def resnet18(num_classes: int, input_size: int = 32) -> Layers:
    """The CIFAR ResNet-18 of the PyTorch CIFAR-10 repository: BasicBlock [2, 2, 2, 2]."""
    return cifar_resnet(basic_block, (2, 2, 2, 2), (64, 128, 256, 512), (1, 2, 2, 2), num_classes)


def resnet50(num_classes: int, input_size: int = 32) -> Layers:
    """The CIFAR ResNet-50 of the same repository: Bottleneck (expansion 4) [3, 4, 6, 3]."""
    return cifar_resnet(bottleneck_block, (3, 4, 6, 3), (64, 128, 256, 512), (1, 2, 2, 2), num_classes)


# Architecture name -> layers for a number of classes and an input size
# (the workload calls ``ARCHITECTURES[model](num_classes, input_size=input_size)``).
ARCHITECTURES: dict[str, Architecture] = {
    "mnist_cnn": mnist_cnn,
    "deep_cnn": deep_cnn,
    "resnet8": resnet8,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "vgg16": vgg16,
    "mobilenet": mobilenet,
    "imagenet_resnet50": imagenet_resnet50,
    "efficientnet_b0": efficientnet_b0,
    "efficientnet_b1": efficientnet_b1,
    "efficientnet_b2": efficientnet_b2,
    "efficientnet_b3": efficientnet_b3,
    "efficientnet_b4": efficientnet_b4,
    "efficientnet_b5": efficientnet_b5,
}
