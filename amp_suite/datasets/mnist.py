"""MNIST from the official IDX gzip files (LeCun, Cortes and Burges).

The official test split (``t10k``, 10,000 images, 1.6 MB) ships inside the
package (``data/mnist/``, with its licence note), so ``test[:8000]`` /
``test[8000:]`` — the default sweep's splits — work offline on a fresh
install.  The 60,000 training images (9.9 MB) are downloaded on first use.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from amp_suite.datasets.fetch import DatasetError, DatasetFile, locate

NAME = "mnist"
# Sizes and SHA-256 of the official files (the same values torchvision's MD5s
# and TFDS's checksums identify).
FILES = {
    "train-images": DatasetFile("train-images-idx3-ubyte.gz", 9_912_422,
                                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
    "train-labels": DatasetFile("train-labels-idx1-ubyte.gz", 28_881,
                                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
    "test-images": DatasetFile("t10k-images-idx3-ubyte.gz", 1_648_877,
                               "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
    "test-labels": DatasetFile("t10k-labels-idx1-ubyte.gz", 4_542,
                               "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
}
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
SPLITS = ("train", "test")
# Examples in each official split (checked before a sweep starts).
SPLIT_SIZES = {"train": 60_000, "test": 10_000}
CHANNELS, SIZE, CLASSES = 1, 28, 10
# The official files shipped in the package (verified against FILES like any other copy).
BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "mnist"
BUNDLED = ("test-images", "test-labels")


def read_idx(path: Path) -> np.ndarray:
    """Parse a gzipped IDX file (magic, dimensions, unsigned bytes) into a uint8 array."""
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    if len(data) < 8 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DatasetError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims))
    if len(data) - offset != expected:
        raise DatasetError(f"{path}: {len(data) - offset} data bytes, header says {expected}")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def locate_split(split: str, *, data_dir: str | None, allow_download: bool) -> tuple[Path, Path]:
    """Verified paths of ``split``'s image and label files (downloading them if needed)."""
    paths = []
    for kind in ("images", "labels"):
        spec = FILES[f"{split}-{kind}"]
        key = f"{split}-{kind}"
        bundled = BUNDLED_DIR / spec.name if key in BUNDLED else None
        paths.append(locate(NAME, spec, [m + spec.name for m in MIRRORS], data_dir=data_dir,
                            allow_download=allow_download, bundled=bundled))
    return paths[0], paths[1]


def load_split(split: str, *, data_dir: str | None, allow_download: bool) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images ``(n, 28, 28, 1)`` and int32 labels of the official ``train`` or ``test`` split."""
    images_path, labels_path = locate_split(split, data_dir=data_dir, allow_download=allow_download)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.shape[0] != labels.shape[0]:
        raise DatasetError(f"mnist {split}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images[..., None], labels.astype(np.int32)
