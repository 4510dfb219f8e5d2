"""The Keras Applications backbones against keras.applications, the new layer kinds, and the host's dropout masks.

Each backbone is compared layer by layer with the Keras model the Keras Tensor
Core article trained (``include_top=False``, then GlobalAveragePooling2D,
Dropout(0.15), Dense(10)), built with ``weights=None`` at the workload's input
size: only graph construction, no arithmetic.  Our layers carry Keras's layer
names, so every Keras layer that owns trainable weights is found by name.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from amp_suite.datasets import input_pipeline, load_dataset
from amp_suite.errors import UsageError
from amp_suite.records import Batch, workload_from_dict
from amp_suite.workloads import layers
from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.backbones import same_pads
from amp_suite.workloads.workload import init_variables, workload_from_config

CATALOG = Path(__file__).parent.parent / "amp_suite" / "catalog" / "backbones.toml"
slow = pytest.mark.slow  # the largest Keras graphs (a few seconds each): deselect with -m "not slow"

# architecture -> (keras.applications constructor, workload input size, trainable parameters with 10 classes)
BACKBONES = {
    "vgg16": ("VGG16", 224, 14_719_818),
    "mobilenet": ("MobileNet", 160, 3_217_226),
    "imagenet_resnet50": ("ResNet50", 224, 23_555_082),
    "efficientnet_b0": ("EfficientNetB0", 224, 4_020_358),
    "efficientnet_b1": ("EfficientNetB1", 240, 6_525_994),
    "efficientnet_b2": ("EfficientNetB2", 260, 7_715_084),
    "efficientnet_b3": ("EfficientNetB3", 300, 10_711_602),
    "efficientnet_b4": ("EfficientNetB4", 380, 17_566_546),
    "efficientnet_b5": ("EfficientNetB5", 456, 28_361_274),
}
BIG = {"efficientnet_b3", "efficientnet_b4", "efficientnet_b5"}
# Our zero_pads that stand for the padding inside a Keras stride-2 "same" convolution (no layer of its own).
SAME_CONV_PADS = {"mobilenet": 1}


@dataclasses.dataclass(frozen=True)
class KerasLayer:
    """What the comparison needs of one Keras layer."""

    name: str
    kind: str
    output_shape: tuple[int, ...]
    trainable: int
    config: dict


def keras_layers(constructor: str, size: int) -> list[KerasLayer]:
    """The article's model: the Keras backbone with include_top=False, GAP, Dropout(0.15), Dense(10)."""
    keras = pytest.importorskip("keras")
    backbone = getattr(keras.applications, constructor)(include_top=False, weights=None, input_shape=(size, size, 3))
    x = keras.layers.GlobalAveragePooling2D(name="head_pool")(backbone.output)
    x = keras.layers.Dropout(0.15, name="head_dropout")(x)
    x = keras.layers.Dense(10, name="logits")(x)
    model = keras.Model(backbone.input, x)
    out = [KerasLayer(layer.name, type(layer).__name__, tuple(layer.output.shape[1:]),
                      sum(math.prod(w.shape) for w in layer.trainable_weights), layer.get_config())
           for layer in model.layers]
    keras.backend.clear_session()
    return out


def ours(arch: str, size: int) -> tuple[dict[str, layers.LayerShapes], dict[str, int], list]:
    """Our named layers with their shapes, trainable parameters per layer, and every layer walked."""
    model = ARCHITECTURES[arch](10, input_size=size)
    walked = layers.walk(model, (size, size, 3))
    named = {item.layer.name: item for item in walked if item.layer.name}
    counts: dict[str, int] = {}
    for spec in layers.variables(model, (size, size, 3)):
        if spec.trainable:
            layer = spec.name.split("/")[0]
            counts[layer] = counts.get(layer, 0) + math.prod(spec.shape)
    return named, counts, walked


@pytest.mark.parametrize("arch", [pytest.param(a, marks=slow) if a in BIG else a for a in BACKBONES])
def test_backbone_matches_keras_applications_layer_by_layer(arch):
    constructor, size, total = BACKBONES[arch]
    theirs = keras_layers(constructor, size)
    named, counts, walked = ours(arch, size)

    # every Keras layer that owns trainable weights is ours, with its output shape and parameter count
    weighted = [layer for layer in theirs if layer.trainable]
    assert [layer.name for layer in weighted if layer.name not in named] == []
    assert sorted(layer.name for layer in weighted) == sorted(counts)
    for layer in weighted:
        assert named[layer.name].output_shape == layer.output_shape, layer.name
        assert counts[layer.name] == layer.trainable, layer.name
        if layer.kind == "BatchNormalization":
            assert named[layer.name].layer.momentum == pytest.approx(1 - layer.config["momentum"]), layer.name
            assert named[layer.name].layer.epsilon == layer.config["epsilon"], layer.name
    assert sum(layer.trainable for layer in theirs) == sum(counts.values()) == total

    # explicit paddings, in order: Keras's ZeroPadding2D ((top, bottom), (left, right)) and our zero_pad
    keras_pads = [tuple(p for side in layer.config["padding"] for p in side)
                  for layer in theirs if layer.kind == "ZeroPadding2D"]
    our_pads = [item.layer.pads for item in walked if item.layer.kind == "zero_pad"]
    assert our_pads[SAME_CONV_PADS.get(arch, 0):] == keras_pads

    # dropout and stochastic depth: the same layers, rates and noise shapes
    keras_drops = {layer.name: (layer.config["rate"], layer.config.get("noise_shape") is not None)
                   for layer in theirs if layer.kind == "Dropout"}
    our_drops = {layer.name: (layer.rate, layer.per_sample) for layer in layers.dropout_layers(tuple(
        item.layer for item in walked))}
    assert our_drops.keys() == keras_drops.keys()
    for name, (rate, per_sample) in keras_drops.items():
        assert our_drops[name][0] == pytest.approx(rate) and our_drops[name][1] == per_sample, name
    assert walked[-1].output_shape == theirs[-1].output_shape == (10,)


def test_same_pads_are_tensorflows_same_padding_and_keras_correct_pad():
    keras = pytest.importorskip("keras")
    from keras.src.applications.imagenet_utils import correct_pad

    for side in range(7, 24):
        for kernel in (3, 5):
            (top, bottom), (left, right) = correct_pad(keras.Input((side, side, 8)), kernel)
            assert same_pads(side, kernel, 2) == (top, bottom, left, right), (side, kernel)
            # the output side of a "same" convolution: ceil(side / stride)
            assert (side + top + bottom - kernel) // 2 + 1 == -(-side // 2)
    assert same_pads(160, 3, 2) == (0, 1, 0, 1) and same_pads(161, 3, 2) == (1, 1, 1, 1)
    assert same_pads(14, 3, 1) == (1, 1, 1, 1)


def test_asymmetric_padding_gives_keras_shapes_where_symmetric_would_not():
    # MobileNet's ZeroPadding2D(((0, 1), (0, 1))) before each stride-2 depthwise conv: on an odd side
    # (81 after the stem at 161) it gives 40, where one pixel on every side would give 41.
    asymmetric = (layers.zero_pad(0, 1, 0, 1), layers.depthwise_conv2d("dw", 3, stride=2))
    symmetric = (layers.depthwise_conv2d("dw", 3, stride=2, padding=1),)
    assert layers.walk(asymmetric, (81, 81, 8))[-1].output_shape == (40, 40, 8)
    assert layers.walk(symmetric, (81, 81, 8))[-1].output_shape == (41, 41, 8)
    # and the whole MobileNet at 161x161 has Keras's shapes, layer by layer
    theirs = {layer.name: layer.output_shape for layer in keras_layers("MobileNet", 161) if layer.trainable}
    named, _, _ = ours("mobilenet", 161)
    assert theirs["conv_dw_2"] == (40, 40, 64)
    assert {name: named[name].output_shape for name in theirs} == theirs


# --- the new kinds in the vocabulary ------------------------------------------------


def test_new_kinds_shapes_variables_and_flops():
    se = layers.multiply((layers.global_avg_pool(keepdims=True), layers.conv2d("se_reduce", 2, 1), layers.swish(),
                          layers.conv2d("se_expand", 8, 1), layers.sigmoid()))
    model = (layers.zero_pad(0, 1, 2, 3), layers.conv2d("c", 8, 3, stride=2, use_bias=False), layers.relu6(),
             layers.residual((layers.depthwise_conv2d("dw", 3, padding=1, use_bias=True), se,
                              layers.dropout("drop", 0.25, per_sample=True))),
             layers.global_avg_pool(), layers.dropout("head", 0.5), layers.dense("out", 3))
    walked = layers.walk(model, (9, 9, 1))
    shapes = {item.layer.kind + item.layer.name: item.output_shape for item in walked}
    assert shapes["zero_pad"] == (10, 14, 1) and shapes["conv2dc"] == (4, 6, 8)
    assert shapes["depthwise_conv2ddw"] == (4, 6, 8) and shapes["global_avg_pool"] == (8,)
    assert shapes["conv2dse_reduce"] == (1, 1, 2) and shapes["multiply"] == (4, 6, 8)
    specs = {v.name: v for v in layers.variables(model, (9, 9, 1))}
    assert specs["dw/w"].shape == (3, 3, 8, 1) and specs["dw/b"].shape == (8,) and specs["dw/w"].fan_in == 9
    assert specs["se_expand/w"].shape == (1, 1, 2, 8) and "drop/w" not in specs
    kinds = [layer.kind for layer in layers.iter_layers(model)]
    assert kinds.count("conv2d") == 3 and "sigmoid" in kinds  # multiply's body is iterated
    expected = 2 * (9 * 1 * 8 * 4 * 6 + 9 * 8 * 4 * 6 + 8 * 2 + 2 * 8 + 8 * 3)
    assert layers.forward_flops(model, (9, 9, 1)) == expected
    # a depthwise kernel is drawn with fan-in k*k, its own channel's inputs
    weights = init_variables(workload_from_config("t", {"model": "mobilenet", "input_size": 32, "channels": 3}), 0)[0]
    assert np.abs(weights["conv_dw_13/w"]).max() <= math.sqrt(6 / 9) and np.abs(weights["conv_dw_13/w"]).max() > 0.5


@pytest.mark.parametrize("model,needle", [
    ((layers.multiply((layers.conv2d("c", 4, 1),)),), "multiply's body must give (1, 1, 4)"),
    ((layers.dropout("d", 1.0),), "needs 0 <= rate < 1"),
    ((layers.dropout("", 0.5),), "a dropout layer needs a name"),
    ((layers.zero_pad(-1, 0, 0, 0),), "zero_pad needs four pads >= 0"),
    ((layers.global_avg_pool(keepdims=True), layers.dense("d", 3)), "dense 'd' needs features"),
])
def test_new_kinds_refuse_graphs_that_do_not_fit(model, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        layers.walk(model, (4, 4, 4))


def test_a_dropout_name_is_unique_like_any_layer_name():
    with pytest.raises(UsageError, match="layer name 'x' is used twice"):
        layers.variables((layers.conv2d("x", 2, 1), layers.dropout("x", 0.1)), (2, 2, 1))


def test_a_backbone_workload_survives_the_trip_to_a_worker():
    workload = workload_from_config("b0", {"model": "efficientnet_b0", "input_size": 32, "channels": 3,
                                           "input_normalization": "imagenet"})
    back = workload_from_dict(dataclasses.asdict(workload))
    assert back == workload and isinstance(back.layers[0].pads, tuple)


# --- masks drawn by the host ------------------------------------------------------


DROPPY = (layers.conv2d("c", 4, 3, padding=1), layers.dropout("wide", 0.25),
          layers.residual((layers.conv2d("r", 4, 1), layers.dropout("depth", 0.5, per_sample=True))),
          layers.global_avg_pool(), layers.dropout("head", 0.15), layers.dense("out", 3))


def test_masks_have_the_documented_shapes_and_scaled_values():
    masks = layers.draw_masks(DROPPY, (6, 6, 2), 64, seed=0, epoch=0, step=0)
    assert [d.name for d in layers.dropout_layers(DROPPY)] == ["wide", "depth", "head"] == list(masks)
    assert masks["wide"].shape == (64, 6, 6, 4) and masks["depth"].shape == (64,) and masks["head"].shape == (64, 4)
    for name, rate in (("wide", 0.25), ("depth", 0.5), ("head", 0.15)):
        mask = masks[name]
        assert mask.dtype == np.float32
        assert set(np.unique(mask).tolist()) <= {0.0, np.float32(1 / (1 - rate))}
    assert abs((masks["wide"] == 0).mean() - 0.25) < 0.03  # 9,216 draws
    assert 0 < (masks["depth"] == 0).sum() < 64


def test_masks_are_deterministic_and_depend_on_seed_epoch_step_and_name():
    def draw(seed=0, epoch=0, step=0):
        return layers.draw_masks(DROPPY, (6, 6, 2), 16, seed=seed, epoch=epoch, step=step)

    first, again = draw(), draw()
    assert all(np.array_equal(first[name], again[name]) for name in first)
    for other in (draw(seed=1), draw(epoch=1), draw(step=1)):
        assert not np.array_equal(first["wide"], other["wide"])
    assert not np.array_equal(layers.mask_rng(0, 0, 0, "a").random(32), layers.mask_rng(0, 0, 0, "b").random(32))


def test_a_model_without_dropout_has_no_masks():
    assert layers.draw_masks(ARCHITECTURES["resnet18"](10), (32, 32, 3), 8, 0, 0, 0) == {}
    workload = workload_from_config("m", {"model": "mnist_cnn"})
    data = load_dataset("synthetic", workload, steps=2, batch_size=4, seed=0)
    assert all(batch.masks == {} for batch in input_pipeline(workload, data, batch_size=4, steps=2, seed=0).epoch(0))


def test_the_pipeline_hands_every_batch_its_masks_and_shards_slice_them():
    workload = workload_from_config("b0", {"model": "efficientnet_b0", "input_size": 32, "channels": 3,
                                           "batch_size": 8})
    data = load_dataset("synthetic", workload, steps=3, batch_size=8, seed=5)
    pipeline = input_pipeline(workload, data, batch_size=8, steps=3, seed=5)
    whole, window = pipeline.epoch(1), pipeline.batches(1, 2, 3)
    batch = whole[2]
    names = [d.name for d in layers.dropout_layers(workload.layers)]
    assert list(batch.masks) == names and batch.masks["block2b_drop"].shape == (8,)
    assert batch.masks["head_dropout"].shape == (8, 320 * 4)
    assert all(np.array_equal(batch.masks[n], window[0].masks[n]) for n in names)  # any slicing, same masks
    expected = layers.draw_masks(workload.layers, workload.input_shape, 8, seed=5, epoch=1, step=2)
    assert all(np.array_equal(batch.masks[n], expected[n]) for n in names)
    shard = batch.rows(4, 8)
    assert isinstance(shard, Batch) and shard.size == 4 and np.array_equal(shard.images, batch.images[4:])
    assert all(np.array_equal(shard.masks[n], batch.masks[n][4:]) for n in names)


# --- the backbone workloads -------------------------------------------------------


def test_the_catalog_has_the_articles_backbone_workloads():
    tables = tomllib.loads(CATALOG.read_text())["workloads"]
    expected = {"backbone_vgg16": ("vgg16", 224, 8), "backbone_mobilenet": ("mobilenet", 160, 16),
                "backbone_resnet50": ("imagenet_resnet50", 224, 16),
                **{f"backbone_efficientnet_b{i}": (f"efficientnet_b{i}", size, 16)
                   for i, size in enumerate((224, 240, 260, 300, 380, 456))}}
    assert set(tables) == set(expected)
    for name, (model, size, batch) in expected.items():
        workload = workload_from_config(name, tables[name])
        assert (workload.model, workload.input_size, workload.channels, workload.batch_size) == (model, size, 3, batch)
        assert workload.optimizer.name == "adam" and workload.optimizer.learning_rate == 1e-4
        assert workload.num_classes == 10 and "Keras Tensor Core article" in workload.description
        assert workload.input_normalization == ("imagenet" if model.startswith("efficientnet") else "none")


def test_imagenet_input_normalization_is_checked_and_applied():
    workload = workload_from_config("e", {"model": "efficientnet_b0", "input_size": 32, "channels": 3,
                                          "input_normalization": "imagenet"})
    data = load_dataset("synthetic", workload, steps=1, batch_size=4, seed=0)
    pipeline = input_pipeline(workload, data, batch_size=4, steps=1, seed=0)
    seen = pipeline.eval_images(data.val_images[:2])
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(seen, (data.val_images[:2] - mean) / std, rtol=1e-5, atol=1e-6)
    for table, needle in (({"input_normalization": "imagenet", "channels": 1}, "needs channels = 3"),
                          ({"input_normalization": "imagenet", "channels": 3, "normalize": True}, "keep one"),
                          ({"input_normalization": "caffe"}, "must be one of none, imagenet")):
        with pytest.raises(UsageError, match=needle):
            workload_from_config("x", {"model": "efficientnet_b0", "input_size": 32, **table})
