"""A tiny network made of every layer kind the ImageNet backbones added, for the tests of this folder.

Importing the module registers the architecture ``flax_new_kinds`` in
``amp_suite.workloads.architectures.ARCHITECTURES``.  A probe loads it like a plugin
(``ProbeRequest.plugin_modules``: a module without hooks is a harmless
plugin), so the probe's process knows the architecture before it builds the
workload; the tests put this folder on ``PYTHONPATH`` for that process.

At 12x12x3: zero_pad (asymmetric, TensorFlow's "same") -> stride-2 conv ->
BatchNorm -> relu6 -> depthwise conv -> BatchNorm -> swish ->
squeeze-and-excitation (global_avg_pool keepdims, 1x1 convs, swish, sigmoid,
multiply) -> 1x1 projection -> a residual whose body is a biased depthwise
conv, relu6 and per-sample dropout (stochastic depth) -> max_pool -> dropout
-> global_avg_pool -> dense: about 900 parameters, in seconds on a CPU.
"""

from __future__ import annotations

from typing import Any

from amp_suite.workloads import layers
from amp_suite.workloads.architectures import ARCHITECTURES

NAME = "flax_new_kinds"
# The [workloads.NAME] table of the probes: batch 8, Adam with a large epsilon, as tests/test_new_layer_kinds.py
# of amp-suite chooses for the same layers (an update is a smooth function of its gradient, so a gradient of
# round-off size cannot flip a whole step).
TABLE: dict[str, Any] = {"model": NAME, "input_size": 12, "channels": 3, "num_classes": 10, "batch_size": 8,
                         "optimizer": "adam", "learning_rate": 1e-3, "epsilon": 1e-3}
# The kinds amp_suite.workloads.layers gained with the ImageNet backbones; the network holds every one.
NEW_KINDS = ("depthwise_conv2d", "zero_pad", "relu6", "swish", "sigmoid", "multiply", "dropout")


def new_kinds_net(num_classes: int, input_size: int = 12) -> tuple[Any, ...]:
    squeeze_excite = layers.multiply((
        layers.global_avg_pool(keepdims=True), layers.conv2d("se_reduce", 4, 1), layers.swish(),
        layers.conv2d("se_expand", 8, 1), layers.sigmoid()))
    stochastic_depth = layers.residual((
        layers.depthwise_conv2d("dw2", 3, padding=1, use_bias=True), layers.batch_norm("dw2_bn"), layers.relu6(),
        layers.dropout("drop_path", 0.25, per_sample=True)))
    return (
        layers.zero_pad(0, 1, 0, 1), layers.conv2d("stem", 8, 3, stride=2, use_bias=False),
        layers.batch_norm("stem_bn"), layers.relu6(),
        layers.depthwise_conv2d("dw", 3, padding=1), layers.batch_norm("dw_bn"), layers.swish(),
        squeeze_excite,
        layers.conv2d("project", 8, 1, use_bias=False), layers.batch_norm("project_bn"),
        stochastic_depth,
        layers.max_pool(2), layers.dropout("drop", 0.2),
        layers.global_avg_pool(), layers.dense("head", num_classes),
    )


ARCHITECTURES.setdefault(NAME, new_kinds_net)
