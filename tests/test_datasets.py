"""Real datasets: the official MNIST files, CIFAR-10's binary layout, splits, resizing, downloads."""

from __future__ import annotations

import http.server
import io
import shutil
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from amp_suite.config.catalog import load_config
from amp_suite.datasets import cifar10, epoch_batches, load_dataset, mnist
from amp_suite.datasets.fetch import ChecksumMismatch, DatasetError, DatasetFile, locate
from amp_suite.datasets.preprocess import resize_bilinear, to_unit_float
from amp_suite.datasets.splits import parse_split
from amp_suite.errors import UsageError
from amp_suite.records import Batch
from amp_suite.workloads.workload import workload_from_config
from suite_cli import REPO, run_cli

# The official MNIST test split ships inside the package: tests of real digits read it from there.
PACKAGED_MNIST = mnist.BUNDLED_DIR
# Only the training labels come from outside the repository (../shared/data/mnist, where the machine has it).
SHARED_MNIST = REPO.parent / "shared" / "data" / "mnist"
needs_train_labels = pytest.mark.skipif(
    not (SHARED_MNIST / "train-labels-idx1-ubyte.gz").exists(),
    reason=f"MNIST's training labels are not shipped; this test reads them from {SHARED_MNIST}, which is absent")
MNIST_28 = workload_from_config("m", {"model": "mnist_cnn", "input_size": 28})


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AMP_SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("AMP_SUITE_DATA", raising=False)
    monkeypatch.delenv("AMP_SUITE_MIRROR", raising=False)


# --- MNIST, on the real files ---------------------------------------------


def test_mnist_test_split_is_the_official_one():
    images, labels = mnist.load_split("test", data_dir=str(PACKAGED_MNIST), allow_download=False)
    assert images.shape == (10_000, 28, 28, 1) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert images.mean() == pytest.approx(33.79, abs=0.01)


@needs_train_labels
def test_mnist_train_labels_parse():
    labels = mnist.read_idx(SHARED_MNIST / "train-labels-idx1-ubyte.gz")
    assert np.bincount(labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert labels[:5].tolist() == [5, 0, 4, 1, 9]


def test_load_dataset_takes_tfds_splits_scales_and_resizes():
    data = load_dataset("mnist", MNIST_28, steps=1, batch_size=8, seed=0, train_split="test[:8000]",
                        val_split="test[8000:]", data_dir=str(PACKAGED_MNIST), allow_download=False)
    assert data.train_images.shape == (8000, 28, 28, 1) and data.val_images.shape == (2000, 28, 28, 1)
    assert data.train_labels[:3].tolist() == [7, 2, 1]
    assert data.train_images.dtype == np.float32 and 0.0 <= data.train_images.min() < data.train_images.max() <= 1.0
    big = workload_from_config("b", {"model": "mnist_cnn", "input_size": 128})
    resized = load_dataset("mnist", big, steps=1, batch_size=8, seed=0, train_split="test[:16]",
                           val_split="test[-8:]", data_dir=str(PACKAGED_MNIST), allow_download=False)
    # kept as stored; the pipeline resizes the batch it makes
    assert resized.train_images.shape == (16, 28, 28, 1) and resized.val_labels.size == 8
    shaped = resized.model_images(resized.train_images)
    assert shaped.shape == (16, 128, 128, 1) and "resized 28x28 -> 128x128" in resized.note
    # the resized image keeps the original's brightness
    assert shaped.mean() == pytest.approx(data.train_images[:16].mean(), rel=0.02)


def test_mnist_grey_is_copied_to_three_channels_one_batch_at_a_time():
    from amp_suite.datasets import input_pipeline

    workload = workload_from_config("rgb", {"model": "vgg16", "input_size": 64, "channels": 3})
    data = load_dataset("mnist", workload, steps=2, batch_size=4, seed=0, train_split="test[:8]",
                        val_split="test[-4:]", data_dir=str(PACKAGED_MNIST), allow_download=False)
    assert data.train_images.shape == (8, 28, 28, 1) and "grey copied to 3 channels" in data.note
    pipeline = input_pipeline(workload, data, batch_size=4, steps=2, seed=0)
    batch = pipeline.batches(0, 1, 2)[0]
    assert batch.images.shape == (4, 64, 64, 3) and batch.images.dtype == np.float32
    assert np.array_equal(batch.images[..., 0], batch.images[..., 2])
    assert pipeline.eval_images(data.val_images[:2]).shape == (2, 64, 64, 3)


def test_normalize_statistics_of_shaped_images_are_summed_chunk_by_chunk(monkeypatch):
    from amp_suite.datasets import pipeline
    from amp_suite.datasets.augment import channel_stats
    from amp_suite.datasets.base import Dataset
    from amp_suite.datasets.preprocess import ImageShaping

    images = np.random.default_rng(0).random((10, 7, 7, 1), dtype=np.float32)
    labels = np.zeros(10, np.int32)
    data = Dataset("d", images, labels, images[:2], labels[:2], shaping=ImageShaping(12, 3))
    monkeypatch.setattr(pipeline, "STATS_CHUNK_VALUES", 3 * 12 * 12 * 3)  # three images a chunk
    mean, std = pipeline.training_stats(data)
    whole_mean, whole_std = channel_stats(data.model_images(images))
    assert mean.shape == (3,) and mean.dtype == np.float32
    np.testing.assert_allclose(mean, whole_mean, rtol=1e-6)
    np.testing.assert_allclose(std, whole_std, rtol=1e-5)


def test_dataset_and_workload_must_agree():
    grey = workload_from_config("g", {"model": "mnist_cnn", "input_size": 32, "channels": 1})
    with pytest.raises(UsageError, match="dataset cifar10 has 3-channel images"):
        load_dataset("cifar10", grey, steps=1, batch_size=8, seed=0)
    two = workload_from_config("t", {"model": "mnist_cnn", "input_size": 28, "num_classes": 3})
    with pytest.raises(UsageError, match="dataset mnist has 1-channel images in 10 classes"):
        load_dataset("mnist", two, steps=1, batch_size=8, seed=0)


# --- splits and preprocessing ----------------------------------------------


@pytest.mark.parametrize("text,count,bounds", [
    ("test", 10_000, (0, 10_000)),
    ("test[:8000]", 10_000, (0, 8000)),
    ("test[8000:]", 10_000, (8000, 10_000)),
    ("train[:10%]", 60_000, (0, 6000)),
    ("train[10%:20%]", 60_000, (6000, 12_000)),
    ("test[-1000:]", 10_000, (9000, 10_000)),
])
def test_split_bounds(text, count, bounds):
    assert parse_split(text, ("train", "test")).bounds(count) == bounds


@pytest.mark.parametrize("text,needle", [
    ("test[:80", "malformed split"),
    ("valid", "unknown split 'valid'"),
    ("test[5:5]", "selects no example"),
])
def test_bad_splits(text, needle):
    with pytest.raises(UsageError, match=needle):
        parse_split(text, ("train", "test")).bounds(100)


def test_bilinear_resize_uses_half_pixel_centres():
    row = np.array([0.0, 1.0], dtype=np.float32).reshape(1, 1, 2, 1).repeat(2, axis=1)
    out = resize_bilinear(row, 4)
    np.testing.assert_allclose(out[0, 0, :, 0], [0.0, 0.25, 0.75, 1.0], atol=1e-6)
    constant = np.full((2, 5, 5, 3), 0.3, np.float32)
    np.testing.assert_allclose(resize_bilinear(constant, 9), 0.3, atol=1e-6)
    assert to_unit_float(np.array([0, 255], np.uint8)).tolist() == [0.0, 1.0]


# --- CIFAR-10's binary layout, on files the test writes ---------------------


def _records(labels: list[int], rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    images = rng.integers(0, 256, size=(len(labels), 3, 32, 32), dtype=np.uint8)  # CHW, as stored
    data = b"".join(bytes([label]) + image.tobytes() for label, image in zip(labels, images, strict=True))
    return data, images


def test_cifar_records_are_label_then_red_green_blue_planes():
    data, chw = _records([3, 9], np.random.default_rng(0))
    images, labels = cifar10.parse_records(data, "test")
    assert labels.tolist() == [3, 9] and images.shape == (2, 32, 32, 3)
    assert images[1, 5, 7, 2] == data[cifar10.RECORD + 1 + 2 * 1024 + 5 * 32 + 7] == chw[1, 2, 5, 7]
    with pytest.raises(DatasetError, match="whole number"):
        cifar10.parse_records(data[:-1], "short")


def _write_archive(path: Path, batches: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, payload in batches.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))


def test_cifar_archive_reader_takes_the_split_members(tmp_path):
    rng = np.random.default_rng(1)
    members = {m: _records([i % 10, (i + 1) % 10], rng)[0] for i, m in enumerate(cifar10.MEMBERS["train"])}
    test_bytes, test_chw = _records([4, 5, 6], rng)
    members[cifar10.MEMBERS["test"][0]] = test_bytes
    archive = tmp_path / "cifar-10-binary.tar.gz"
    _write_archive(archive, members)
    train_images, train_labels = cifar10.read_archive(archive, "train")
    assert train_images.shape == (10, 32, 32, 3) and train_labels.tolist()[:4] == [0, 1, 1, 2]
    test_images, test_labels = cifar10.read_archive(archive, "test")
    assert test_labels.tolist() == [4, 5, 6]
    np.testing.assert_array_equal(test_images, test_chw.transpose(0, 2, 3, 1))
    del members[cifar10.MEMBERS["test"][0]]
    _write_archive(archive, members)
    with pytest.raises(DatasetError, match="test_batch.bin is missing"):
        cifar10.read_archive(archive, "test")


def test_a_non_official_cifar_archive_is_refused_by_checksum(tmp_path):
    archive = tmp_path / "cifar-10-binary.tar.gz"
    _write_archive(archive, {})
    with pytest.raises(ChecksumMismatch) as info:
        cifar10.load_split("test", data_dir=str(tmp_path), allow_download=False)
    assert str(archive) in str(info.value) and cifar10.ARCHIVE.sha256 in str(info.value)


# --- downloads, from a local HTTP server on loopback ------------------------


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


LABELS = mnist.FILES["test-labels"]


def _official_labels() -> bytes:
    return (PACKAGED_MNIST / LABELS.name).read_bytes()


def _serve(root: Path, folder: str, payload: bytes) -> None:
    (root / folder).mkdir(exist_ok=True)
    (root / folder / LABELS.name).write_bytes(payload)


def test_download_verifies_and_caches_atomically(server, tmp_path):
    root, base = server
    good = _official_labels()
    _serve(root, "good", good)
    path = locate("mnist", LABELS, [f"{base}/good/{LABELS.name}"])
    assert path == tmp_path / "cache" / "datasets" / "mnist" / LABELS.name
    assert path.read_bytes() == good
    assert [p.name for p in path.parent.iterdir()] == [LABELS.name]  # no temporary left behind
    (root / "good" / LABELS.name).unlink()  # the cache now serves it, without the network
    assert locate("mnist", LABELS, [f"{base}/good/{LABELS.name}"]) == path


def test_bad_mirrors_are_skipped_for_a_good_one(server):
    root, base = server
    good = _official_labels()
    _serve(root, "truncated", good[:-100])
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2] ^= 0xFF
    _serve(root, "corrupt", bytes(corrupt))
    _serve(root, "good", good)
    urls = [f"{base}/{d}/{LABELS.name}" for d in ("missing", "truncated", "corrupt", "good")]
    assert locate("mnist", LABELS, urls).read_bytes() == good


@pytest.mark.parametrize("folder,payload_edit,needle", [
    ("truncated", lambda b: b[:-100], "truncated download"),
    ("corrupt", lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "does not match the expected " + LABELS.sha256),
    ("missing", None, "404"),
])
def test_only_bad_sources_give_a_clear_error_and_an_empty_cache(server, tmp_path, folder, payload_edit, needle):
    root, base = server
    if payload_edit is not None:
        _serve(root, folder, payload_edit(_official_labels()))
    with pytest.raises(DatasetError) as info:
        locate("mnist", LABELS, [f"{base}/{folder}/{LABELS.name}"])
    assert needle in str(info.value) and "--data-dir" in str(info.value)
    cache = tmp_path / "cache" / "datasets" / "mnist"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_mirror_environment_variable_is_tried_first(server, monkeypatch):
    root, base = server
    _serve(root, "mnist", _official_labels())
    monkeypatch.setenv("AMP_SUITE_MIRROR", base)
    assert locate("mnist", LABELS, ["http://127.0.0.1:9/unreachable"]).exists()


def test_files_in_the_data_dir_are_verified_too(tmp_path):
    spec = DatasetFile("x.bin", 3, "0" * 64)
    (tmp_path / "x.bin").write_bytes(b"abc")
    with pytest.raises(ChecksumMismatch, match="sha256 .* does not match the expected 0000"):
        locate("d", spec, [], data_dir=tmp_path)


# --- through the command line ------------------------------------------------


def test_corrupted_file_in_data_dir_stops_the_run_before_training(tiny_config, tmp_path):
    data_dir = tmp_path / "mnist"
    shutil.copytree(PACKAGED_MNIST, data_dir)
    images = data_dir / "t10k-images-idx3-ubyte.gz"
    blob = bytearray(images.read_bytes())
    blob[5000] ^= 0x55
    images.write_bytes(bytes(blob))
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--dataset", "mnist",
                  "--workloads", "mnist_cnn", "--data-dir", str(data_dir), "--train-split", "test[:64]",
                  "--val-split", "test[64:128]", "--no-download")
    assert out.returncode == 2
    message = out.stderr.strip().splitlines()[-1]
    assert str(images) in message and mnist.FILES["test-images"].sha256 in message
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_offline_without_files_is_an_error_unless_fallback_is_asked(tiny_config, tmp_path):
    (tmp_path / "empty").mkdir()
    args = ("run", "--config", str(tiny_config), "-p", "fakefw", "--dataset", "mnist", "--workloads",
            "mnist_cnn", "--data-dir", str(tmp_path / "empty"), "--no-download", "--precisions", "fp32",
            "--steps", "3", "--warmup", "1")
    env = {"AMP_SUITE_CACHE": str(tmp_path / "cache")}
    refused = run_cli(*args, env=env)
    assert refused.returncode == 2
    assert "train-images-idx3-ubyte.gz of mnist is not in" in refused.stderr
    assert "synthetic_fallback" in refused.stderr
    allowed = run_cli(*args, "--synthetic-fallback", env=env)
    assert allowed.returncode == 0, allowed.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**Data substitution:**" in report and "SUBSTITUTED" in report


def test_fake_framework_learns_real_mnist_through_the_cli(tiny_config, tmp_path):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--dataset", "mnist",
                  "--workloads", "mnist_cnn", "--data-dir", str(PACKAGED_MNIST), "--train-split", "test[:8000]",
                  "--val-split", "test[8000:]", "--steps", "100", "--epochs", "2", "--precisions", "fp32")
    assert out.returncode == 0, out.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "mnist: train test[:8000] (8000 examples), validation test[8000:] (2000 examples)" in report
    import json
    row = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    assert row["metrics"]["val_examples"] == 2000
    assert row["metrics"]["val_accuracy"] > 0.8  # a linear model on real digits


def test_cifar_through_load_dataset_with_a_known_checksum(tmp_path, monkeypatch):
    import hashlib

    rng = np.random.default_rng(2)
    members = {m: _records([1, 2, 3, 4], rng)[0] for m in cifar10.MEMBERS["train"]}
    members[cifar10.MEMBERS["test"][0]] = _records([7, 8], rng)[0]
    archive = tmp_path / "cifar-10-binary.tar.gz"
    _write_archive(archive, members)
    blob = archive.read_bytes()
    # stand the written archive in for the official one
    monkeypatch.setattr(cifar10, "ARCHIVE", DatasetFile(archive.name, len(blob), hashlib.sha256(blob).hexdigest()))
    workload = workload_from_config("c", {"model": "mnist_cnn", "input_size": 32, "channels": 3})
    data = load_dataset("cifar10", workload, steps=1, batch_size=4, seed=0, train_split="train[:50%]",
                        val_split="test", data_dir=str(tmp_path), allow_download=False)
    assert data.train_images.shape == (10, 32, 32, 3) and data.val_labels.tolist() == [7, 8]
    assert data.train_images.dtype == np.float32 and data.train_images.max() <= 1.0


def test_synthetic_validation_shrinks_for_large_inputs_only():
    # accuracy on synthetic data is n/a: an ImageNet-sized input validates on 41 images, not 512
    from amp_suite.datasets import load_dataset
    from amp_suite.workloads.workload import workload_from_config

    small = workload_from_config("small", {"model": "mnist_cnn", "input_size": 28, "batch_size": 8})
    large = workload_from_config("large", {"model": "mnist_cnn", "input_size": 224, "channels": 3,
                                           "batch_size": 2})
    assert load_dataset("synthetic", small, steps=2, batch_size=8, seed=0).val_labels.shape[0] == 512
    data = load_dataset("synthetic", large, steps=3, batch_size=2, seed=0)
    assert data.val_labels.shape[0] == 41 and data.train_labels.shape[0] == 6


def test_synthetic_data_is_seeded_in_range_and_learnable_shape():
    w = load_config(REPO / "benchmarks.toml").workloads["mnist_cnn"]
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


def test_a_batch_in_float64_keeps_its_labels_and_a_float32_one_is_not_copied() -> None:
    images = np.arange(2 * 3 * 3 * 1, dtype=np.float32).reshape(2, 3, 3, 1) / 7
    labels = np.array([3, 1], dtype=np.int32)
    mask = np.array([0.0, 2.0], dtype=np.float32)
    batch = Batch(images, labels, {"drop": mask})
    wide = batch.astype("float64")
    assert wide.images.dtype == np.float64 and wide.masks["drop"].dtype == np.float64
    assert wide.labels is labels and wide.labels.dtype == np.int32
    assert np.array_equal(wide.images, images.astype(np.float64)) and list(wide.masks["drop"]) == [0.0, 2.0]
    same = batch.astype("float32")
    assert same.images is images and same.masks["drop"] is mask
