"""Canonical workloads and weights: the same for every framework, every time."""

import numpy as np

from amp_suite.config.catalog import load_config
from amp_suite.workloads.workload import flatten_input_shape, init_weights, param_count, parameter_shapes
from suite_cli import REPO

CONFIG = load_config(REPO / "benchmarks.toml")


def test_mnist_cnn_shapes_follow_the_haiku_example():
    w = CONFIG.workloads["mnist_cnn"]
    shapes = parameter_shapes(w)
    assert shapes == {
        "conv1/w": (3, 3, 1, 32), "conv1/b": (32,),
        "conv2/w": (3, 3, 32, 64), "conv2/b": (64,),
        "dense1/w": (7 * 7 * 64, 256), "dense1/b": (256,),
        "logits/w": (256, 10), "logits/b": (10,),
    }
    assert flatten_input_shape(w) == (7, 7, 64)
    big = CONFIG.workloads["mnist_cnn_128"]
    assert parameter_shapes(big)["dense1/w"] == (32 * 32 * 64, 256)


def test_initial_weights_are_seeded_and_he_uniform():
    w = CONFIG.workloads["mnist_cnn"]
    a, b, c = init_weights(w, 0), init_weights(w, 0), init_weights(w, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["conv1/w"], c["conv1/w"])
    assert all(a[k].dtype == np.float32 for k in a)
    assert np.all(a["dense1/b"] == 0)
    limit = np.sqrt(6 / (3 * 3 * 32))
    assert np.abs(a["conv2/w"]).max() <= limit and np.abs(a["conv2/w"]).max() > 0.9 * limit
    assert param_count(a) == 320 + 18_496 + 803_072 + 2_570
