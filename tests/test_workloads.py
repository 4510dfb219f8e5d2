"""Canonical weights, data and batch order: the same for every framework, every time."""

import numpy as np

from amp_suite.config import load_config
from amp_suite.datasets import epoch_batches, load_dataset
from amp_suite.environment import cpu_info
from amp_suite.workloads import flatten_input_shape, init_weights, param_count, parameter_shapes
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


def test_synthetic_data_is_seeded_in_range_and_learnable_shape():
    w = CONFIG.workloads["mnist_cnn"]
    d1 = load_dataset("synthetic", w, steps=3, batch_size=16, seed=0)
    d2 = load_dataset("synthetic", w, steps=3, batch_size=16, seed=0)
    assert d1.train_images.shape == (48, 28, 28, 1) and d1.train_images.dtype == np.float32
    assert np.array_equal(d1.train_images, d2.train_images) and np.array_equal(d1.val_labels, d2.val_labels)
    assert d1.train_images.min() >= 0 and d1.train_images.max() <= 1
    assert set(np.unique(d1.train_labels)) <= set(range(10))


def test_batch_order_is_seeded_reshuffled_per_epoch_and_drops_partial_batches():
    images = np.arange(50, dtype=np.float32).reshape(50, 1, 1, 1)
    labels = np.arange(50, dtype=np.int32)
    e0 = epoch_batches(images, labels, batch_size=8, steps=100, seed=3, epoch=0)
    again = epoch_batches(images, labels, batch_size=8, steps=100, seed=3, epoch=0)
    e1 = epoch_batches(images, labels, batch_size=8, steps=100, seed=3, epoch=1)
    assert len(e0) == 6  # 50 // 8
    assert [b.labels.tolist() for b in e0] == [b.labels.tolist() for b in again]
    assert [b.labels.tolist() for b in e0] != [b.labels.tolist() for b in e1]
    seen = np.concatenate([b.labels for b in e0])
    assert len(set(seen.tolist())) == 48
    assert all(np.array_equal(b.images[:, 0, 0, 0], b.labels) for b in e0)
    assert len(epoch_batches(images, labels, batch_size=8, steps=2, seed=3, epoch=0)) == 2


def test_cpu_flags_are_read_from_cpuinfo():
    text = "processor\t: 0\nmodel name\t: Example Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile avx512_fp16\n"
    info = cpu_info(text)
    assert info["cpu_model"] == "Example Xeon"
    assert info["cpu_flags"] == ["avx2", "avx512f", "avx512_fp16", "amx_tile", "amx_bf16"]
