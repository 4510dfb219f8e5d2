"""The layer vocabulary, the architectures, the workload schema and the host's input pipeline."""

import math

import numpy as np
import pytest

from amp_suite.config.catalog import load_config
from amp_suite.datasets import input_pipeline, load_dataset
from amp_suite.datasets.augment import augmentation_rng, random_crop_flip
from amp_suite.errors import UsageError
from amp_suite.plugins.host import PluginHost
from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.workload import (
    forward_flops_per_image,
    init_variables,
    layers,
    learning_rate_at,
    param_count,
    train_flops_per_image,
    variable_specs,
    workload_from_config,
)
from suite_cli import REPO

CONFIG = load_config(REPO / "benchmarks.toml")


@pytest.mark.parametrize("workload,params", [
    ("cifar10_resnet18", 11_173_962), ("cifar10_resnet50", 23_520_842), ("mnist_deep_cnn", 1_182_858),
    ("mnist_cnn", 824_458),
])
def test_architectures_have_the_articles_parameter_counts(workload, params):
    weights, _ = init_variables(CONFIG.workloads[workload], 0)
    assert param_count(weights) == params


def test_resnet_declares_batch_norm_state_apart_from_parameters():
    w = CONFIG.workloads["cifar10_resnet18"]
    specs = {v.name: v for v in variable_specs(w)}
    assert specs["bn1/mean"].trainable is False and specs["bn1/var"].trainable is False
    assert specs["bn1/scale"].trainable and specs["bn1/offset"].trainable
    assert "conv1/b" not in specs  # convolutions before BatchNorm have no bias
    assert specs["layer2_0_shortcut_conv/w"].shape == (1, 1, 64, 128)  # projection where the shape changes
    assert "layer1_0_shortcut_conv/w" not in specs and "layer1_1_shortcut_conv/w" not in specs
    weights, state = init_variables(w, 0)
    assert np.all(state["bn1/mean"] == 0) and np.all(state["bn1/var"] == 1)
    assert np.all(weights["bn1/scale"] == 1) and np.all(weights["bn1/offset"] == 0)
    assert set(state) == {n for n, v in specs.items() if not v.trainable}


def test_resnet8_is_he_et_al_smallest_cifar_resnet():
    w = CONFIG.workloads["mnist_resnet8"]
    convs = [v for v in variable_specs(w) if v.name.endswith("/w") and len(v.shape) == 4]
    assert [c.shape[-1] for c in convs] == [16, 16, 16, 32, 32, 32, 64, 64, 64]
    assert variable_specs(w)[-2].shape == (64, 10)  # global average pool -> dense


def test_flops_count_every_multiply_add_twice():
    # deep_cnn on 28x28: 26x26, 24x24, pool to 12x12, 10x10, 8x8, 6x6, then 4608 -> 128 -> 10
    expected = 2 * (9 * 1 * 128 * 26 * 26 + 9 * 128 * 128 * (24 * 24 + 10 * 10 + 8 * 8 + 6 * 6)
                    + 4608 * 128 + 128 * 10)
    w = CONFIG.workloads["mnist_deep_cnn"]
    assert forward_flops_per_image(w) == expected and train_flops_per_image(w) == 3 * expected
    # CIFAR ResNet-18: the well-known 0.56 GMAC forward pass
    assert abs(forward_flops_per_image(CONFIG.workloads["cifar10_resnet18"]) / 2e9 - 0.556) < 0.001


def test_a_new_architecture_is_one_entry_made_of_known_kinds():
    def tiny(num_classes, input_size):
        return (layers.conv2d("c", 4, 3, stride=2, padding=1, use_bias=False), layers.batch_norm("bn"),
                layers.relu(), layers.residual((layers.conv2d("r", 4, 3, padding=1),)),
                layers.max_pool(2), layers.global_avg_pool(), layers.dense("out", num_classes))

    ARCHITECTURES["tiny_test_net"] = tiny
    try:
        w = workload_from_config("t", {"model": "tiny_test_net", "input_size": 9, "channels": 2})
        shapes = [(s.layer.kind, s.output_shape) for s in layers.walk(w.layers, w.input_shape)]
        assert shapes[0] == ("conv2d", (5, 5, 4)) and ("max_pool", (2, 2, 4)) in shapes
        assert shapes[-1] == ("dense", (10,))
    finally:
        del ARCHITECTURES["tiny_test_net"]


@pytest.mark.parametrize("table,needle", [
    ({"batchsize": 3}, "unknown key 'batchsize' (did you mean 'batch_size'?)"),
    ({"learning_rat": 0.1}, "(did you mean 'learning_rate'?)"),
    ({"input_size": "ten"}, "input_size must be an integer, got 'ten'"),
    ({"input_size": 28.9}, "input_size must be an integer"),
    ({"batch_size": [1, 2]}, "batch_size must be an integer"),
    ({"learning_rate": math.nan}, "learning_rate must be a finite number, got nan"),
    ({"augment": "false"}, "augment must be true or false"),
    ({"optimizer": "adagrad"}, "optimizer must be one of sgd, rmsprop, adam, adamw; got 'adagrad'"),
    ({"optimizer": "adam", "momentum": 0.9}, "momentum does not apply to optimizer 'adam'"),
    ({"model": "deep_cnn", "input_size": 8}, "[workloads.w]: the input is too small"),
])
def test_bad_workload_tables_fail_with_one_line(table, needle):
    with pytest.raises(UsageError) as info:
        workload_from_config("w", {"model": "mnist_cnn", **table})
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_workload_that_is_not_a_table_is_refused():
    with pytest.raises(UsageError, match="must be a table"):
        workload_from_config("mnist_cnn", 3)


def test_cosine_schedule_decays_to_zero_over_the_run():
    w = workload_from_config("w", {"model": "mnist_cnn", "optimizer": "sgd", "learning_rate": 0.1,
                                   "schedule": "cosine"})
    spec = w.optimizer.__class__(**{**w.optimizer.__dict__, "decay_steps": 10})
    assert learning_rate_at(spec, 0) == pytest.approx(0.1)
    assert learning_rate_at(spec, 5) == pytest.approx(0.05)
    assert learning_rate_at(spec, 10) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate_at(CONFIG.workloads["mnist_cnn"].optimizer, 7) == 1e-3  # constant by default


def test_augmentation_is_seeded_per_epoch_and_differs_between_epochs():
    w = CONFIG.workloads["cifar10_resnet18"]
    data = load_dataset("synthetic", w, steps=2, batch_size=8, seed=0)
    a = input_pipeline(w, data, batch_size=8, steps=2, seed=0)
    b = input_pipeline(w, data, batch_size=8, steps=2, seed=0)
    e0, again, e1 = a.epoch(0), b.epoch(0), a.epoch(1)
    assert all(np.array_equal(x.images, y.images) for x, y in zip(e0, again, strict=True))  # every framework sees these
    assert not np.array_equal(e0[0].images, e1[0].images)
    seen = a.eval_images(data.train_images).reshape(-1, 3)  # normalized with the training split's statistics
    np.testing.assert_allclose(seen.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(seen.std(axis=0), 1, atol=1e-3)
    assert a.eval_images(data.val_images).dtype == np.float32


def test_random_crop_pads_with_zeros_and_flips():
    images = np.ones((64, 8, 8, 1), np.float32)
    images[:, :, :4] = 0.5  # left half darker, to see flips
    out = random_crop_flip(images, augmentation_rng(0, 0, 0))
    assert out.shape == images.shape
    assert (out == 0).any()  # some crops reach into the zero padding
    centre = out[:, 4, 2, 0], out[:, 4, 5, 0]
    assert ((centre[0] == 1.0) & (centre[1] == 0.5)).any()  # some images were mirrored


def test_a_worker_host_keeps_only_its_framework_plugin():
    every = PluginHost()
    assert {"torch", "keras", "jax"} <= set(every.frameworks())
    only = PluginHost(framework="keras")
    assert set(only.frameworks()) == {"keras"}
    names = {d.name for d in only.describe()}
    assert "host_measure" in names and "reporters" in names and "torch" not in names and "jax" not in names


def test_no_framework_hook_asks_which_framework_it_is_called_for():
    for path in (REPO / "builtin" / "amp_suite_plugins").glob("*.py"):
        assert "run.framework" not in path.read_text(), path.name


def test_a_workload_may_set_its_own_steps_which_the_command_line_overrides(tmp_path):
    from amp_suite.config.catalog import with_overrides
    from amp_suite.sweep.cells import plan_cells

    config = load_config(REPO / "benchmarks.toml")
    settings = with_overrides(config.settings, workloads=("mnist_resnet8", "mnist_cnn"), frameworks=("jax",),
                              precisions=("fp32",))
    steps = {c.run.workload: c.run.steps for c in plan_cells(config, settings)}
    assert steps == {"mnist_resnet8": 62, "mnist_cnn": config.settings.steps}
    steps = {c.run.workload: c.run.steps for c in plan_cells(config, settings, explicit_steps=7)}
    assert steps == {"mnist_resnet8": 7, "mnist_cnn": 7}
