"""CIFAR-10 from the official *binary* archive (Krizhevsky, 2009).

The binary version is a plain byte layout — each record is one label byte and
3,072 image bytes (1,024 red, then green, then blue, row-major) — so nothing
downloaded is ever unpickled.  Only the six known members are read from the
verified archive; nothing is extracted to disk.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np

from amp_suite.datasets.fetch import DatasetError, DatasetFile, locate

NAME = "cifar10"
ARCHIVE = DatasetFile("cifar-10-binary.tar.gz", 170_052_171,
                      "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd")
MIRRORS = ("https://www.cs.toronto.edu/~kriz/",)
MEMBERS = {
    "train": tuple(f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("cifar-10-batches-bin/test_batch.bin",),
}
SPLITS = tuple(MEMBERS)
# Examples in each official split (checked before a sweep starts).
SPLIT_SIZES = {"train": 50_000, "test": 10_000}
CHANNELS, SIZE, CLASSES = 3, 32, 10
RECORD = 1 + CHANNELS * SIZE * SIZE


def parse_records(data: bytes, source: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 NHWC images and int32 labels from concatenated binary records."""
    if len(data) % RECORD:
        raise DatasetError(f"{source}: {len(data)} bytes is not a whole number of {RECORD}-byte records")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD)
    labels = records[:, 0].astype(np.int32)
    if labels.size and labels.max() >= CLASSES:
        raise DatasetError(f"{source}: label {labels.max()} out of range 0-9")
    images = records[:, 1:].reshape(-1, CHANNELS, SIZE, SIZE).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def read_archive(path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Read ``split``'s members from a CIFAR-10 binary tar.gz."""
    images, labels = [], []
    with tarfile.open(path, "r:gz") as archive:
        for member in MEMBERS[split]:
            try:
                info = archive.getmember(member)
            except KeyError:
                raise DatasetError(f"{path}: member {member} is missing") from None
            if not info.isfile():
                raise DatasetError(f"{path}: member {member} is not a regular file")
            fh = archive.extractfile(info)
            assert fh is not None
            batch_images, batch_labels = parse_records(fh.read(), f"{path}:{member}")
            images.append(batch_images)
            labels.append(batch_labels)
    return np.concatenate(images), np.concatenate(labels)


def locate_split(split: str, *, data_dir: str | None, allow_download: bool) -> tuple[Path]:
    """The verified archive path (one archive holds every split)."""
    return (locate(NAME, ARCHIVE, [m + ARCHIVE.name for m in MIRRORS], data_dir=data_dir,
                   allow_download=allow_download),)


def load_split(split: str, *, data_dir: str | None, allow_download: bool) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images ``(n, 32, 32, 3)`` and int32 labels of the official ``train`` or ``test`` split."""
    (path,) = locate_split(split, data_dir=data_dir, allow_download=allow_download)
    return read_archive(path, split)
